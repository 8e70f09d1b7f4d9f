"""Audit: every decision is a flat, JSON-safe structlog event at the right level."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

import structlog
from structlog.testing import capture_logs

from guardrail import Guard, Id, IdentifierViolation

from .conftest import ORDERS, shop_guard


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
