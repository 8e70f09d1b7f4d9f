"""What a check decides: findings, verdicts, and the rejection a refused call returns.

A leaf module: the check builds these, the guard, the decorator, the audit
and the integrations read them, and none of those imports another only for
its types.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, get_args

from guardrail._reprompt import REFUSED_ERROR
from guardrail._text import shorten

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic_core import CoreSchema, SchemaSerializer

    from guardrail.compaction._messages import Shape
    from guardrail.ledger import Entry


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
]
PROBLEMS: Final[tuple[str, ...]] = get_args(Problem)


@dataclass(frozen=True)
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

    def to_dict(self) -> dict[str, Any]:
        """Flat, JSON-safe fields; the value cut short (:func:`~guardrail._text.shorten`).

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


@dataclass(frozen=True, init=False)
class Verdict:
    """The outcome of checking one call: allowed, or refused with findings and a message.

    ``message`` is what a model is re-prompted with; it is empty for an
    allowed call. ``used`` and ``typed`` feed the bookkeeping after a
    successful call (a ``read`` declared ``verifies="on_success"`` verifies
    the user-typed ids it took).

    ``arguments`` are the arguments to run the tool with. The check
    compares normalised forms, but the tool must receive the value the
    ledger holds (``#W2378156`` where the model wrote ``W2378156``): for an
    allowed call, a new mapping in which every identifier string argument
    is its ledger entry's value, or the mapping checked itself when every
    value already was. The mapping given is never changed. None when the
    arguments could not be read as a mapping.
    """

    tool: str
    allowed: bool
    findings: tuple[Finding, ...] = ()
    message: str = ""
    used: tuple[Entry, ...] = field(default=(), repr=False, compare=False)
    typed: tuple[TypedId, ...] = field(default=(), repr=False, compare=False)
    arguments: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)

    def __init__(
        self,
        tool: str,
        allowed: bool,
        findings: tuple[Finding, ...] = (),
        message: str = "",
        used: tuple[Entry, ...] = (),
        typed: tuple[TypedId, ...] = (),
        arguments: Mapping[str, Any] | None = None,
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
        )

    def __bool__(self) -> bool:
        return self.allowed


class _Serializer:
    """``Rejection.__pydantic_serializer__``: built on first use, so importing guardrail
    does not import pydantic.

    pydantic serialises a value typed ``Any`` (a tool's return in most agent
    frameworks) by asking its class for this attribute; without it, a
    rejection would fail to serialise, or lose its findings.
    """

    def __init__(self) -> None:
        self._built: list[SchemaSerializer] = []

    def __get__(self, instance: object, owner: type | None = None) -> SchemaSerializer:
        if not self._built:
            from pydantic_core import SchemaSerializer

            self._built.append(SchemaSerializer(_rejection_schema()))
        return self._built[0]


def _rejection_schema() -> CoreSchema:
    """A rejection in pydantic: validated as itself, serialised as its :meth:`Rejection.to_dict`."""
    from pydantic_core import core_schema

    return core_schema.is_instance_schema(
        Rejection,
        serialization=core_schema.plain_serializer_function_ser_schema(
            Rejection.to_dict, when_used="always"
        ),
    )


class Rejection:
    """What a tool guarded in ``reprompt`` mode returns instead of running.

    ``str(rejection)`` is the message for the model; a runtime sends it back
    as the tool result, best as :meth:`result_message` builds it (marked as a
    failure in every shape). ``verdict`` has the findings.

    A rejection is a truthy object like any other result: test for one with
    ``isinstance(result, Rejection)`` or ``verdict.allowed``, so that
    ``result or default`` never drops it. It serialises as :meth:`to_dict`
    wherever a tool's result is written out: pydantic (a field typed
    ``Rejection`` or ``Any``, as agent frameworks type tool returns),
    :meth:`to_json`, and ``json.dumps(result, default=Rejection.json_default)``.
    """

    __slots__ = ("verdict",)

    #: How pydantic serialises a rejection it meets in a value typed ``Any``.
    __pydantic_serializer__: Final = _Serializer()

    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict

    @property
    def message(self) -> str:
        """The re-prompt text."""
        return self.verdict.message

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe tool result: the error, the message, the findings and the tool."""
        return {
            "error": REFUSED_ERROR,
            "message": self.verdict.message,
            "findings": [finding.to_dict() for finding in self.verdict.findings],
            "tool": self.verdict.tool,
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text: a tool result a runtime can send as a string."""
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @staticmethod
    def json_default(value: object) -> Any:
        """A ``default=`` for :func:`json.dumps`: a rejection as :meth:`to_dict`.

        Anything else raises :class:`TypeError`, as ``json.dumps`` expects of
        a ``default``: ``json.dumps(result, default=Rejection.json_default)``.
        """
        if isinstance(value, Rejection):
            return value.to_dict()
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        """A field typed ``Rejection`` in a pydantic model serialises as :meth:`to_dict`."""
        return _rejection_schema()

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        """The JSON schema of :meth:`to_dict`, for a tool whose return type names ``Rejection``."""
        text = {"type": "string"}
        return {
            "type": "object",
            "title": "Rejection",
            "description": "guardrail refused the call; the tool did not run",
            "properties": {
                "error": {"const": REFUSED_ERROR},
                "message": text,
                "findings": {"type": "array", "items": {"type": "object"}},
                "tool": text,
            },
            "required": ["error", "message", "findings", "tool"],
        }

    def result_message(self, shape: Shape, call_id: str) -> dict[str, Any]:
        """The tool result answering ``call_id`` in ``shape``, marked as a failure.

        Anthropic's ``is_error``, Responses' ``status: "incomplete"``; chat
        completions has no such field, and its text says it. Read back (by
        compaction or a replay), it is a failure: nothing in it is harvested.
        """
        from guardrail.compaction._messages import result_message  # the message shapes

        return result_message(shape, call_id, self.verdict.message, error=True)

    def __str__(self) -> str:
        return self.verdict.message

    def __repr__(self) -> str:
        problems = ", ".join(f.problem for f in self.verdict.findings)
        return f"<Rejection {self.verdict.tool}: {problems}>"
