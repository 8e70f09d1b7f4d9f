"""Testing the guard on recorded conversations: traces, corruptions, replay and its report,
and a lossy summariser with the plain-summary baseline for compaction."""

from guardrail.testing.corruption import ALL_CLASSES, CLASSES, SAME_KIND, corrupt
from guardrail.testing.lossy import (
    FATES,
    LossySummariser,
    SideBySide,
    plain_compact,
    side_by_side,
    strategies,
)
from guardrail.testing.replay import Compaction, replay
from guardrail.testing.report import Availability, ClassStats, Example, ReplayReport, Stats
from guardrail.testing.traces import (
    Malformed,
    Message,
    ToolCall,
    Trace,
    TraceFile,
    load_trace_file,
    load_traces,
    trace_from_messages,
)

__all__ = [
    "ALL_CLASSES",
    "CLASSES",
    "FATES",
    "SAME_KIND",
    "Availability",
    "ClassStats",
    "Compaction",
    "Example",
    "LossySummariser",
    "Malformed",
    "Message",
    "ReplayReport",
    "SideBySide",
    "Stats",
    "ToolCall",
    "Trace",
    "TraceFile",
    "corrupt",
    "load_trace_file",
    "load_traces",
    "plain_compact",
    "replay",
    "side_by_side",
    "strategies",
    "trace_from_messages",
]
