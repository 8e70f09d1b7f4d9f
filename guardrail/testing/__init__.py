"""Testing the guard on recorded conversations: traces, corruptions, replay and its report."""

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
    "Malformed",
    "Message",
    "ToolCall",
    "Trace",
    "TraceFile",
    "load_trace_file",
    "load_traces",
    "trace_from_messages",
]
