"""A replayed call that would wait for the user: counted, then approved or declined as told."""

from __future__ import annotations

from dataclasses import replace

from guardrail._data.verdict import Verdict
from guardrail._guard.facade import Guard
from guardrail.ledger import Ledger
from guardrail.replay._stats import Example, Stats
from guardrail.replay._traces import ToolCall


def answer(
    guard: Guard,
    ledger: Ledger,
    stats: Stats,
    approve: str | None,
    call: ToolCall,
    verdict: Verdict,
    example: Example,
) -> Verdict:
    """Count an ask (each value's tier, an example); with ``approve``, answer and check again.

    ``approve``: ``"all"`` approves every request, ``"none"`` declines them
    (the call is then refused), None leaves the call waiting.
    """
    requests = verdict.approvals
    shown = tuple(
        {"problem": r.tier, "param": r.param, "value": r.value, "nearest_role": None}
        for r in requests
    )
    stats.add_ask([r.tier for r in requests], replace(example, findings=shown))
    if approve is None:
        return verdict
    approved = approve == "all"
    for request in requests:
        (guard.approve if approved else guard.deny)(request, ledger=ledger)
    if approved:
        stats.approved += 1
    else:
        stats.declined += 1
    return guard.check(call.name, call.arguments or {}, ledger=ledger)
