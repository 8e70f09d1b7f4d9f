"""The telecom desk of examples/live_telecom.*, live: operator ids, phone spellings, dense ids."""

from __future__ import annotations

import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

import pytest

from examples import live_telecom
from guardrail import Guard
from guardrail.replay import replay_live

from .conftest import REPO

TRACES = REPO / "examples" / "live_telecom.jsonl"
MANIFEST = REPO / "examples" / "live_telecom.toml"


def _manifest(*, phone: bool = True, operator: bool = True) -> dict[str, Any]:
    """The example manifest, less its default country code or its operator ids."""
    data: dict[str, Any] = tomllib.loads(MANIFEST.read_text(encoding="utf-8"))
    if not phone:
        data["kinds"]["phone"]["like"] = "phone"
    if not operator:
        del data["kinds"]["plan"]["operator_ids"]
    return data


def test_every_recorded_call_runs_behind_the_guard() -> None:
    """No call that works without the guard is refused, rewritten or failed behind it."""
    report = replay_live(TRACES, MANIFEST, live_telecom.fresh)
    live = report.total.live
    assert live is not None
    assert live.conversations == 5
    assert live.calls == 18
    assert live.unguarded["succeeded"] == 18
    assert live.recording_disagrees == 0
    assert live.refused_succeeded == 0
    report.assert_live_clean()


@pytest.mark.parametrize(
    ("phone", "operator", "causes"),
    [
        (
            False,
            False,
            {
                "get_details_by_id.id: mutated": 2,
                "change_plan.plan_id: mutated": 2,
                "send_verification_code.phone: unknown": 1,
            },
        ),
        (
            True,
            False,
            {"get_details_by_id.id: mutated": 2, "change_plan.plan_id: mutated": 2},
        ),
        (False, True, {"send_verification_code.phone: unknown": 1}),
    ],
)
def test_each_declaration_removes_its_own_refusals(
    phone: bool, operator: bool, causes: dict[str, int]
) -> None:
    """Without the operator's plans the plan calls are refused; without phone:+1 the E.164 text."""
    report = replay_live(TRACES, _manifest(phone=phone, operator=operator), live_telecom.fresh)
    live = report.total.live
    assert live is not None
    assert dict(live.refusal_causes) == causes


def test_a_plan_one_edit_from_the_current_one_is_not_called_a_copy_of_it() -> None:
    """Without the catalog, P1005 (one edit from the produced P1004) names no entry as meant."""
    guard = Guard.from_manifest(_manifest(operator=False), mode="reprompt")
    tools = live_telecom.fresh()
    with guard.session("plans"):
        guard.observe_user("Hi, my number is (555) 123-2002. Move my second line to Max.")
        found = tools["find_customer_by_phone"](phone="555-123-2002")
        guard.record("find_customer_by_phone", {"phone": "555-123-2002"}, found)
        guard.record("get_details_by_id", {"id": "L1001"}, tools["get_details_by_id"](id="L1001"))
        guard.record("get_details_by_id", {"id": "L1002"}, tools["get_details_by_id"](id="L1002"))
        verdict = guard.check("change_plan", {"line_id": "L1002", "plan_id": "P1005"})
    (finding,) = verdict.findings
    assert (finding.problem, finding.kind, finding.nearest_role) == ("mutated", "plan", None)
    assert "matches none of the ledger's 'plan' entries" in verdict.message
