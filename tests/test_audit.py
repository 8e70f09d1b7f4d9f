"""Audit: every decision is a flat, JSON-safe structlog event at the right level."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterator, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

import pytest
import structlog
from structlog.testing import capture_logs

import guardrail
from guardrail import Guard, GuardrailUsageError, Id, IdentifierViolation
from guardrail._guard.audit import LISTED, StdlibLogger, _Routing

from .conftest import ORDERS, REPO, shop_guard


def events(logs: list[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [event for event in logs if event["event"] == name]


def test_every_check_is_an_event_with_its_outcome_and_level() -> None:
    """Allowed reads are debug, allowed writes info, refusals warnings with the finding."""
    guard = shop_guard()
    with capture_logs() as logs, guard.session("conv-1"):
        guard.record("search_orders", {"customer_id": "x"}, ORDERS)
        guard.check("get_order", {"order_id": "W8855135"})
        guard.check("issue_refund", {"order_id": "W8855135"})
        guard.check("issue_refund", {"order_id": "W8855136"})
    checked = events(logs, "guardrail.call_checked")
    assert [(e["log_level"], e["outcome"], e["tool"]) for e in checked] == [
        ("debug", "allowed", "get_order"),
        ("info", "allowed", "issue_refund"),
        ("warning", "refused", "issue_refund"),
    ]
    refused = checked[2]
    assert refused["session"] == "conv-1"
    assert (refused["problem"], refused["param"], refused["nearest_role"]) == (
        "mutated",
        "order_id",
        "order",
    )
    assert refused["value"] == "W8855136"
    for event in logs:
        json.dumps(event)  # flat and JSON-safe
        assert not any(isinstance(v, dict) for v in event.values())


def test_records_evictions_relabels_and_user_ids_are_events() -> None:
    """ids_recorded, ids_dropped, id_evicted, id_relabeled and user_ids_observed are logged."""
    guard = shop_guard(capacity=2)
    # A search that fails for an unknown customer: its success confirms the customer typed.
    guard.declare(
        "orders_of",
        ids={"customer_id": "customer"},
        produces={"orders[*].order_id": "order"},
        effect="read",
        verifies="on_success",
    )
    with capture_logs() as logs, guard.session("s"):
        guard.observe_user("I'm cus_41ZpA9")
        # Two new orders, room for one: the second is not kept (the turn's ids stay).
        guard.record("orders_of", {"customer_id": "cus_41ZpA9"}, ORDERS, call_id="c1")
        guard.label("order", "delivered_order")
        guard.observe_user("And the items of that order?")
        guard.record("get_order", {"order_id": "W8855135"}, {"items": [{"item_id": "it_aaaa"}]})
    recorded = events(logs, "guardrail.ids_recorded")[0]
    assert (recorded["call_id"], recorded["added"], recorded["verified"]) == ("c1", 1, 1)
    assert recorded["dropped"] == 1
    dropped = events(logs, "guardrail.ids_dropped")
    assert [(e["log_level"], e["tool"], e["dropped"], e["limit"]) for e in dropped] == [
        ("warning", "orders_of", 1, 1)
    ]
    evicted = events(logs, "guardrail.id_evicted")
    assert [e["role"] for e in evicted] == ["customer"]
    assert events(logs, "guardrail.id_relabeled")[0]["old_role"] == "order"
    assert events(logs, "guardrail.user_ids_observed")[0]["values"] == ["cus_41ZpA9"]


def test_redaction_logs_keyed_hashes_and_never_other_arguments() -> None:
    """With redact=, ids are keyed hashes; non-id argument values are never logged."""
    guard = shop_guard(redact="secret-key")

    @guard.tool
    def refund(order_id: Annotated[str, Id("order")], note: str) -> None: ...

    with capture_logs() as logs, guard.session("s"):
        guard.record("search_orders", {}, ORDERS)
        refund("W8855135", note="card 4111-1111")
        with contextlib.suppress(IdentifierViolation):
            refund("W8855136", note="card 4111-1111")
    text = json.dumps(logs)
    assert "W885513" not in text
    assert "4111" not in text
    refused = events(logs, "guardrail.call_checked")[-1]
    assert refused["value"].startswith("hmac:")
    other = shop_guard(redact="another-key")
    assert other.audit.value("W8855136") != refused["value"]
    assert guard.audit.value("W8855136") == refused["value"]


def test_a_production_logger_at_warning_sees_only_refusals() -> None:
    """With the logger at warning, allowed calls build no event at all."""
    seen: list[str] = []

    class Recorder:
        def is_enabled_for(self, level: int) -> bool:
            return level >= logging.WARNING

        def warning(self, event: str, **fields: Any) -> None:
            seen.append(event)

        def info(self, event: str, **fields: Any) -> None:
            raise AssertionError("info event built")

        debug = info

    guard = shop_guard(logger=Recorder())
    with guard.session("s"):
        guard.record("search_orders", {}, ORDERS)
        guard.check("issue_refund", {"order_id": "W8855135"})
        guard.check("issue_refund", {"order_id": "W1"})
    assert seen == ["guardrail.call_checked"]


def test_the_library_never_configures_structlog() -> None:
    """Building and using a guard leaves structlog's configuration alone."""

    def snapshot() -> dict[str, Any]:
        # Copies: the processor list is changed in place by structlog's own configure().
        return {
            key: list(value) if isinstance(value, list) else value
            for key, value in structlog.get_config().items()
        }

    before = snapshot()
    guard = Guard.from_manifest({"kinds": {"order": {}}, "tools": {"t": {"ids": {"o": "order"}}}})
    with guard.session("s"):
        guard.check("t", {"o": "x"})
    assert snapshot() == before


