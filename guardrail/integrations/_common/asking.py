"""What every adapter does when a call waits for the user: check, ask, take the answer.

Each runtime has its own way to put a tool call before a person (run
interruptions, ``interrupt()``, deferred tool requests, elicitation); the
guard's part is the same in all of them. :func:`enforce` checks a call, an
ask coming back as a verdict in every mode (an ask is not a refusal, so
``raise`` mode does not raise it). :func:`shown` is what the runtime shows
the user. :func:`approved` takes the runtime's word that the user approved
a call: the call's requests are approved (with the scope the runtime's own
option maps to), then it is checked again. Given the call's id, a held
call runs at most once per answer (:func:`already_ran` for the rest).
:func:`declined` records the user's no and gives the text the model reads.
The answer only ever comes from the runtime's approval channel, which the
program drives; nothing the model writes reaches these functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from guardrail._check.approvals import Scope
from guardrail._check.reprompt import reprompt
from guardrail._data.text import shorten
from guardrail._data.verdict import ApprovalRequest, Finding, Verdict
from guardrail._guard.facade import internals
from guardrail._transcript.result_text import REFUSAL_PREFIX
from guardrail.errors import ApprovalRequired
from guardrail.ledger._ledger import state_of

if TYPE_CHECKING:
    from guardrail._guard.facade import Guard
    from guardrail.ledger import Ledger
    from guardrail.ledger._state import LedgerState

__all__ = [
    "KEY",
    "already_ran",
    "approved",
    "declined",
    "enforce",
    "enforce_async",
    "payload",
    "peek",
    "question",
    "ran",
    "shown",
    "waiting",
]

#: The key under which an adapter's approval payload carries the guard's requests.
KEY = "guardrail"


def enforce(
    guard: Guard,
    name: str,
    arguments: Mapping[str, Any],
    *,
    ledger: Ledger | None = None,
    call_id: str | None = None,
    runs: bool = True,
) -> Verdict:
    """``guard.enforce``, with a call that waits for the user returned, not raised.

    The runtime puts that call to the user: no model is re-prompted, so it
    does not count towards ``max_reprompts`` (four payments the user approves
    in one turn are not four refusals). With ``call_id``, a held call runs at
    most once per answer: once it ran, the same call id is refused
    (:func:`already_ran`), in every worker sharing the session. ``runs``
    false: an allowed call does not run yet; :func:`ran` says when it does.
    """
    state = _state(guard, ledger)
    if call_id is not None and state.calls.has_run(call_id):
        return already_ran(name, call_id)
    try:
        verdict = guard.enforce(name, arguments, ledger=ledger)
    except ApprovalRequired as asked:
        verdict = asked.verdict
    verdict = _uncounted(guard, name, verdict, ledger)
    if not runs and verdict.allowed:
        return verdict
    return _held(guard, state, call_id, verdict)


def ran(guard: Guard, call_id: str, *, ledger: Ledger | None = None) -> None:
    """A call checked with ``runs=False`` runs now: held before, it does not run again."""
    state = _state(guard, ledger)
    if guard.mode != "observe" and state.calls.runs(call_id):
        state.persist()


async def enforce_async(
    guard: Guard,
    name: str,
    arguments: Mapping[str, Any],
    *,
    ledger: Ledger | None = None,
    call_id: str | None = None,
) -> Verdict:
    """:func:`enforce` for an async runtime: ``Guard(approve=...)`` may be a coroutine function."""
    state = _state(guard, ledger)
    if call_id is not None and state.calls.has_run(call_id):
        return already_ran(name, call_id)
    try:
        verdict = await guard.enforce_async(name, arguments, ledger=ledger)
    except ApprovalRequired as asked:
        verdict = asked.verdict
    return _held(guard, state, call_id, _uncounted(guard, name, verdict, ledger))


def _state(guard: Guard, ledger: Ledger | None) -> LedgerState:
    return state_of(ledger) if ledger is not None else internals(guard).sessions.current()


def _held(
    guard: Guard,
    state: LedgerState,
    call_id: str | None,
    verdict: Verdict,
    *,
    answered: bool = False,
) -> Verdict:
    """Note a call held for the user, or a held (``answered``: approved) call about to run."""
    if call_id is None or guard.mode == "observe":
        return verdict
    if waiting(guard, verdict):
        changed = state.calls.hold(call_id)
    elif verdict.allowed:
        changed = state.calls.runs(call_id, held=answered)
    else:
        return verdict
    if changed:
        state.persist()  # a scope's end writes it; a default session writes it now
    return verdict


def already_ran(name: str, call_id: str) -> Verdict:
    """The refusal of a held call brought back after it ran on the user's answer."""
    return Verdict(
        name,
        False,
        message=(
            f"{REFUSAL_PREFIX}{name} again: this call ({call_id}) already ran, once, on the "
            "user's answer, and one answer runs a call once. Its result is above; go on from "
            "it, and make a new call only if the user asks for another."
        ),
    )


