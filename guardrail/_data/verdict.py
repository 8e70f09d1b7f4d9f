"""What a check decides: findings, verdicts, and the rejection a refused call returns.

A leaf module: the check builds these, the guard, the decorator, the audit
and the integrations read them, and none of those imports another only for
its types.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, get_args

from guardrail._data.text import shorten

if TYPE_CHECKING:
    from guardrail._data.entry import Entry


class TypedId(NamedTuple):
    """An id the user typed, passed to a ``read`` tool: its kind, value as written, and key."""

    kind: str
    value: str
    key: str


Problem = Literal[
    "mutated",
    "truncated",
    "example",
    "wrong_kind",
    "unverified",
    "evicted",
    "unknown",
    "malformed",
    "undeclared",
    "declined",
    "mentioned",
    "outside",
]
PROBLEMS: Final[tuple[str, ...]] = get_args(Problem)


@dataclass(frozen=True, init=False)
class Finding:
    """Why one identifier argument was not allowed.

    ``nearest_role`` names the ledger entry the value is closest to, where
    there is one; ``enforced`` is false for advisory kinds, whose findings
    are logged but do not refuse the call.
    """

    problem: Problem
    tool: str
    param: str
    value: str
    kind: str
    nearest_role: str | None = None
    detail: str = ""
    enforced: bool = True

    def __init__(
        self,
        problem: Problem,
        tool: str,
        param: str,
        value: str,
        kind: str,
        nearest_role: str | None = None,
        detail: str = "",
        enforced: bool = True,
    ) -> None:
        # One update of the instance dict, as Verdict does: a refusal builds one per value.
        self.__dict__.update(
            problem=problem,
            tool=tool,
            param=param,
            value=value,
            kind=kind,
            nearest_role=nearest_role,
            detail=detail,
            enforced=enforced,
        )

    def to_dict(self) -> dict[str, Any]:
        """Flat, JSON-safe fields; the value cut short (:func:`~guardrail._data.text.shorten`).

        A rejection sends this to the model: a megabyte argument must not come
        back whole.
        """
        return {
            "problem": self.problem,
            "tool": self.tool,
            "param": self.param,
            "value": shorten(self.value),
            "kind": self.kind,
            "nearest_role": self.nearest_role,
            "detail": self.detail,
            "enforced": self.enforced,
        }


@dataclass(frozen=True)
class ApprovalRequest:
    """A value the user must approve before the call runs: what, where it came from, a token.

    ``tier`` is the value's provenance (``user``, ``mentioned``, or
    ``produced``/``minted`` with ``outside``); ``evidence`` says where it
    came from in words a user can judge ("seen in the text of
    read_file(file_path='bill.txt') at turn 3: ..."). ``token`` is signed by
    the guard and bound to ``session``, ``tool``, ``kind`` and the value: pass
    the request (or the token alone) to ``guard.approve`` or ``guard.deny``.
    Nothing a model writes can make one.
    """

    tool: str
    param: str
    value: str
    kind: str
    tier: str
    outside: bool
    evidence: str
    session: str | None = None
    token: str = field(default="", repr=False)

    def to_dict(self) -> dict[str, Any]:
        """Flat, JSON-safe fields (the value cut short), for a runtime to show or send."""
        return {
            "tool": self.tool,
            "param": self.param,
            "value": shorten(self.value),
            "kind": self.kind,
            "tier": self.tier,
            "outside": self.outside,
            "evidence": self.evidence,
            "session": self.session,
            "token": self.token,
        }


#: What a check decides: the call may run, is refused, or waits for the user's approval.
Outcome = Literal["allowed", "refused", "ask"]


@dataclass(frozen=True, init=False)
class Verdict:
    """The outcome of checking one call: allowed, or refused with findings and a message.

    ``message`` is what a model is re-prompted with; it is empty for an
    allowed call. ``used`` and ``typed`` feed the bookkeeping after a
    successful call (a ``read`` declared ``verifies="on_success"`` verifies
    the user-typed ids it took).

    ``arguments`` are the arguments to run the tool with: the mapping
    checked, exactly as given (parsed, where it was JSON text). The check
    compares normalised forms, but it only allows or refuses: the tool
    receives each identifier as the model wrote it, so an allowed call runs
    as it would without the guard. None when the arguments could not be
    read as a mapping.

    ``approvals`` holds the requests of a call that waits for the user
    (``outcome == "ask"``): every id is allowed or may be approved, none is
    refused. A refused verdict lists no approvals.
    """

    tool: str
    allowed: bool
    findings: tuple[Finding, ...] = ()
    message: str = ""
    used: tuple[Entry, ...] = field(default=(), repr=False, compare=False)
    typed: tuple[TypedId, ...] = field(default=(), repr=False, compare=False)
    arguments: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)
    approvals: tuple[ApprovalRequest, ...] = ()

    def __init__(
        self,
        tool: str,
        allowed: bool,
        findings: tuple[Finding, ...] = (),
        message: str = "",
        used: tuple[Entry, ...] = (),
        typed: tuple[TypedId, ...] = (),
        arguments: Mapping[str, Any] | None = None,
        approvals: tuple[ApprovalRequest, ...] = (),
    ) -> None:
        # One update of the instance dict: the generated frozen __init__ sets each field
        # through object.__setattr__, which cost more than the rest of an allowed check.
        self.__dict__.update(
            tool=tool,
            allowed=allowed,
            findings=findings,
            message=message,
            used=used,
            typed=typed,
            arguments=arguments,
            approvals=approvals,
        )

    @property
    def outcome(self) -> Outcome:
        """``"allowed"``, ``"refused"``, or ``"ask"`` (the call waits for the user's approval)."""
        if self.allowed:
            return "allowed"
        return "ask" if self.approvals else "refused"

    def __bool__(self) -> bool:
        return self.allowed