def test_a_silenced_guard_logs_nothing_and_keeps_the_original_loud() -> None:
    """guard.silenced() checks alike with no events; the original still logs."""
    guard = shop_guard()
    quiet = guard.silenced()
    with capture_logs() as logs, guard.session("s") as ledger:
        guard.record("search_orders", {}, ORDERS)
        assert not quiet.check("issue_refund", {"order_id": "W1"}, ledger=ledger).allowed
        assert quiet.check("issue_refund", {"order_id": "W8855135"}, ledger=ledger).allowed
    assert [event["event"] for event in logs] == ["guardrail.ids_recorded"]


def test_calls_of_undeclared_tools_are_logged_as_undeclared() -> None:
    """A tool the guard does not know is allowed, and its event says it was undeclared."""
    guard = shop_guard()
    with capture_logs() as logs, guard.session("s"):
        assert guard.check("shell", {"cmd": "ls"}).allowed
        assert guard.enforce("shell", {"cmd": "ls"}).allowed
    assert [e["outcome"] for e in events(logs, "guardrail.call_checked")] == ["undeclared"] * 2


def test_an_undeclared_tool_is_warned_about_once_per_name() -> None:
    """A guard with a write tool warns once per unknown tool, naming the production setting."""
    guard = shop_guard()
    with capture_logs() as logs, guard.session("s"):
        for _ in range(3):
            assert guard.check("shell", {"cmd": "ls"}).allowed
            assert guard.enforce("shell", {"cmd": "ls"}).allowed
        assert guard.check("http_get", {}).allowed
    warned = events(logs, "guardrail.undeclared_tool")
    assert [(e["tool"], e["log_level"], e["session"]) for e in warned] == [
        ("shell", "warning", "s"),
        ("http_get", "warning", "s"),
    ]
    assert "refuse_undeclared=True" in warned[0]["advice"]


def test_undeclared_tools_are_not_warned_about_without_a_write_tool_or_when_refused() -> None:
    """A read-only guard stays quiet; a guard refusing undeclared tools logs refusals instead."""
    reads = Guard()
    reads.add_kind("order")
    reads.declare("get_order", ids={"order_id": "order"}, effect="read")
    strict = shop_guard(refuse_undeclared=True)
    with capture_logs() as logs, reads.session("s"), strict.session("t"):
        assert reads.check("shell", {}).allowed
        assert not strict.check("shell", {}).allowed
    assert events(logs, "guardrail.undeclared_tool") == []


