"""The ledger: one conversation's identifiers, verbatim, with roles and provenance.

Identifiers enter from tool results (verified) or from what the user typed
(unverified until a successful ``read`` call confirms them). Each entry has
a role, the name a summary uses for it; roles are unique and stable, and a
relabel keeps the old name as an alias. A full ledger evicts the entry used
least recently, never by first-seen and never one used in the current turn,
and leaves a bounded tombstone so a later use is reported as evicted rather
than invented. One call adds a bounded number of new ids; those it named but
the ledger did not keep are remembered (bounded too) as dropped.

:class:`Ledger` is what a program holds; the modules inside are the state
the guard works on (``_state``), entries and their records (``_entry``),
records, loading and merging (``_records``), the store journal
(``_journal``) and the checked saved format (``_saved``).
"""

from guardrail._entry import Dropped, Entry, Mention, Source, Tombstone
from guardrail.ledger._ledger import FORMAT_VERSION, Ledger
from guardrail.ledger._merge import USER_TEXTS_KEPT
from guardrail.ledger._state import DEFAULT_CAPACITY

__all__ = [
    "DEFAULT_CAPACITY",
    "FORMAT_VERSION",
    "USER_TEXTS_KEPT",
    "Dropped",
    "Entry",
    "Ledger",
    "Mention",
    "Source",
    "Tombstone",
]
