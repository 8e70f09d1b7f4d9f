"""Approvals: when an id's provenance calls for the user's word, and how that word is taken.

A value with weaker provenance than a declared result field (typed by the
user, seen in a result's free text, chosen by an outside party) is weighed
by its kind's policy on a write or an egress read (:func:`weigh`): allowed,
refused, or asked of the user. An ask is an
:class:`~guardrail._data.verdict.ApprovalRequest` carrying the evidence and a
token: an HMAC, under the guard's approval key, of the session, tool, kind
and value. Only the program holds the key, so only the program can approve
(:func:`decide`); nothing a model writes is a token, and a token names the
one session, tool, kind and value it was made for.

For a runtime adapter: run ``guard.enforce`` (or ``guard.check``); a
verdict whose ``outcome`` is ``"ask"`` lists ``verdict.approvals``; show
each request's ``tool``, ``param``, ``value``, ``kind``, ``tier`` and
``evidence`` to the user through the runtime's own approval mechanism, keep
its ``token``, and on the user's answer call ``guard.approve(request)`` or
``guard.deny(request)`` (or pass the token alone). Then run the call
again: an approved value is allowed for that session, tool and kind; a
denied one is refused as ``declined``. Never take an approval from model
output.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, NamedTuple, get_args

from guardrail._check.tokens import Grant, Keys, read_token, stale
from guardrail._data.batch import Batch
from guardrail._data.entry import (
    NO_SEALS,
    NOTHING,
    ONE_CALL,
    Entry,
    Mention,
    Source,
    answer_parts,
    seal_name,
)
from guardrail._data.text import excerpt, shorten
from guardrail._data.verdict import ApprovalRequest, Finding, Problem
from guardrail._declare.spec import ToolSpec
from guardrail._transcript.result_text import REFUSAL_PREFIX
from guardrail.errors import GuardrailUsageError
from guardrail.kinds import Kind
from guardrail.kinds._operator import Catalog
from guardrail.ledger._state import LedgerState

#: What :func:`weigh` answers for a value that may go ahead.
ALLOW: Final = "allow"
#: What :func:`weigh` answers for a value the user must approve first.
ASK: Final = "ask"


class Weighed(NamedTuple):
    """A value weighed by its kind's policy: ``ALLOW``, ``ASK`` or a refusal's problem."""

    answer: str
    evidence: str = ""
    tier: str = ""


def weigh(
    kind: Kind,
    entry: Entry | None,
    *,
    write: bool,
    typed: bool = False,
    approved: bool = False,
    declined: bool = False,
) -> Weighed:
    """What an id of ``kind`` may do in a call (a write, or an egress read) of one tool.

    ``entry`` is the ledger's entry for the value (None: a value of a kind
    with no pattern that the user typed, ``typed``). An approval for this
    tool (``approved``, see :func:`answer`) lets it through; a verified value
    is weighed only when an outside party chose it; an unverified one by its
    tiers' policies, the most permissive winning. On an egress read
    (``write`` false) a value the policies would only have verified goes
    ahead, as on any read. A value the user declined for this tool
    (``declined``) is refused where it would be asked.
    """
    if approved:
        return Weighed(ALLOW)
    if entry is not None and entry.verified:
        if not entry.outside or kind.outside == "allow":
            return Weighed(ALLOW)
        if typed:  # the user named it too: their word weighs, on a value a tool returned
            if kind.user_typed != "ask":
                return Weighed(ALLOW)
            return Weighed("declined" if declined else ASK, "typed by the user", "user")
        evidence = _outside_evidence(entry)
        if kind.outside == "refuse":
            return Weighed("outside", evidence, entry.tier)
        return Weighed("declined" if declined else ASK, evidence, entry.tier)
    answers: list[Weighed] = []
    if typed or (entry is not None and entry.tier == "user"):
        evidence = (
            f"typed by the user at turn {entry.source.turn}"
            if entry is not None and entry.source.tool == "user"
            else "typed by the user"
        )
        policy = kind.user_typed
        answers.append(
            Weighed(
                ALLOW if policy == "allow" else ASK if policy == "ask" else "unverified",
                evidence,
                "user",
            )
        )
    if entry is not None and entry.mention is not None and kind.mentions != "ignore":
        rule: str = kind.mentions
        if entry.outside and _STRICT[kind.outside] > _STRICT[rule]:
            rule = kind.outside  # written by an outside party: the stricter policy
        refused = "outside" if rule == kind.outside and entry.outside else "mentioned"
        if rule == "read":  # any read may take it; a write asks
            rule = "ask" if write else "allow"
        answer = ALLOW if rule == "allow" else ASK if rule == "ask" else refused
        answers.append(Weighed(answer, mention_evidence(entry), "mentioned"))
    if not answers:
        return Weighed(ALLOW if not write else "unverified")
    best = min(answers, key=lambda w: _ORDER.get(w.answer, 2))
    if not write and best.answer == "unverified":
        return Weighed(ALLOW)
    if best.answer == ASK:
        evidence = "; ".join(w.evidence for w in answers if w.answer != "unverified")
        return Weighed("declined" if declined else ASK, evidence or best.evidence, best.tier)
    return best


_ORDER = {ALLOW: 0, ASK: 1}
_STRICT = {"allow": 0, "read": 1, "ask": 2, "refuse": 3}


def mention_evidence(entry: Entry) -> str:
    """Where a mentioned value was seen, for the user: the call, the place, the turn, the text."""
    mention = entry.mention
    if mention is None:
        return ""
    source = entry.source
    place = "" if source.path in ("$", "") else f" (at {source.path})"
    who = ", written by an outside party" if entry.outside else ""
    return (
        f"seen in the text of {mention.call}{who} at turn {source.turn}{place}: {mention.excerpt!r}"
    )


def _outside_evidence(entry: Entry) -> str:
    source = entry.source
    return (
        f"chosen by an outside party: the field {source.path} of a {source.tool} result "
        f"at turn {source.turn}"
    )


def refusal(
    weighed: Weighed, *, tool: str, param: str, value: str, kind: str, role: str | None
) -> Finding:
    """The finding of a value its kind's policy refuses: mentioned, outside, or declined."""
    details = {
        "declined": "the user declined this value for this tool",
        "mentioned": "only seen in the text of a result, and its kind refuses such values",
        "outside": "chosen by an outside party, and its kind refuses such values",
    }
    problem: Problem = weighed.answer  # type: ignore[assignment]
    detail = details.get(weighed.answer, "")
    if weighed.evidence:
        detail = f"{detail} ({weighed.evidence})" if detail else weighed.evidence
    return Finding(problem, tool, param, value, kind, role, detail)


