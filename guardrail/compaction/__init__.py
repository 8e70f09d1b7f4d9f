"""Compaction: a long conversation rebuilt as the ledger block, a summary and the last turns.

:func:`compact` keeps identifiers out of the summarizer's reach: it
harvests them into the ledger, masks them as ``[role]`` in what it
summarizes, lints the summary, and writes the ledger block, sealed, before
it. The modules inside are the steps: the cut and the harvest, masking and
lint, the summarizers, the ledger block, the report, and the six steps
themselves. The message shapes are the core's (:mod:`guardrail._messages`).
"""

from guardrail.compaction._block import BLOCK_HEADER, ledger_block, ledger_facts, ledger_values
from guardrail.compaction._compact import (
    DEFAULT_KEEP_RECENT,
    CompactOptions,
    SummaryOptions,
    compact,
    compact_text,
)
from guardrail.compaction._cut import choose_cut
from guardrail.compaction._masking import LintIssue
from guardrail.compaction._report import CompactionReport, CompactionResult
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
    "CompactOptions",
    "CompactionReport",
    "CompactionResult",
    "LintIssue",
    "Summarizer",
    "SummaryOptions",
    "choose_cut",
    "compact",
    "compact_text",
    "extractive_summary",
    "ledger_block",
    "ledger_facts",
    "ledger_values",
    "model_summarizer",
]
