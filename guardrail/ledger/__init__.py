"""The ledger: one conversation's identifiers, verbatim, with roles and provenance.

Identifiers enter from tool results (verified) or from what the user typed
(unverified until a successful ``read`` call confirms them). Each entry has
a role, the name a summary uses for it; roles are unique and stable, and a
relabel keeps the old name as an alias. A full ledger evicts the entry used
least recently, never by first-seen and never one used in the current turn,
and leaves a bounded tombstone so a later use is reported as evicted rather
than invented. One call adds a bounded number of new ids; those it named but
the ledger did not keep are remembered (bounded too) as dropped.

:class:`Ledger` is what a program holds. Inside, top-down:

- ``_ledger``: the public :class:`Ledger`, wrapping a state;
- ``_records``: the ledger as records and meta, the one loader and the one
  merge (``absorb``) that read them back;
- ``_rekey``: entries keyed again under a guard's normalisers;
- ``_settled``: whether a result's ids are held as it would leave them (a read
  that brings nothing new then only marks them used);
- ``_state``: ``LedgerState``, the id tables the check, the engine, masking
  and the journal work on, with a named interface (``admit``, ``touch``,
  ``lookup``, ``tombstone``...);
- ``_texts``: the user's last texts and result texts kept beside the tables;
- ``_fresh``: a batch of ids all new to the ledger, admitted in one pass, and
  the notes a batch gives the entries it names;
- ``_calls`` (the calls held for the user's answer, each run once), ``_index``
  (each kind's keys in order, for prefix search), ``_merge`` (the
  merge rule every store follows), ``_overflow`` (what one admission could
  not keep), ``_rebuild`` (a stored session checked and built in one pass),
  ``_reprompts`` (re-prompt counts), ``_roles`` (role names and templates)
  and ``_saved`` (the saved format, checked field by field).

Imports: :mod:`guardrail.kinds`, :mod:`guardrail.errors` and the plain data
below them.
"""

from guardrail._data.entry import Dropped, Entry, Mention, Source, Tombstone
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