#: What :func:`weigh_value` gives for a value the user typed that its kind allows, with no entry.
TYPED: Final[Any] = object()


def weigh_value(
    spec: ToolSpec,
    kinds: Sequence[Kind],
    param: str,
    enforced: bool,
    text: str | None,
    entry: Entry | None,
    state: LedgerState,
) -> Entry | Finding | ApprovalRequest | None:
    """One id argument of a call that weighs its ids (a write or egress read), by policy.

    ``entry``: the one the check found for it (verified, or on a read). Gives
    the entry to use (allowed; :data:`TYPED` for a typed value with no entry),
    a finding (refused by policy), a request (the user must approve it), or
    None: not weighed here, on to the usual check (an unknown value, say).
    """
    if text is None:
        return None
    found: tuple[Kind, Entry | None, bool] | None = None
    if entry is not None:
        found = (next(k for k in kinds if k.name == entry.kind), entry, False)
    else:
        for kind in kinds:
            key = kind.key(text)
            held = None if key is None else state.tables.get(kind.name, {}).get(key)
            if held is not None and key not in kind.examples:
                found = (kind, held, False)
                break
            # Typed by the user though no entry holds it: a kind with no pattern, or a value of
            # the kind's shape its pattern took with more around it ("www.our-company.com"
            # from "...www.our-company.com.They sent"): the check calls it typed by the user,
            # so the kind's user_typed policy weighs it.
            if (
                key is not None
                and (not kind.has_pattern or kind.matches(text))
                and state.typed_by_user(text, kind)
            ):
                found = (kind, None, True)
                break
            seen = text_mention(state, kind, text) if key is not None else None
            if seen is not None:
                found = (kind, seen, False)
                break
    if found is None:
        return None
    kind, held, typed = found
    if held is not None and (held.outside or not held.verified) and not typed:
        typed = state.typed_by_user(text, kind)
    yes, no = (None, False) if held is None else answer(state, held, spec.name)
    weighed = weigh(
        kind,
        held,
        write=spec.effect == "write",
        typed=typed,
        approved=yes is not None,
        declined=no,
    )
    if weighed.answer == ALLOW:
        return held if held is not None and held.key else TYPED
    if weighed.answer == "unverified" or not enforced:
        return None  # the usual check words it (or logs it, for an advisory kind)
    if weighed.answer != ASK:
        role = held.role if held is not None else None
        return refusal(weighed, tool=spec.name, param=param, value=text, kind=kind.name, role=role)
    return ApprovalRequest(
        tool=spec.name,
        param=param,
        value=held.value if held is not None else text,
        kind=kind.name,
        tier=weighed.tier,
        outside=held.outside if held is not None else False,
        evidence=weighed.evidence,
        session=state.session_id,
    )