def _uncounted(guard: Guard, name: str, verdict: Verdict, ledger: Ledger | None) -> Verdict:
    """``verdict``, a call that waits for the user taken off the tool's re-prompt count."""
    if waiting(guard, verdict):
        state = state_of(ledger) if ledger is not None else internals(guard).sessions.current()
        state.reprompts.discount(name, state.turn)
    return verdict


def waiting(guard: Guard, verdict: Verdict) -> tuple[ApprovalRequest, ...]:
    """What a call waits for the user to approve (nothing in ``observe`` mode: it runs)."""
    return verdict.approvals if guard.mode != "observe" else ()


def peek(
    guard: Guard, name: str, arguments: Mapping[str, Any], *, ledger: Ledger | None = None
) -> tuple[ApprovalRequest, ...]:
    """What a call would wait for the user to approve: checked, but logged and counted nowhere.

    For a runtime that asks before the call is checked in earnest (a tool's
    ``needs_approval``); the check that follows logs it.
    """
    parts = internals(guard)
    state = state_of(ledger) if ledger is not None else parts.sessions.current()
    return waiting(guard, parts.engine.verdict(name, arguments, state))


def approved(
    guard: Guard,
    name: str,
    arguments: Mapping[str, Any],
    *,
    ledger: Ledger | None = None,
    call_id: str | None = None,
    scope: Scope = "value",
) -> Verdict:
    """The runtime says the user approved this call: approve what it asks, then enforce it.

    The requests are the ones a fresh check of these arguments makes (the
    arguments the runtime runs, edited ones included), so the approval is
    bound to this session, tool and values, with ``scope`` (the runtime's
    own option mapped: ``"call"`` for the held call alone); only the check
    that runs it is logged and counted. With ``call_id``, the call runs once
    for this answer: brought back after it ran, it is refused (:func:`already_ran`).
    """
    state = _state(guard, ledger)
    if call_id is not None and state.calls.has_run(call_id):
        return already_ran(name, call_id)
    for request in peek(guard, name, arguments, ledger=ledger):
        guard.approve(request, ledger=ledger, scope=scope)
    try:
        verdict = guard.enforce(name, arguments, ledger=ledger)
    except ApprovalRequired as asked:
        verdict = asked.verdict
    verdict = _uncounted(guard, name, verdict, ledger)
    return _held(guard, state, call_id, verdict, answered=True)


def declined(
    guard: Guard,
    requests: Iterable[ApprovalRequest | Mapping[str, Any]],
    *,
    ledger: Ledger | None = None,
) -> str:
    """Record the user's no to each request; the refusal the model reads: the user declined.

    A request is one of a verdict's, or its payload as :func:`shown` gave it.
    """
    findings = []
    for request in requests:
        if isinstance(request, ApprovalRequest):
            token, tool, param = request.token, request.tool, request.param
        else:
            token, tool, param = request["token"], request["tool"], request["param"]
        entry = guard.deny(token, ledger=ledger)
        detail = "the user declined this value for this tool"
        findings.append(
            Finding("declined", tool, param, entry.value, entry.kind, entry.role, detail)
        )
    return reprompt(findings[0].tool if findings else "", findings)


def shown(requests: Sequence[ApprovalRequest]) -> list[dict[str, Any]]:
    """The requests as the runtime's approval payload carries them (each with its token)."""
    return [request.to_dict() for request in requests]


def question(tool: str, requests: Sequence[ApprovalRequest]) -> str:
    """What the user is asked: the call, each value, and where it came from."""
    lines = [f"Allow {tool} to run with:"]
    lines += [
        f"- {r.param} = {shorten(r.value, quote=True)} ({r.kind}, {r.tier}): {r.evidence}"
        for r in requests
    ]
    return "\n".join(lines)


def payload(found: Any) -> list[Mapping[str, Any]]:
    """The requests an approval payload carries under :data:`KEY` (none: not the guard's)."""
    items = found.get(KEY) if isinstance(found, Mapping) else None
    if not isinstance(items, list):
        return []
    return [
        item
        for item in items
        if isinstance(item, Mapping)
        and all(isinstance(item.get(key), str) for key in ("token", "tool", "param"))
    ]
