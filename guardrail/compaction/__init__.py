"""Compaction: a long conversation rebuilt as the ledger block, a summary and the last turns.

:func:`compact` keeps identifiers out of the summarizer's reach: it
harvests them into the ledger, masks them as ``[role]`` in what it
summarizes, lints the summary, and writes the ledger block, sealed, before
it. The modules inside are its steps, top-down: ``_compact`` (the options
and the six steps); ``_outcome`` (the result and its report, and how ids and
tokens are counted); ``_cut`` (where to cut, the earlier compacted message,
the results to harvest), ``_masking`` (every known id in text named by its
role), ``_lint`` (the summary lint) and ``_recent`` (the bounded block given to the
model every turn); ``_block`` (the ledger block, its seal, reading it back)
and ``_summarize`` (the summarizer protocol, the extractive summarizer, the
chat-model adapter).

Imports: the guard and everything below it. The message shapes are the
core's (:mod:`guardrail._transcript`).
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
from guardrail.compaction._lint import LintIssue
from guardrail.compaction._outcome import CompactionReport, CompactionResult
from guardrail.compaction._recent import DEFAULT_BLOCK_TOKENS, recent_block
from guardrail.compaction._summarize import (
    SUMMARY_HEADER,
    Summarizer,
    extractive_summary,
    model_summarizer,
)

__all__ = [
    "BLOCK_HEADER",
    "DEFAULT_BLOCK_TOKENS",
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
    "recent_block",
]
