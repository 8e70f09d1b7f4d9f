"""Testing the guard on recorded conversations: traces, corruptions, replay and its report."""

from guardrail.testing.corruption import ALL_CLASSES, CLASSES, SAME_KIND, corrupt
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
    "SAME_KIND",
    "Malformed",
    "Message",
    "ToolCall",
    "Trace",
    "TraceFile",
    "corrupt",
    "load_trace_file",
    "load_traces",
    "trace_from_messages",
]
