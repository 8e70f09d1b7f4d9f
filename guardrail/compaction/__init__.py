"""Compaction: a long conversation rebuilt as the ledger block, a summary and the last turns.

:func:`compact` keeps identifiers out of the summariser's reach: it
harvests them into the ledger, masks them as ``[role]`` in what it
summarises, lints the summary, and writes the ledger block, sealed, before
it. The modules inside are the steps: message shapes, masking and lint, the
summarisers, the ledger block, and the six steps themselves.
"""

from guardrail.compaction._block import BLOCK_HEADER, ledger_block
from guardrail.compaction._compact import (
    DEFAULT_KEEP_RECENT,
    CompactionReport,
    CompactionResult,
    choose_cut,
    compact,
)
from guardrail.compaction._masking import LintIssue
from guardrail.compaction._summarize import (
    SUMMARY_HEADER,
    Summariser,
    extractive_summary,
    model_summariser,
)

__all__ = [
    "BLOCK_HEADER",
    "DEFAULT_KEEP_RECENT",
    "SUMMARY_HEADER",
    "CompactionReport",
    "CompactionResult",
    "LintIssue",
    "Summariser",
    "choose_cut",
    "compact",
    "extractive_summary",
    "ledger_block",
    "model_summariser",
]
