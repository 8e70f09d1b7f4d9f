"""The check: every identifier argument of a call, against the ledger.

An argument is allowed when its normalised value is a verified ledger entry
of a compatible kind, or an unverified one passed to a ``read`` tool.
Otherwise it gets one finding, exact matches first (``example``,
``unverified``, ``evicted``, ``wrong_kind``), then ``truncated``, then
``mutated``, then ``unknown``. The allowed path (:mod:`guardrail._check.allowed`)
is one look-up per id; the near-miss search (:mod:`guardrail._check.nearmiss`) runs only for a
value that is refused, and :mod:`guardrail._check.reprompt` words the refusal.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from guardrail._check.allowed import (
    NO_DEFAULT,
    AllowedPath,
    FastParams,
    OtherKind,
    compile_allowed,
    refer,
)
from guardrail._check.approvals import (
    OPERATOR,
    ask_message,
    text_mention,
    vouched_for,
    weigh_value,
)
from guardrail._check.closest import near_or_unknown
from guardrail._check.reprompt import dropped_detail, refusal_head, reprompt
from guardrail._data.verdict import ApprovalRequest, Finding, Problem, TypedId, Verdict
from guardrail._declare.spec import ParamSpec, ToolSpec
from guardrail.kinds import Kind, id_text
from guardrail.kinds._operator import EMPTY, Catalog
from guardrail.ledger import Entry
from guardrail.ledger._state import LedgerState

# -- the compiled plan for one tool ---------------------------------------------------------


@dataclass(frozen=True)
class _ParamPlan:
    param: ParamSpec
    name: str
    simple: bool
    kinds: tuple[Kind, ...]
    enforced: bool
    #: The function's default for the parameter, checked when the argument is omitted.
    default: Any = NO_DEFAULT


@dataclass(frozen=True)
class CheckPlan:
    """A tool spec with its kinds resolved, compiled once per declaration.

    ``fast`` is set when every identifier parameter is a plain top-level
    argument: the allowed path then reads it with one look-up per kind, and
    ``allowed`` is that path compiled (:func:`~guardrail._check.allowed.compile_allowed`).
    ``quiet`` is what the registry found about the tool's results: the types
    of a result whose record brings nothing in and logs nothing above DEBUG
    after a call allowed outright (``str``: a text that does not look like JSON).
    """

    spec: ToolSpec
    params: tuple[_ParamPlan, ...]
    read: bool
    lookups: Mapping[str, tuple[str, ...]]
    fast: FastParams | None = None
    #: A write or egress read taking a kind with an approval policy: its ids are weighed
    #: (:func:`guardrail._check.approvals.weigh`) before they are allowed.
    weighs: bool = False
    allowed: AllowedPath = refer
    quiet: frozenset[type] = frozenset()


def compile_plan(
    spec: ToolSpec,
    kinds: Mapping[str, Kind],
    lookups: Mapping[str, tuple[str, ...]],
    *,
    quiet: frozenset[type] = frozenset(),
    previous: CheckPlan | None = None,
) -> CheckPlan:
    """Resolve the kinds of every parameter of ``spec`` (which must all exist).

    ``previous``: the tool's plan before this compilation; its allowed path is
    kept when it reads the same parameters the same way, so a guarded function
    written with it (:mod:`guardrail._guard.decorator`) still takes it.
    """
    params = []
    for param in spec.params:
        resolved = tuple(kinds[name] for name in param.kinds)
        params.append(
            _ParamPlan(
                param=param,
                name=param.path.text,
                simple=param.simple,
                kinds=resolved,
                enforced=any(kind.enforce for kind in resolved),
                default=(
                    NO_DEFAULT if param.default_ok else spec.defaults.get(param.name, NO_DEFAULT)
                ),
            )
        )
    fast: FastParams | None = None
    writes = spec.effect == "write" or spec.egress
    weighs = writes and any(_has_policy(kind) for param in params for kind in param.kinds)
    # The allowed path takes any verified id on a write, any id on a read: it cannot tell
    # an outside party's id, nor (on an egress read) an unverified one, so such plans skip it.
    tells = not weighs or not (
        spec.egress or any(kind.outside != "allow" for param in params for kind in param.kinds)
    )
    if tells and all(param.simple for param in params):
        fast = tuple(
            (
                param.name,
                spec.positions.get(param.name, -1),
                param.kinds[0].name,
                param.kinds[0].normalize,
                tuple(OtherKind(kind.name, kind.normalize) for kind in param.kinds[1:]),
                param.default,
            )
            for param in params
        )
    read = spec.effect == "read"
    allowed: AllowedPath = refer
    if fast is not None:
        if previous is not None and previous.fast == fast and previous.read == read:
            allowed = previous.allowed
        else:
            allowed = compile_allowed(fast, read)
    return CheckPlan(
        spec=spec,
        params=tuple(params),
        read=read,
        lookups=lookups,
        fast=fast,
        weighs=weighs,
        allowed=allowed,
        quiet=quiet,
    )


def _has_policy(kind: Kind) -> bool:
    """Whether a kind asks or allows beyond the defaults (user_typed, mentions or outside)."""
    return kind.user_typed != "verify" or kind.mentions != "ignore" or kind.outside != "allow"


# -- reading argument values ----------------------------------------------------------------


def _values(plan: _ParamPlan, arguments: Mapping[str, Any]) -> list[Any]:
    param = plan.param
    values = param.path.extract(arguments, parse_json_strings=True)
    if param.sep is None:
        return values
    split: list[Any] = []
    for value in values:
        if isinstance(value, str):
            split.extend(part for part in (p.strip() for p in value.split(param.sep)) if part)
        else:
            split.append(value)
    return split


# -- the check ------------------------------------------------------------------------------


def check_arguments(
    plan: CheckPlan,
    arguments: Mapping[str, Any],
    state: LedgerState,
    operator: Catalog = EMPTY,
) -> Verdict:
    """Check every identifier argument of one call; touch the entries of an allowed call.

    The verdict's ``arguments`` are ``arguments`` themselves: the guard
    allows or refuses a call, it never rewrites one, so an allowed call runs
    with each identifier exactly as the model wrote it (see docs/decisions.md).
    ``operator``: the operator's ids of each kind, for this session
    (:mod:`guardrail.kinds._operator`).
    """
    used_fast = plan.allowed((), arguments, state)
    if used_fast is not None:
        return Verdict(plan.spec.name, True, used=tuple(used_fast), arguments=arguments)
    by_kind = state.tables
    read = plan.read
    used: list[Entry] = []
    typed: list[TypedId] = []
    findings: list[Finding] = []
    asks: list[ApprovalRequest] = []
    for param in plan.params:
        if param.simple:
            value = arguments.get(param.name, param.default)
            if value is NO_DEFAULT or value is None:
                continue
            values: Iterable[Any] = (value,)
        elif param.default is not NO_DEFAULT and param.param.name not in arguments:
            values = _values(param, {param.param.name: param.default})
        else:
            values = _values(param, arguments)
        for value in values:
            if value is None:
                continue
            text = value if type(value) is str else id_text(value)
            if text is not None:
                entry = _held(param.kinds, text, by_kind, read)
                if entry is None and operator:
                    vouched = vouched_for(
                        plan.spec,
                        param.kinds,
                        param.name,
                        param.enforced,
                        text,
                        state,
                        operator,
                        lookups=plan.lookups,
                    )
                    if vouched is not None:
                        entry = _sort(vouched, findings, asks)
                        if entry is not None:
                            used.append(entry)
                        continue
                if plan.weighs:
                    weighed = weigh_value(
                        plan.spec, param.kinds, param.name, param.enforced, text, entry, state
                    )
                    if weighed is not None:
                        entry = _sort(weighed, findings, asks)
                        if entry is None:
                            continue
                if entry is not None:
                    used.append(entry)
                    continue
            outcome = _classify(plan, param, value, text, state, operator)
            if isinstance(outcome, TypedId):
                typed.append(outcome)
            elif outcome is not None:
                findings.append(outcome)
    refused = [finding for finding in findings if finding.enforced]
    if refused:
        return Verdict(
            tool=plan.spec.name,
            allowed=False,
            findings=tuple(findings),
            message=reprompt(plan.spec.name, refused, read=plan.read, lookups=plan.lookups),
            arguments=arguments,
        )
    if asks:  # nothing refused, but the user must approve some values first
        return Verdict(
            tool=plan.spec.name,
            allowed=False,
            findings=tuple(findings),
            message=ask_message(plan.spec.name, asks),
            arguments=arguments,
            approvals=tuple(asks),
        )
    for entry in used:
        if entry.tier != OPERATOR:  # an operator id is the guard's, in no ledger
            state.touch(entry)
    return Verdict(
        tool=plan.spec.name,
        allowed=True,
        findings=tuple(findings),
        used=tuple(used),
        typed=tuple(typed),
        arguments=arguments,
    )


def _held(
    kinds: Sequence[Kind], text: str, by_kind: Mapping[str, Mapping[str, Entry]], read: bool
) -> Entry | None:
    """The entry that allows ``text`` outright: verified, or any on a read (None: no such)."""
    for kind in kinds:
        key = kind.key(text)
        if key is None:  # this kind's normaliser cannot read it: _classify says so
            continue
        table = by_kind.get(kind.name)
        entry = None if table is None else table.get(key)
        if entry is not None and (entry.verified or read):
            return entry
    return None


def _sort(
    weighed: Entry | Finding | ApprovalRequest | None,
    findings: list[Finding],
    asks: list[ApprovalRequest],
) -> Entry | None:
    """The entry a weighed value uses, else None, with its finding or request put aside."""
    if isinstance(weighed, Finding):
        findings.append(weighed)
    elif isinstance(weighed, ApprovalRequest):
        asks.append(weighed)
    elif isinstance(weighed, Entry):
        return weighed
    return None


def _classify(
    plan: CheckPlan,
    param: _ParamPlan,
    value: Any,
    text: str | None,
    state: LedgerState,
    operator: Catalog = EMPTY,
) -> Finding | TypedId | None:
    """The finding for one value that was not allowed outright, or the id the user typed.

    A user-typed id (of a kind's shape, passed to a ``read`` tool) is no
    finding: the read may look it up, and its result may then verify it.
    None: a value of a kind with no pattern seen in a result's text, which a
    read may take (and never verifies).
    """
    tool = plan.spec.name
    first = param.kinds[0]

    def finding(problem: Problem, kind: Kind, role: str | None = None, detail: str = "") -> Finding:
        return Finding(
            problem=problem,
            tool=tool,
            param=param.name,
            value=text if text is not None else _describe(value),
            kind=kind.name,
            nearest_role=role,
            detail=detail,
            enforced=param.enforced,
        )

    if text is None:
        detail = f"expected an identifier as text, got {type(value).__name__}"
        return finding("malformed", first, detail=detail)

    # Kind.key: a normaliser that raises or gives no text reads no key, never crashes the call.
    keys = [(kind, key) for kind in param.kinds if (key := kind.key(text)) is not None]
    if not keys:
        return finding("malformed", first, detail=_unreadable(param.kinds))
    for kind, key in keys:
        if key in kind.examples:
            return finding("example", kind, detail="placeholder from a tool description")
    for kind, key in keys:
        entry = state.tables.get(kind.name, {}).get(key)
        if entry is not None:  # present, but unverified and the tool writes
            origin = _ORIGINS.get(entry.tier, _ORIGINS["introduced"])
            return finding("unverified", kind, entry.role, _unverified(plan, kind, origin))
    for kind, key in keys:
        # Written by the user as it is, or as the kind's normaliser reads it (a pattern's
        # matches entered the ledger already; a kind with no pattern is matched here).
        typed = (not kind.has_pattern or kind.matches(text)) and state.typed_by_user(text, kind)
        # Or, with no pattern, seen in a result's text: a read may look (it never verifies).
        if typed or (plan.read and text_mention(state, kind, text) is not None):
            if plan.read:
                return TypedId(kind.name, text, key) if typed else None
            origin = _ORIGINS["user" if typed else "mentioned"]
            return finding("unverified", kind, None, _unverified(plan, kind, origin))
    for kind, key in keys:
        dropped = state.drop_mark(kind.name, key)
        if dropped is not None:
            return finding("evicted", kind, None, dropped_detail(dropped.tool, dropped.turn))
        tomb = state.tombstone(kind.name, key)
        if tomb is not None:
            return finding("evicted", kind, tomb.role, f"evicted at turn {tomb.evicted_turn}")
    for other in state.lookup(text, exclude={kind.name for kind in param.kinds}):
        wanted = " or ".join(repr(k.name) for k in param.kinds)
        detail = f"an identifier of kind {other.kind!r}, not of kind {wanted}"
        return finding("wrong_kind", first, other.role, detail)
    return near_or_unknown(finding, keys, text, state, operator)


#: Where an unverified value came from, by tier, as a refusal says it (see TIERS).
_ORIGINS = {
    "user": "typed by the user",
    "mentioned": "seen only in the text of a result",
    "introduced": "taken from no tool result",
}


def _unverified(plan: CheckPlan, kind: Kind, origin: str) -> str:
    """A refused unverified value's detail: where it came from, and can a tool confirm it."""
    if plan.lookups.get(kind.name):
        return f"{origin}, never looked up"
    return f"{origin}; no declared read tool looks up kind {kind.name!r} to confirm it"


def _unreadable(kinds: Sequence[Kind]) -> str:
    """The detail of a value no accepted kind's normaliser could read."""
    if len(kinds) == 1:
        return f"the normaliser of kind {kinds[0].name!r} could not read the value"
    names = " and ".join(repr(kind.name) for kind in kinds)
    return f"the normalisers of kinds {names} could not read the value"


#: Bounds for describing a value that is not text: nested and long values are cut short.
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80


def _describe(value: Any) -> str:
    """A short description of a value that is not an identifier's text.

    Bounded however large or deep the value, and never raising: an object
    whose ``repr`` fails is described by its type.
    """
    try:
        text = _REPR.repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


def undeclared_verdict(name: str) -> Verdict:
    """A refusal for a tool the guard does not know, when undeclared tools are refused."""
    finding = Finding(
        problem="undeclared",
        tool=name,
        param="",
        value="",
        kind="",
        detail="the tool is not declared to the guard",
    )
    message = (
        f"{refusal_head(name)}\n"
        f"- {name} is not a tool this agent may call. Use one of the tools you were given."
    )
    return Verdict(tool=name, allowed=False, findings=(finding,), message=message)


def malformed_arguments(plan: CheckPlan, arguments: object) -> Verdict:
    """A refusal for arguments that are not an object (nor a JSON object as text)."""
    finding = Finding(
        problem="malformed",
        tool=plan.spec.name,
        param="",
        value=_describe(arguments),
        kind="",
        detail=f"arguments must be an object, got {type(arguments).__name__}",
    )
    return Verdict(
        tool=plan.spec.name,
        allowed=False,
        findings=(finding,),
        message=reprompt(plan.spec.name, [finding], read=plan.read, lookups=plan.lookups),
    )
