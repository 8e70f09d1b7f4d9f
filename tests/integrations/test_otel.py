"""The OpenTelemetry bridge: refusals, asks and compactions as span events and counters."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the dev extra brings the OpenTelemetry SDK")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from guardrail import Guard, Verdict, compact
from guardrail._data.verdict import Finding
from guardrail._guard.audit import SilentLogger
from guardrail.integrations.otel import SIGNALS, OpenTelemetryBridge, instrument
from tests.conftest import ORDERS, shop_guard


class Telemetry:
    """An SDK tracer and meter whose spans and metrics stay in memory."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.tracer = self.tracer_provider.get_tracer("test")
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def counts(self) -> dict[tuple[str, tuple[tuple[str, Any], ...]], Any]:
        """Every counter's value, by name and attributes."""
        data = self.reader.get_metrics_data()
        counts: dict[tuple[str, tuple[tuple[str, Any], ...]], Any] = {}
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        key = (metric.name, tuple(sorted((point.attributes or {}).items())))
                        counts[key] = getattr(point, "value", None)
        return counts

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        return [
            (event.name, dict(event.attributes or {}))
            for span in self.spans.get_finished_spans()
            for event in span.events
        ]


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    telemetry = Telemetry()
    yield telemetry
    telemetry.tracer_provider.shutdown()
    telemetry.meter_provider.shutdown()


def test_a_refusal_is_a_span_event_and_a_count_by_tool_and_problem(telemetry: Telemetry) -> None:
    """guardrail.refused on the current span, guardrail.refusals +1 with tool and problem."""
    guard = Guard(mode="reprompt")
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    guard.declare("search_orders", produces={"orders[*].order_id": "order"}, effect="read")
    guard.declare("issue_refund", ids={"order_id": "order"})
    instrument(guard, meter_provider=telemetry.meter_provider)
    with guard.session("conv-1"), telemetry.tracer.start_as_current_span("agent turn"):
        guard.record("search_orders", {}, ORDERS)
        assert guard.enforce("issue_refund", {"order_id": "#W2378156"}).allowed
        guard.enforce("issue_refund", {"order_id": "#W2378157"})
        guard.enforce("issue_refund", {"order_id": "#W9999999"})
    events = telemetry.events()
    assert [name for name, _ in events] == ["guardrail.refused", "guardrail.refused"]
    first = events[0][1]
    assert first["tool"] == "issue_refund"
    assert first["problem"] == "mutated"
    assert first["nearest_role"] == "order_2"
    assert first["session"] == "conv-1"
    assert first["values"] == ("#W2378157",)
    labels = (("mode", "reprompt"), ("outcome", "refused"), ("tool", "issue_refund"))
    assert telemetry.counts() == {
        ("guardrail.refusals", tuple(sorted((*labels, ("problem", "mutated"))))): 1,
        ("guardrail.refusals", tuple(sorted((*labels, ("problem", "unknown"))))): 1,
    }


def test_the_bridge_sees_refusals_even_when_the_log_is_silent(telemetry: Telemetry) -> None:
    """The audit feeds the bridge whatever the logger's level: one place, not a second path."""
    guard = Guard(mode="observe", logger=SilentLogger())
    guard.add_kind("order", pattern=r"#?W\d{7}")
    guard.declare("issue_refund", ids={"order_id": "order"})
    bridge = instrument(guard, meter_provider=telemetry.meter_provider)
    with guard.session("s"), telemetry.tracer.start_as_current_span("turn"):
        guard.enforce("issue_refund", {"order_id": "#W1234567"})
        bridge.detach()
        guard.enforce("issue_refund", {"order_id": "#W1234568"})
    assert [name for name, _ in telemetry.events()] == ["guardrail.would_refuse"]
    (key,) = telemetry.counts()
    assert key[0] == "guardrail.refusals"
    assert ("outcome", "would_refuse") in key[1]


def test_an_ask_is_one_more_signal_of_the_same_hook(telemetry: Telemetry) -> None:
    """A call waiting for approval (outcome "ask") is a guardrail.ask event and a count."""
    guard = Guard(mode="reprompt")
    instrument(guard, meter_provider=telemetry.meter_provider)
    finding = Finding("unverified", "send_money", "to", "DE89…", "iban")
    verdict = Verdict("send_money", False, findings=(finding,))
    with telemetry.tracer.start_as_current_span("turn"):
        guard.audit.call_checked("s", verdict, effect="write", mode="reprompt", outcome="ask")
    assert [name for name, _ in telemetry.events()] == ["guardrail.ask"]
    ((name, labels),) = telemetry.counts()
    assert name == "guardrail.asks"
    assert dict(labels) == {
        "tool": "send_money",
        "problem": "unverified",
        "mode": "reprompt",
        "outcome": "ask",
    }
    assert ("guardrail.call_checked", "ask") in SIGNALS


def test_a_compaction_is_a_span_event_with_its_counts(telemetry: Telemetry) -> None:
    """guardrail.compacted on the span, with the report's counts; guardrail.compactions +1."""
    guard = shop_guard()
    instrument(guard, meter_provider=telemetry.meter_provider)
    messages = [
        {"role": "user", "content": "my order broke"},
        {"role": "assistant", "content": "looking"},
        {"role": "user", "content": "thanks"},
    ]
    with guard.session("s") as ledger, telemetry.tracer.start_as_current_span("compaction"):
        compact(messages, ledger, keep_recent=1, guard=guard)
    ((name, attributes),) = telemetry.events()
    assert name == "guardrail.compacted"
    assert attributes["messages_before"] == 3
    assert attributes["shape"] == "openai_chat"
    assert telemetry.counts() == {("guardrail.compactions", (("shape", "openai_chat"),)): 1}


def test_allowed_calls_send_nothing_and_build_no_event(telemetry: Telemetry) -> None:
    """An allowed call is no signal; with the logger at warning its event is never built."""
    guard = Guard(logger=SilentLogger())
    guard.add_kind("order", pattern=r"#?W\d{7}")
    guard.declare("search", produces={"[*]": "order"}, effect="read")
    guard.declare("issue_refund", ids={"order_id": "order"})
    instrument(guard, meter_provider=telemetry.meter_provider)
    assert not guard.audit.enabled(20, "guardrail.call_checked")  # INFO: no one wants it
    assert guard.audit.enabled(30, "guardrail.call_checked")
    with guard.session("s"), telemetry.tracer.start_as_current_span("turn"):
        guard.record("search", {}, ["#W1234567"])
        assert guard.check("issue_refund", {"order_id": "#W1234567"}).allowed
    assert telemetry.events() == []
    assert telemetry.counts() == {}


def test_span_attributes_are_what_opentelemetry_takes() -> None:
    """None is left out, lists become lists of text, anything else JSON text."""
    from guardrail.integrations.otel import _attributes

    assert _attributes({"a": None, "b": [None, "x", 1], "c": {"k": 1}, "d": 2}) == {
        "b": ["", "x", "1"],
        "c": '{"k": 1}',
        "d": 2,
    }
    assert isinstance(OpenTelemetryBridge().events, dict)
