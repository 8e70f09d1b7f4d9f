"""Proving the guard on recorded conversations: the evaluation harness.

Traces (the corpus shape or OpenAI chat messages), seeded corruptions of
identifier arguments, :func:`replay` and its report, a lossy summarizer with
the plain-summary baseline for compaction, agents for the decisive test
(the reference agent, and adapters for OpenAI and Anthropic clients), and
:func:`replay_live`: the recorded calls run through the real tools, without
and with the guard.

Inside, top-down: ``_live`` (the live replay), ``_live_run`` (one trace
run live: the baseline, and the guarded run through a runtime's loop) and
``_live_call`` (one live call: what the tool received, and the one place a
live call's success is read); ``_replay`` (the replay itself) and ``_lossy``
(the lossy summarizer and the plain-summary baseline); ``_reference_agent``
(the deterministic agent that makes the recorded call with ids read from the
context) and ``_model_agents`` (agents backed by OpenAI and Anthropic
clients); ``_run`` (one trace replayed) and ``_report`` (the report as data
and assertions); ``_render`` (the report as rich tables, imported only to
print it) and ``_asks`` (calls that would wait for the user); ``_agent``
(the agent contract: the recorded call's intent, the tools a model sees,
loading an agent and asking it) and ``_stats`` (the counts), with
``_live_stats`` (a live replay's counts);
``_traces`` (trace files), ``_corruption`` (seeded corruptions),
``_arguments`` (identifier arguments inside recorded calls), ``_origin``
(which earlier result a refused value came from), ``_which`` (whether a
compacted context tells entries apart) and ``_sample`` (the corpus the
wheel ships).

Imports: the guard and everything below it, :mod:`guardrail.compaction`,
and :mod:`guardrail.integrations.loops` (the loop a live replay runs the
guarded calls through).
"""

from guardrail.replay._agent import Agent, Intent, load_agent, tool_definitions
from guardrail.replay._corruption import ALL_CLASSES, CLASSES, SAME_KIND, corrupt
from guardrail.replay._live import ToolSource, load_live, replay_live
from guardrail.replay._live_stats import LiveExample, LiveStats, Rewrite
from guardrail.replay._lossy import (
    FATES,
    LossySummarizer,
    SideBySide,
    plain_compact,
    side_by_side,
    strategies,
)
from guardrail.replay._model_agents import anthropic_agent, openai_agent
from guardrail.replay._reference_agent import reference_agent
from guardrail.replay._replay import TraceSource, replay
from guardrail.replay._report import ReplayReport
from guardrail.replay._run import Compaction
from guardrail.replay._sample import SampleCorpus, sample_corpus
from guardrail.replay._stats import (
    AgentDiff,
    Availability,
    ClassStats,
    Example,
    Stats,
)
from guardrail.replay._traces import (
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
    "Agent",
    "AgentDiff",
    "Availability",
    "ClassStats",
    "Compaction",
    "Example",
    "Intent",
    "LiveExample",
    "LiveStats",
    "LossySummarizer",
    "Malformed",
    "Message",
    "ReplayReport",
    "Rewrite",
    "SampleCorpus",
    "SideBySide",
    "Stats",
    "ToolCall",
    "ToolSource",
    "Trace",
    "TraceFile",
    "TraceSource",
    "anthropic_agent",
    "corrupt",
    "load_agent",
    "load_live",
    "load_trace_file",
    "load_traces",
    "openai_agent",
    "plain_compact",
    "reference_agent",
    "replay",
    "replay_live",
    "sample_corpus",
    "side_by_side",
    "strategies",
    "tool_definitions",
    "trace_from_messages",
]
