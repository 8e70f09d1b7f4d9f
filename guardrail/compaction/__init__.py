"""Compaction: a long conversation rebuilt as the ledger block, a summary and the last turns.

:func:`compact` keeps identifiers out of the summarizer's reach: it
harvests them into the ledger, masks them as ``[role]`` in what it
summarizes, lints the summary, and writes the ledger block, sealed, before
it. The modules inside are the steps: message shapes, masking and lint, the
summarizers, the ledger block, and the six steps themselves.
"""

from typing import TYPE_CHECKING

from guardrail._deprecation import renamed_names
from guardrail.compaction._block import BLOCK_HEADER, ledger_block
from guardrail.compaction._compact import (
    DEFAULT_KEEP_RECENT,
    CompactionReport,
    CompactionResult,
    choose_cut,
    compact,
    compact_text,
)
from guardrail.compaction._masking import LintIssue
from guardrail.compaction._summarize import (
    SUMMARY_HEADER,
    Summarizer,
    extractive_summary,
    model_summarizer,
)

__all__ = [
    "BLOCK_HEADER",
    "DEFAULT_KEEP_RECENT",
    "SUMMARY_HEADER",
    "CompactionReport",
    "CompactionResult",
    "LintIssue",
    "Summarizer",
    "choose_cut",
    "compact",
    "compact_text",
    "extractive_summary",
    "ledger_block",
    "model_summarizer",
]

#: Old (British) spellings, each still importable for one release with a DeprecationWarning.
_RENAMED = {"Summariser": "Summarizer", "model_summariser": "model_summarizer"}

if TYPE_CHECKING:
    # Type checkers see the old names as the new ones; at run time they warn (below).
    Summariser = Summarizer
    model_summariser = model_summarizer
else:
    __getattr__ = renamed_names(__name__, _RENAMED, globals())
