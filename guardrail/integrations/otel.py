"""OpenTelemetry: the guard's decisions in the traces and metrics a team already watches.

``instrument(guard)`` subscribes a bridge to the guard's audit (see
:meth:`guardrail._guard.audit.Audit.subscribe`): the audit stays the record of
every decision, and the bridge turns the few that matter on a dashboard
into OpenTelemetry signals. Each adds an event to the current span (the
agent turn or tool call your tracing already opened) and one to a counter:

- ``guardrail.call_checked`` with outcome ``refused`` (or ``would_refuse``,
  observe mode): span event ``guardrail.refused`` (``guardrail.would_refuse``),
  counter ``guardrail.refusals`` by tool, problem, mode and outcome;
- ``guardrail.call_checked`` with outcome ``ask`` (a call waiting for the
  user's approval): span event ``guardrail.ask``, counter ``guardrail.asks``;
- ``guardrail.compacted``: span event ``guardrail.compacted`` with the
  report's counts, counter ``guardrail.compactions`` by message shape.

A new outcome is one more row of :data:`SIGNALS`. The span event carries
the audit event's fields as attributes (identifier values included, or
their keyed hashes when the guard was built with ``redact=``); a counter
carries only the few attributes listed, so its series stay few. Needs the
``otel`` extra: ``pip install 'guardrail-ids[otel]'`` (the OpenTelemetry
API; your program brings the SDK and its exporters).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

try:
    from opentelemetry import metrics, trace
except ImportError as missing:  # pragma: no cover - exercised with the module hidden
    raise ImportError(
        "guardrail.integrations.otel needs the OpenTelemetry API: pip install 'guardrail-ids[otel]'"
    ) from missing

from guardrail import __version__

if TYPE_CHECKING:
    from guardrail._guard.facade import Guard

__all__ = ["SIGNALS", "OpenTelemetryBridge", "Signal", "instrument"]


@dataclass(frozen=True)
class Signal:
    """How one kind of decision shows in OpenTelemetry: a span event and a counter."""

    span_event: str
    counter: str
    description: str
    #: The event fields that label the counter (a field the event lacks is left out).
    labels: tuple[str, ...]


_CALL_LABELS: Final = ("tool", "problem", "mode", "outcome")

#: ``(audit event, outcome or None) -> Signal``: what the bridge turns into telemetry.
SIGNALS: Final[Mapping[tuple[str, str | None], Signal]] = {
    ("guardrail.call_checked", "refused"): Signal(
        "guardrail.refused", "guardrail.refusals", "tool calls the guard refused", _CALL_LABELS
    ),
    ("guardrail.call_checked", "would_refuse"): Signal(
        "guardrail.would_refuse",
        "guardrail.refusals",
        "tool calls the guard refused (or, in observe mode, would have)",
        _CALL_LABELS,
    ),
    ("guardrail.call_checked", "ask"): Signal(
        "guardrail.ask",
        "guardrail.asks",
        "tool calls waiting for the user's approval",
        _CALL_LABELS,
    ),
    ("guardrail.compacted", None): Signal(
        "guardrail.compacted", "guardrail.compactions", "conversations compacted", ("shape",)
    ),
}


class OpenTelemetryBridge:
    """An audit listener that turns refusals, asks and compactions into span events and counts.

    Build it with :func:`instrument`. ``meter_provider`` defaults to the
    global one; span events go to the span current when the decision is
    made (none is created: with no span current, only the counter moves).
    """

    def __init__(self, *, meter_provider: metrics.MeterProvider | None = None) -> None:
        provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        meter = provider.get_meter("guardrail", __version__)
        self._counters: dict[str, metrics.Counter] = {}
        for signal in SIGNALS.values():
            if signal.counter not in self._counters:
                self._counters[signal.counter] = meter.create_counter(
                    signal.counter, unit="1", description=signal.description
                )
        # The audit sends the events named here, at these levels and up, to the bridge
        # (a refusal or an ask is a warning, a compaction info), whatever the log level.
        self.events: Mapping[str, int] = {}
        self.events = {
            event: logging.INFO if event == "guardrail.compacted" else logging.WARNING
            for event, _ in SIGNALS
        }
        self._detach: Callable[[], None] | None = None

    def __call__(self, event: str, level: int, fields: Mapping[str, Any]) -> None:
        """One audit event: a span event and a count, if it is one of :data:`SIGNALS`."""
        signal = SIGNALS.get((event, fields.get("outcome") if "outcome" in fields else None))
        if signal is None:
            return
        trace.get_current_span().add_event(signal.span_event, attributes=_attributes(fields))
        labels = {name: str(fields[name]) for name in signal.labels if fields.get(name) is not None}
        self._counters[signal.counter].add(1, labels)

    def detach(self) -> None:
        """Stop: the guard's decisions no longer reach OpenTelemetry."""
        if self._detach is not None:
            self._detach()
            self._detach = None


def instrument(
    guard: Guard, *, meter_provider: metrics.MeterProvider | None = None
) -> OpenTelemetryBridge:
    """Send ``guard``'s refusals, asks and compactions to OpenTelemetry; returns the bridge.

    ``bridge.detach()`` stops it. A guard's :meth:`~guardrail.Guard.silenced`
    copy (replays) is not instrumented.
    """
    bridge = OpenTelemetryBridge(meter_provider=meter_provider)
    bridge._detach = guard.audit.subscribe(bridge)
    return bridge


def _attributes(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Audit fields as span attributes: scalars as they are, lists of text, the rest as JSON."""
    attributes: dict[str, Any] = {}
    for name, value in fields.items():
        if value is None:
            continue
        if isinstance(value, (str, bool, int, float)):
            attributes[name] = value
        elif isinstance(value, Sequence):
            attributes[name] = ["" if item is None else str(item) for item in value]
        else:
            attributes[name] = json.dumps(value, default=str)
    return attributes