#: The tier of an id the operator declared (:mod:`guardrail.kinds._operator`): never an
#: entry of a ledger, so never stored, and never taken from what a user, model or tool wrote.
OPERATOR: Final = "operator"
#: The source of an operator id in a verdict (its tool and path).
_OPERATOR_SOURCE: Final = "operator"
#: Operator ids a re-prompt lists of a kind, at most.
_LISTED: Final = 10


def vouched_for(
    spec: ToolSpec,
    kinds: Sequence[Kind],
    param: str,
    enforced: bool,
    text: str,
    state: LedgerState,
    operator: Catalog,
    *,
    lookups: Mapping[str, tuple[str, ...]],
) -> Entry | Finding | ApprovalRequest | None:
    """One id argument the operator declared, weighed by its kind's ``operator`` policy.

    Gives the entry it is used as (allowed: of tier ``operator``, in no
    ledger), a finding, a request for the user's approval, or None: no
    accepted kind's operator ids hold it (the usual check goes on). Reads
    take an operator id whatever the policy; on a write or egress read
    ``"ask"`` asks (an approval or a refusal for this tool is remembered in
    the ledger, as for any value) and ``"verify"`` wants a tool to return it
    first.
    """
    for kind in kinds:
        values = operator.get(kind.name)
        if not values:
            continue
        key = kind.key(text)
        if key is None or key not in values:
            continue
        weighs = spec.effect == "write" or spec.egress
        held = state.tables.get(kind.name, {}).get(key)
        if not weighs or kind.operator == "allow" or (held and spec.name in held.approved):
            return _operator_entry(kind, key, values[key], state)
        if held is not None and spec.name in held.declined:
            weighed = Weighed("declined", operator_evidence(kind), OPERATOR)
            role = held.role
            return refusal(
                weighed, tool=spec.name, param=param, value=text, kind=kind.name, role=role
            )
        if kind.operator == "verify":
            origin = "declared by the operator"
            detail = (
                f"{origin}, never looked up"
                if lookups.get(kind.name)
                else f"{origin}; no declared read tool looks up kind {kind.name!r} to confirm it"
            )
            return Finding("unverified", spec.name, param, text, kind.name, None, detail, enforced)
        if not enforced:
            return None
        return ApprovalRequest(
            tool=spec.name,
            param=param,
            value=text,
            kind=kind.name,
            tier=OPERATOR,
            outside=False,
            evidence=operator_evidence(kind),
            session=state.session_id,
        )
    return None


def operator_evidence(kind: Kind) -> str:
    """Where an operator id came from, for the user and the audit."""
    return f"declared by the operator: one of the {kind.name!r} ids it knows"


def _operator_entry(kind: Kind, key: str, value: str, state: LedgerState) -> Entry:
    """An operator id as the entry a verdict uses: tier ``operator``, in no ledger."""
    turn = state.turn
    return Entry(
        value=value,
        kind=kind.name,
        key=key,
        role=f"{OPERATOR}.{kind.name}",
        source=Source(_OPERATOR_SOURCE, None, _OPERATOR_SOURCE, turn),
        first_seen=turn,
        last_used=turn,
        verified=True,
        tier=OPERATOR,
    )


def operator_listed(kind: str, operator: Catalog) -> str | None:
    """The operator's ids of ``kind`` as a re-prompt lists them (at most ten), or None: none."""
    values = operator.get(kind)
    if not values:
        return None
    shown = sorted(values.values())[:_LISTED]
    more = f" and {len(values) - len(shown)} more" if len(values) > len(shown) else ""
    return ", ".join(shown) + more