def test_the_undeclared_warning_is_given_once_across_threads() -> None:
    """Many threads calling one unknown tool at once still give one warning."""
    guard = shop_guard()
    quiet = guard.silenced()

    def call(n: int) -> bool:
        ledger = guard.new_ledger(f"t{n}")
        quiet.check("shell", {}, ledger=ledger)  # a silenced copy logs nothing and uses nothing
        return guard.check("shell", {}, ledger=ledger).allowed

    with capture_logs() as logs, ThreadPoolExecutor(max_workers=8) as pool:
        assert all(pool.map(call, range(64)))
    assert len(events(logs, "guardrail.undeclared_tool")) == 1


# -- where events go -------------------------------------------------------------------------


def run_python(code: str) -> tuple[str, str]:
    """Run ``code`` in a fresh interpreter (no logging configured); its stdout and stderr."""
    capture = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert capture.returncode == 0, capture.stderr
    return capture.stdout, capture.stderr


def test_the_readme_example_prints_only_what_it_prints() -> None:
    """Run as a program, the README's first example prints its own lines and no event."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    example = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert example is not None
    out, err = run_python(example.group(1))
    assert err == ""
    lines = out.splitlines()
    assert lines[:3] == [
        "refunded 40 on #W2378156",
        "mutated",
        "guardrail refused the call to issue_refund; the tool did not run.",
    ]
    assert all(line.startswith(("- ", "  ")) for line in lines[3:]), out  # the refusal's text
    assert "guardrail." not in out


def test_a_program_that_configured_no_logging_sees_no_warning_either() -> None:
    """Refusals, floods, undeclared tools and unsaved sessions print nothing by default."""
    out, err = run_python(
        """
from guardrail import Guard
guard = Guard(mode="observe", capacity=20)
guard.add_kind("order", pattern=r"W\\d{7}")
guard.declare("search", produces={"ids[*]": "order"}, effect="read")
guard.declare("refund", ids={"order_id": "order"})
with guard.session("s"):
    guard.record("search", {}, {"ids": [f"W{n:07}" for n in range(40_000)]})
    assert not guard.check("refund", {"order_id": "W9999999"}).allowed
    guard.enforce("refund", {"order_id": "W9999999"})
    guard.check("shell", {"cmd": "ls"})
import structlog  # imported, never configured: still the standard library's silence
with guard.session("t"):
    guard.enforce("refund", {"order_id": "W9999999"})
guard.audit.session_not_saved("t", OSError("disk full"))
"""
    )
    assert (out, err) == ("", "")


@pytest.fixture
def stdlib_route(monkeypatch: pytest.MonkeyPatch) -> Iterator[logging.Logger]:
    """structlog unconfigured (as in a fresh program), and the guardrail logger restored after."""
    monkeypatch.setattr(structlog, "is_configured", lambda: False)
    logger = logging.getLogger("guardrail")
    saved = logger.level, logger.propagate, list(logger.handlers), _Routing.to_stdlib
    yield logger
    logger.setLevel(saved[0])
    logger.propagate = saved[1]
    logger.handlers[:] = saved[2]
    _Routing.to_stdlib = saved[3]


def test_events_go_to_structlog_when_the_application_configured_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With structlog configured, events go through it and not to the standard library."""
    caplog.set_level(logging.DEBUG, logger="guardrail")
    guard = shop_guard()
    with capture_logs() as logs, guard.session("s"):  # capture_logs configures structlog
        guard.record("search_orders", {}, ORDERS)
        guard.check("issue_refund", {"order_id": "W1"})
    assert [e["event"] for e in logs] == ["guardrail.ids_recorded", "guardrail.call_checked"]
    assert [r for r in caplog.records if r.name == "guardrail"] == []


