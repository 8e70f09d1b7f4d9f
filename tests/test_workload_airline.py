"""The real workload: 200 recorded airline conversations replayed through the core."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from guardrail import Finding, Guard

from .conftest import AIRLINE_MANIFEST, corpus_traces, needs_corpus

pytestmark = needs_corpus

INVENTED = {"credit_card_7334", "credit_card_5634230"}


def replay_core(guard: Guard) -> dict[str, Any]:
    """observe_user on user turns, check on every call, record on every result."""
    counts: collections.Counter[str] = collections.Counter()
    refused_ok: list[tuple[str, str, tuple[Finding, ...]]] = []
    refused_failed: list[tuple[str, str, tuple[Finding, ...]]] = []
    for trace in corpus_traces():
        ledger = guard.new_ledger(trace["id"])
        open_calls: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        for message in trace["messages"]:
            if message["role"] == "user":
                guard.observe_user(message["content"], ledger=ledger)
            for call in message.get("tool_calls") or []:
                verdict = guard.check(call["name"], call["arguments"], ledger=ledger)
                open_calls.setdefault(call["id"], []).append((call, verdict))
            if message["role"] == "tool":
                call, verdict = open_calls[message["tool_call_id"]].pop()
                succeeded = not message["error"]
                counts["calls"] += 1
                counts["allowed" if verdict.allowed else "refused"] += 1
                if not verdict.allowed:
                    where = refused_ok if succeeded else refused_failed
                    where.append((trace["id"], call["name"], verdict.findings))
                guard.record(
                    call["name"],
                    call["arguments"],
                    message["content"],
                    error=message["error"],
                    call_id=call["id"],
                    ledger=ledger,
                )
    return {"counts": counts, "refused_ok": refused_ok, "refused_failed": refused_failed}


@pytest.fixture(scope="module")
def run() -> dict[str, Any]:
    """The corpus replayed once through a guard built from the example manifest."""
    return replay_core(Guard.from_manifest(AIRLINE_MANIFEST))


def test_no_real_call_with_ids_from_tool_results_is_refused(run: dict[str, Any]) -> None:
    """Every refused call that succeeded used an id only the user typed, never looked up."""
    counts = run["counts"]
    print(
        f"\nairline corpus: {counts['calls']} calls, {counts['allowed']} allowed, "
        f"{counts['refused']} refused ({len(run['refused_ok'])} of them succeeded in the "
        f"recording, {len(run['refused_failed'])} failed)"
    )
    assert counts["calls"] == 1164
    for trace_id, tool, findings in run["refused_ok"]:
        print(f"  refused though it succeeded: {trace_id} {tool} {[f.problem for f in findings]}")
        # A write with a user-typed id that no lookup ever confirmed: refused by design.
        assert {f.problem for f in findings if f.enforced} == {"unverified"}, (trace_id, findings)
    assert len(run["refused_ok"]) <= 1


def test_invented_ids_in_the_traces_are_refused(run: dict[str, Any]) -> None:
    """The ids the model made up (credit_card_7334 from 'card ending 7334') are refused."""
    invented = collections.Counter(
        finding.value
        for _, _, findings in run["refused_failed"] + run["refused_ok"]
        for finding in findings
        if finding.problem == "unknown" and finding.enforced
    )
    print(f"\ninvented ids refused: {dict(invented)}")
    assert set(invented) == INVENTED
    assert sum(invented.values()) == 4