def text_mention(state: LedgerState, kind: Kind, value: str) -> Entry | None:
    """A value of a kind with no pattern seen in a kept result text, as an entry of no ledger.

    Its key is empty: it stands for the evidence only, and is never used or stored.
    """
    if kind.has_pattern or kind.mentions == "ignore":
        return None
    kept = state.result_texts.find(value, kind)
    if kept is None:
        return None
    entry = Entry(
        value=value,
        kind=kind.name,
        key="",
        role="",
        source=kept.source,
        first_seen=kept.source.turn,
        last_used=kept.source.turn,
        verified=False,
        tier="mentioned",
        outside=kept.outside,
        mention=Mention(kept.call, excerpt(kept.text, value)),
    )
    return entry


def answer_now(
    approve: Callable[[ApprovalRequest], object], requests: Sequence[ApprovalRequest]
) -> list[bool]:
    """The inline approver's answer to each request, for a sync call (it must not be async)."""
    answers = [approve(request) for request in requests]
    if any(inspect.isawaitable(answer) for answer in answers):
        for answer in answers:
            if inspect.iscoroutine(answer):
                answer.close()
        raise GuardrailUsageError(
            "Guard(approve=...) is a coroutine function: it answers for async tools only. "
            "Give a plain function to answer for sync tools and guard.enforce"
        )
    return [bool(answer) for answer in answers]


async def answer_async(
    approve: Callable[[ApprovalRequest], object], requests: Sequence[ApprovalRequest]
) -> list[bool]:
    """The inline approver's answer to each request, awaited where it is a coroutine."""
    answers = []
    for request in requests:
        answer = approve(request)
        answers.append(bool(await answer if inspect.isawaitable(answer) else answer))
    return answers


def decide_request(
    keys: Keys,
    state: LedgerState,
    request: ApprovalRequest | str,
    approved: bool,
    *,
    once: bool = False,
) -> tuple[Grant, Entry]:
    """Record the user's answer to a request of ``state``'s session: what it granted, the entry.

    A request of another life of the session (deleted or expired since) is
    :class:`~guardrail.errors.StaleApproval`; one of another ledger of no
    session, a usage error.
    """
    grant = read_token(keys, request)
    if grant.session != state.session_id:
        raise GuardrailUsageError(
            f"the request was made in session {grant.session!r}, not in "
            f"{state.session_id!r}: an approval covers the session it was asked in"
        )
    if grant.instance != state.instance:
        if grant.session is None:
            raise GuardrailUsageError(
                "the request was made on another ledger: an approval covers the ledger it was "
                "asked on. Pass that ledger as ledger=, or ask again on this one"
            )
        raise stale(grant.session)
    return grant, decide(state, grant, approved, once=once)


# -- the user's answer -----------------------------------------------------------------------


#: What an approval covers: ``"value"``, the value for that tool in that session (the
#: default); ``"call"``, the held call alone: it is used up as the call runs.
Scope = Literal["value", "call"]
SCOPES: Final = get_args(Scope)


def checked_scope(scope: object) -> bool:
    """Whether ``scope`` is ``"call"`` (a usage error for anything but :data:`SCOPES`)."""
    if scope not in SCOPES:
        raise GuardrailUsageError(
            f"scope is what an approval covers: 'value' (the value for that tool in that "
            f"session, the default) or 'call' (the held call alone), not {scope!r}"
        )
    return scope == "call"


def decide(state: LedgerState, grant: Grant, approved: bool, *, once: bool = False) -> Entry:
    """Record the user's answer in a ledger: the value approved (or declined) for the tool.

    ``once``: approved for the held call alone (see :data:`SCOPES`). A value
    the ledger no longer holds comes back in (the user named it by approving
    it), as ``introduced``: the approval covers this tool only. In a session
    of a guard with a secret each answer carries its MAC (:func:`answer`).
    """
    with state.lock:
        table = state.tables.get(grant.kind)
        entry = table.get(grant.key) if table is not None else None
        if entry is None:
            batch = Batch.one(grant.kind, grant.value, grant.key, "approval")
            source = Source("approval", None, "approval", state.turn)
            admitted = state.admit([batch], source=source, verified=False, tool="approval")
            if not admitted.added:
                raise GuardrailUsageError(
                    f"the ledger of session {grant.session!r} has no room for the approved "
                    "value (every entry is pinned or in use this turn)"
                )
            entry = admitted.added[0]
            kind = state.kinds.get(grant.kind)
            seen = text_mention(state, kind, grant.value) if kind is not None else None
            if seen is not None:  # keep where it was seen: another tool asks with it again
                entry.tier, entry.outside, entry.mention = "mentioned", seen.outside, seen.mention
                entry.source = seen.source
        tool = grant.tool
        kept_yes = frozenset(a for a in entry.approved if answer_parts(a)[0] != tool)
        kept_no = frozenset(a for a in entry.declined if answer_parts(a)[0] != tool)
        item = tool + (ONE_CALL if once else "")
        if approved:
            entry.approved, entry.declined = kept_yes | {item}, kept_no
        else:
            entry.approved, entry.declined = kept_yes, kept_no | {item}
        _seal(state, entry, item, approved)
        state.changed(entry.kind, entry.key)
    state.persist()
    return entry