def test_events_go_to_the_standard_library_when_structlog_is_not_configured(
    stdlib_route: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    """Without structlog configured, events are records of the guardrail logger, fields attached."""
    caplog.set_level(logging.DEBUG, logger="guardrail")
    guard = shop_guard()
    # capture_logs configures structlog for real, but is_configured() says no.
    with capture_logs() as logs, guard.session("conv-1"):
        guard.record("search_orders", {}, ORDERS)
        guard.check("get_order", {"order_id": "W8855135"})
        guard.check("issue_refund", {"order_id": "W8855136\noutcome=allowed"})
    assert logs == []
    records = [r for r in caplog.records if r.name == "guardrail"]
    assert [(r.levelno, getattr(r, "event", None)) for r in records] == [
        (logging.DEBUG, "guardrail.ids_recorded"),
        (logging.DEBUG, "guardrail.call_checked"),
        (logging.WARNING, "guardrail.call_checked"),
    ]
    refused = records[-1]
    assert (refused.__dict__["session"], refused.__dict__["outcome"]) == ("conv-1", "refused")
    assert refused.__dict__["value"] == "W8855136\noutcome=allowed"
    message = refused.getMessage()
    assert message.startswith(
        "guardrail.call_checked session=conv-1 tool=issue_refund effect=write mode=raise "
        "outcome=refused "
    )
    # A logged id cannot forge a line or a field: anything but plain characters is quoted.
    assert "\n" not in message
    assert 'value="W8855136\\noutcome=allowed"' in message
    recorded = records[0].getMessage()
    assert recorded.endswith('roles=["order", "order_2"] values=["#W8855135", "#W2378156"]')


def test_a_standard_library_logger_can_be_given(caplog: pytest.LogCaptureFixture) -> None:
    """Guard(logger=logging.getLogger(...)) logs records there, at the logger's levels."""
    caplog.set_level(logging.INFO, logger="app.audit")
    guard = shop_guard(logger=logging.getLogger("app.audit"))
    with guard.session("s"):
        guard.record("search_orders", {}, ORDERS)
        guard.check("issue_refund", {"order_id": "W8855135"})
    assert [(r.name, r.levelname, r.__dict__["tool"]) for r in caplog.records] == [
        ("app.audit", "INFO", "issue_refund")
    ]


def test_levels_are_checked_once_and_the_allowed_path_builds_nothing(
    stdlib_route: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the guardrail logger at warning, allowed calls make no record and ask no level."""
    stdlib_route.setLevel(logging.WARNING)
    asked: list[int] = []
    built: list[str] = []
    original = logging.Logger.isEnabledFor

    def is_enabled_for(self: logging.Logger, level: int) -> bool:
        if self.name == "guardrail":
            asked.append(level)
        return original(self, level)

    monkeypatch.setattr(logging.Logger, "isEnabledFor", is_enabled_for)
    monkeypatch.setattr(StdlibLogger, "log", lambda _, level, event, fields: built.append(event))

    guard = shop_guard()

    @guard.tool
    def refund(order_id: Annotated[str, Id("order")]) -> None: ...

    with guard.session("s"):
        guard.record("search_orders", {}, ORDERS)
        for _ in range(100):
            refund("W8855135")
        with contextlib.suppress(IdentifierViolation):
            refund("W8855136")
    assert built == ["guardrail.call_checked"]  # the refusal, nothing else
    assert len(asked) == 4  # debug, info, warning, error: once, at the first event


def test_an_event_never_lists_more_than_fifty_values() -> None:
    """A result with 40,000 ids, or a call with 300 bad ones, is one event of bounded size."""
    guard = shop_guard(capacity=100_000, max_ids_per_call=100_000)
    ids = [f"#W{n:07}" for n in range(1, 40_001)]
    items = [f"it_x{n}" for n in range(300)]
    with capture_logs() as logs, guard.session("s"):
        guard.record("search_orders", {}, {"orders": [{"order_id": i} for i in ids]})
        guard.observe_user(" ".join(f"it_{n:05}" for n in range(200)))
        guard.check("issue_refund", {"order_id": ids[0], "item_ids": items})
    recorded = events(logs, "guardrail.ids_recorded")[0]
    assert (recorded["added"], len(recorded["values"]), len(recorded["roles"])) == (40_000, 50, 50)
    assert recorded["values"][:2] == ids[:2]
    assert recorded["omitted"] == 40_000 - LISTED
    observed = events(logs, "guardrail.user_ids_observed")[0]
    assert (observed["ids"], len(observed["values"]), observed["omitted"]) == (200, 50, 150)
    refused = events(logs, "guardrail.call_checked")[-1]
    assert refused["findings"] > LISTED
    for name in ("problems", "params", "values", "nearest_roles"):
        assert len(refused[name]) == LISTED
    assert refused["omitted"] == refused["findings"] - LISTED
    assert max(len(json.dumps(event)) for event in logs) < 10_000
    # Ordinary events leave nothing out, and say nothing about it.
    assert all("omitted" not in event for event in shop_events())


def shop_events() -> list[MutableMapping[str, Any]]:
    """The events of a few ordinary calls of the shop guard."""
    guard = shop_guard()
    with capture_logs() as logs, guard.session("s"):
        guard.observe_user("I'm cus_41ZpA9")
        guard.record("search_orders", {}, ORDERS)
        guard.check("issue_refund", {"order_id": "W8855135"})
        guard.check("issue_refund", {"order_id": "W8855136"})
    assert len(logs) == 4
    return logs


def test_audit_to_json_writes_one_json_object_per_event(stdlib_route: logging.Logger) -> None:
    """guardrail.audit_to_json(stream) is the one line for JSON audit logs, structlog or not."""
    stream = io.StringIO()
    handler = guardrail.audit_to_json(stream, level="debug")
    assert handler in stdlib_route.handlers
    guardrail.audit_to_json(stream, level="debug")  # again: replaces, never doubles
    guard = shop_guard()
    with capture_logs() as logs, guard.session("conv-1"):
        structlog.configure()  # even an application that configured structlog
        guard.record("search_orders", {}, ORDERS)
        guard.check("issue_refund", {"order_id": "W8855136"})
    assert logs == []
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(e["level"], e["event"]) for e in lines] == [
        ("debug", "guardrail.ids_recorded"),
        ("warning", "guardrail.call_checked"),
    ]
    refused = lines[1]
    assert (refused["logger"], refused["session"], refused["value"]) == (
        "guardrail",
        "conv-1",
        "W8855136",
    )
    assert refused["timestamp"].endswith("+00:00")
    assert "message" not in refused and "msg" not in refused


def test_audit_to_json_refuses_an_unknown_level(stdlib_route: logging.Logger) -> None:
    """A level that is not a logging level is an error of use naming the choices."""
    with pytest.raises(GuardrailUsageError, match="debug, info, warning or error"):
        guardrail.audit_to_json(level="loud")


def test_a_pattern_taking_plain_words_from_user_text_is_a_warning_once_per_kind() -> None:
    """guardrail.broad_pattern: once per kind, naming the plain words, never again after."""
    guard = Guard()
    with pytest.warns(guardrail.errors.BroadPatternWarning):
        guard.add_kind("ticket", pattern=r"[A-Za-z]{5,6}")
    guard.add_kind("order", pattern=r"#?W\d{7}")
    with capture_logs() as logs, guard.session("s"):
        guard.observe_user("Please close issue #W8855135")
        guard.observe_user("please close it")
    broad = events(logs, "guardrail.broad_pattern")
    assert len(broad) == 1
    assert broad[0]["log_level"] == "warning"
    assert broad[0]["kind"] == "ticket"
    assert broad[0]["words"] == ["Please", "close", "issue"]
    assert "like='email'" in broad[0]["advice"]


@pytest.mark.parametrize("redact", [None, "k3y"])
def test_a_refusal_of_one_value_logs_the_fields_of_the_general_event(redact: str | None) -> None:
    """One finding (built directly) gives the keys, order and values several findings give."""
    from guardrail._data.verdict import Finding
    from guardrail._guard.audit import Audit

    audit = Audit(redact=redact)
    one = Finding("mutated", "refund", "order_id", "W885" * 60, "order", "order_2", "x")
    two = Finding("unknown", "refund", "item_id", "it_9", "item")
    single, double = audit._findings([one]), audit._findings([one, two])
    general = {
        key: value[:1] if isinstance(value, list) else value for key, value in double.items()
    }
    general["findings"] = 1
    assert list(single.items()) == list(general.items())
    assert single["value"] == audit.value(one.value) != one.value  # cut short, or a hash
