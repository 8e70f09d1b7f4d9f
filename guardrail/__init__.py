"""guardrail: keep LLM agents from acting on identifiers they never really saw."""

from guardrail._guard import Guard, SessionScope
from guardrail._spec import Id, ToolSpec
from guardrail._verdict import Finding, Rejection, Verdict
from guardrail.compaction import (
    CompactionReport,
    CompactionResult,
    Summarizer,
    compact,
    extractive_summary,
    model_summarizer,
)
from guardrail.errors import (
    GuardrailError,
    GuardrailUsageError,
    IdentifierViolation,
    ManifestError,
    RepromptLimitExceeded,
    StoreError,
    TraceFileError,
    TranscriptError,
)
from guardrail.kinds import Kind
from guardrail.ledger import Entry, Ledger, Source, Tombstone
from guardrail.stores import MemoryStore, SQLiteStore, Store

__version__ = "0.1.0.dev0"

__all__ = [
    "CompactionReport",
    "CompactionResult",
    "Entry",
    "Finding",
    "Guard",
    "GuardrailError",
    "GuardrailUsageError",
    "Id",
    "IdentifierViolation",
    "Kind",
    "Ledger",
    "ManifestError",
    "MemoryStore",
    "Rejection",
    "RepromptLimitExceeded",
    "SQLiteStore",
    "SessionScope",
    "Source",
    "Store",
    "StoreError",
    "Summarizer",
    "Tombstone",
    "ToolSpec",
    "TraceFileError",
    "TranscriptError",
    "Verdict",
    "__version__",
    "compact",
    "extractive_summary",
    "model_summarizer",
]
