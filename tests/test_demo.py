"""The demo conversation: a mutated order id refused, copied from the ledger, refunded right."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from guardrail import Ledger
from guardrail.demo import run_demo, scripted_lossy_context


def _quiet() -> Console:
    return Console(file=io.StringIO(), width=100)


def test_the_mutated_id_is_refused_and_the_refund_lands_right() -> None:
    """The summary's one-character-off id is refused; the copy from the ledger is refunded."""
    result = run_demo(_quiet())
    assert result.first_call["arguments"]["order_id"] == "ord_8F3kQ2xN"
    assert result.rejection is not None
    (finding,) = result.rejection.verdict.findings
    assert finding.problem == "mutated"
    assert finding.nearest_role == "damaged_order"
    assert "[damaged_order]" in result.rejection.message
    assert result.second_call is not None
    assert result.second_call["order_id"] == "ord_8F3kQ2xM"
    assert [refund["order_id"] for refund in result.refunds] == ["ord_8F3kQ2xM"]
    assert result.ledger["damaged_order"].value == "ord_8F3kQ2xM"


def test_the_audit_events_record_the_refusal() -> None:
    """The guard's events include the refused call (a warning) and the allowed refund."""
    result = run_demo(_quiet())
    checked = [e for e in result.events if e["event"] == "guardrail.call_checked"]
    refused = [e for e in checked if e["outcome"] == "refused"]
    assert len(refused) == 1
    assert refused[0]["level"] == "warning"
    assert refused[0]["problem"] == "mutated"
    assert checked[-1]["tool"] == "issue_refund"
    assert checked[-1]["outcome"] == "allowed"


def test_the_scripted_context_step_is_labelled_and_lossy() -> None:
    """The scripted stand-in is announced as scripted and changes the id by one character."""
    console = _quiet()
    result = run_demo(console)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "SCRIPTED STEP" in text
    summary = result.context[1]["content"]
    assert "ord_8F3kQ2xN" in summary
    assert "ord_8F3kQ2xM" not in summary


def test_the_context_step_can_be_replaced() -> None:
    """A context step that keeps the conversation whole leads straight to the right refund."""

    def keep(conversation: list[dict[str, Any]], ledger: Ledger) -> list[dict[str, Any]]:
        return conversation

    console = _quiet()
    result = run_demo(console, context=keep)
    assert result.rejection is None
    assert [refund["order_id"] for refund in result.refunds] == ["ord_8F3kQ2xM"]
    assert "SCRIPTED STEP" not in console.file.getvalue()  # type: ignore[attr-defined]
    assert scripted_lossy_context is not keep