def _answer_mac(state: LedgerState, entry: Entry, name: str) -> str:
    """The MAC of one answer: this session and its life, the id, the tool, scope, yes or no."""
    assert state.answer_key is not None
    message = json.dumps(
        [state.session_id, state.instance, entry.kind, entry.key, name],
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode("utf-8", "surrogatepass")
    mac = hmac.new(state.answer_key, b"guardrail answer\0" + message, hashlib.sha256)
    return mac.hexdigest()[:32]


def _seal(state: LedgerState, entry: Entry, item: str, approved: bool) -> None:
    """Keep the MACs of ``entry``'s answers: this one's, and those of answers it still holds."""
    if state.answer_key is None:
        return
    held = {seal_name(a, True) for a in entry.approved}
    held |= {seal_name(a, False) for a in entry.declined}
    seals = {name: mac for name, mac in entry.seals.items() if name in held}
    name = seal_name(item, approved)
    seals[name] = _answer_mac(state, entry, name)
    entry.seals = seals


def _holds(state: LedgerState, entry: Entry, item: str, approved: bool) -> bool:
    """Whether an answer kept on ``entry`` holds: with an answer key, only if its MAC verifies."""
    if state.answer_key is None:
        return True
    name = seal_name(item, approved)
    mac = entry.seals.get(name)
    # Written into the store by someone without the secret (or copied): it grants nothing.
    return mac is not None and hmac.compare_digest(mac, _answer_mac(state, entry, name))


def answer(state: LedgerState, entry: Entry, tool: str) -> tuple[str | None, bool]:
    """The user's answer on ``entry`` for ``tool``: the approval that holds (None), declined.

    In a session of a guard with a secret only answers whose MAC verifies
    count: one a store writer added or altered grants nothing.
    """
    yes = next(
        (a for a in entry.approved if answer_parts(a)[0] == tool and _holds(state, entry, a, True)),
        None,
    )
    no = any(answer_parts(a)[0] == tool and _holds(state, entry, a, False) for a in entry.declined)
    return yes, no


def use_up(state: LedgerState, tool: str, used: Sequence[Entry]) -> None:
    """A call of ``tool`` runs: the approvals of the held call alone it ran on are used up."""
    with state.lock:
        for entry in used:
            spent = frozenset(
                a for a in entry.approved if answer_parts(a)[1] and answer_parts(a)[0] == tool
            )
            if spent:
                entry.approved = entry.approved - spent
                if entry.seals:
                    gone = {seal_name(a, True) for a in spent}
                    entry.seals = {k: v for k, v in entry.seals.items() if k not in gone}
                state.changed(entry.kind, entry.key)


def renew(state: LedgerState) -> None:
    """Start a new life of a ledger: a new instance, and its approvals and denials gone.

    The session ended: requests made in it are stale (their token names the
    old instance), and what the user answered there covers nothing after it.
    """
    with state.lock:
        state.instance = secrets.token_urlsafe(12)
        for entry in state.entries():
            if entry.approved or entry.declined or entry.seals:
                entry.approved = entry.declined = NOTHING
                entry.seals = NO_SEALS
                state.changed(entry.kind, entry.key)


def ask_message(tool: str, requests: Sequence[ApprovalRequest]) -> str:
    """What the model is told of a call that waits for the user: never that it may approve."""
    head = f"{REFUSAL_PREFIX}{tool} for now; the tool did not run. It waits for the user's"
    lines = [f"{head} approval of:"]
    lines += [
        f"- {r.param}={shorten(r.value, quote=True)} ({r.kind}; {r.evidence})" for r in requests
    ]
    lines.append(
        "Only the user can approve it, outside this conversation; nothing you write approves "
        "it. Do not retry this call or try other values: tell the user what the call needs "
        "and that it waits for their approval."
    )
    return "\n".join(lines)
