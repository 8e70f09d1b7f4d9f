"""guardrail: keep LLM agents from acting on identifiers they never really saw."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from guardrail._check.reprompt import Rejection
from guardrail._data.verdict import ApprovalRequest, Finding, Verdict
from guardrail._declare.describe import describe_ids
from guardrail._declare.spec import DeclareOptions, Id, ToolOptions, ToolSpec
from guardrail._guard.audit import audit_to_json
from guardrail._guard.facade import Guard, SessionScope
from guardrail._guard.patching import Patch
from guardrail.errors import (
    ApprovalRequired,
    GuardrailError,
    GuardrailUsageError,
    IdentifierViolation,
    ManifestError,
    RepromptLimitExceeded,
    SessionDeleted,
    StaleApproval,
    StoreError,
    TraceFileError,
    TranscriptError,
)
from guardrail.kinds import Kind
from guardrail.ledger import Entry, Ledger, Mention, Source, Tombstone
from guardrail.stores import MemoryStore, Store

if TYPE_CHECKING:
    from guardrail.compaction import (
        CompactionReport,
        CompactionResult,
        Summarizer,
        compact,
        compact_text,
        extractive_summary,
        model_summarizer,
    )
    from guardrail.stores import SQLiteStore

#: The one place the version is written: pyproject.toml reads it (hatch's version source).
__version__ = "0.1.0.dev0"

#: Names imported on first use, so ``import guardrail`` stays fast for a program that
#: only checks calls: compaction is a third of the package, SQLite a C extension.
_LAZY = {
    "CompactionReport": "guardrail.compaction",
    "CompactionResult": "guardrail.compaction",
    "SQLiteStore": "guardrail.stores._sqlite",
    "Summarizer": "guardrail.compaction",
    "compact": "guardrail.compaction",
    "compact_text": "guardrail.compaction",
    "extractive_summary": "guardrail.compaction",
    "model_summarizer": "guardrail.compaction",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'guardrail' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "ApprovalRequest",
    "ApprovalRequired",
    "CompactionReport",
    "CompactionResult",
    "DeclareOptions",
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
    "Mention",
    "Patch",
    "Rejection",
    "RepromptLimitExceeded",
    "SQLiteStore",
    "SessionDeleted",
    "SessionScope",
    "Source",
    "StaleApproval",
    "Store",
    "StoreError",
    "Summarizer",
    "Tombstone",
    "ToolOptions",
    "ToolSpec",
    "TraceFileError",
    "TranscriptError",
    "Verdict",
    "__version__",
    "audit_to_json",
    "compact",
    "compact_text",
    "describe_ids",
    "extractive_summary",
    "model_summarizer",
]
