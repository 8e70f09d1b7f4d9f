"""The re-prompt: what was wrong with a refused call, and what the model should do next.

:class:`Rejection` is what a refused call returns in place of a result. The
text names roles, never ledger values: a near miss is a guess, so it
says which entry the value is close to and tells the model to copy that
entry exactly, look it up again, or ask the user.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from guardrail._data.text import shorten
from guardrail._data.verdict import Finding, Verdict
from guardrail._transcript.messages import Shape, result_message
from guardrail._transcript.result_text import REFUSAL_PREFIX, REFUSED_ERROR, Refusal

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic_core import CoreSchema, SchemaSerializer

    from guardrail.ledger._state import LedgerState


def refusal_head(tool: str) -> str:
    """The first line of the text of a refused call to ``tool``."""
    return f"{REFUSAL_PREFIX}{tool}; the tool did not run."


#: How the detail of an id a result named but the ledger did not keep begins.
_NOT_KEPT = "not kept: "
_USER = "user"


def dropped_detail(tool: str, turn: int) -> str:
    """The detail of a finding for an id ``tool``'s result named beyond what one call may add."""
    if tool == _USER:
        return (
            f"{_NOT_KEPT}the user's message at turn {turn} named more new ids than one "
            "message may add"
        )
    return f"{_NOT_KEPT}{tool}'s result at turn {turn} named more new ids than one call may add"


def _dropped_by(detail: str) -> str | None:
    """The tool named by a :func:`dropped_detail`, or None for any other detail."""
    if not detail.startswith(_NOT_KEPT):
        return None
    if detail.startswith(f"{_NOT_KEPT}the user's message"):
        return _USER
    tool, found, _ = detail[len(_NOT_KEPT) :].rpartition("'s result at turn ")
    return tool if found else None


#: How the detail of a value of a kind with operator ids, but not one of them, begins.
OPERATOR_DETAIL: Final = "not one of the "


def _lookup_tools(tool: str, lookups: Mapping[str, tuple[str, ...]], kind: str) -> str | None:
    """The read tools (up to three) that look up ids of ``kind``, or None when none does.

    None changes the advice: a re-prompt never tells the model to use a lookup
    that no declared tool offers.
    """
    tools = [name for name in lookups.get(kind, ()) if name != tool]
    return ", ".join(tools[:3]) if tools else None


def _explain(
    tool: str, read: bool, lookups: Mapping[str, tuple[str, ...]], finding: Finding
) -> str:
    head = f"- {finding.param}={shorten(finding.value, quote=True)}"
    role = f"[{finding.nearest_role}]" if finding.nearest_role else None
    tools = _lookup_tools(tool, lookups, finding.kind)
    fallback = _fallback_to(tool, lookups, finding.kind, tools)
    problem = finding.problem
    if problem == "mutated":
        return (
            f"{head} is not an identifier any tool returned; it is close to, but not the same "
            f"as, the ledger entry {role} ({finding.detail}). Identifiers must be copied "
            f"character for character. If {role} is the {finding.kind} you mean, copy its "
            f"value exactly from the ID LEDGER or from the tool result that returned it; "
            f"otherwise {fallback}."
        )
    if problem == "truncated":
        where = f" It may be the start of {role}." if role else ""
        return (
            f"{head} looks cut short ({finding.detail}).{where} Use the complete value, copied "
            f"exactly from the ID LEDGER or the tool result; otherwise {fallback}."
        )
    if problem == "example":
        return (
            f"{head} is a placeholder from a tool description, not a real {finding.kind}. "
            f"Find the real one: {fallback}."
        )
    if problem == "wrong_kind":
        return (
            f"{head} is {finding.detail} (ledger entry {role}). Pass an identifier of kind "
            f"{finding.kind!r} here; if you do not have one, {fallback}."
        )
    if problem == "unverified":
        origin = re.split("[,;] ", finding.detail, maxsplit=1)[0]  # "typed by the user", ...
        if tools is None:
            return (
                f"{head} was {origin} and no tool has confirmed it. None of your "
                f"tools can confirm an identifier of kind {finding.kind!r}, so do not retry "
                f"with it: tell the user this {'call' if read else 'change'} needs a "
                f"{finding.kind!r} that a tool returned."
            )
        return (
            f"{head} was {origin} and no tool has confirmed it yet. Before this "
            f"{'call' if read else 'change'}, confirm it with a lookup ({tools}), then retry."
        )
    if problem in _POLICY:
        return f"{head} {_POLICY[problem].format(kind=finding.kind, tool=tool)}"
    dropped_by = _dropped_by(finding.detail) if problem == "evicted" else None
    if dropped_by == _USER:
        then = f", then look it up with {tools}" if tools else ""
        return (
            f"{head} is not in the ledger ({finding.detail}). Ask the user which "
            f"{finding.kind} they mean{then}."
        )
    if dropped_by is not None:
        return (
            f"{head} is not in the ledger ({finding.detail}). Narrow the search: call "
            f"{dropped_by} again with a narrower query, and use the {finding.kind} from that "
            "narrower result."
        )
    if problem == "evicted":
        again = f"look it up again with {tools}" if tools else "ask the user for it again"
        return (
            f"{head} was in the ledger as {role} but was dropped to make room. "
            f"Before using it, {again}."
        )
    if problem == "malformed":
        return (
            f"{head}: {finding.detail}. Pass the identifier itself, as a string, exactly as "
            "a tool returned it."
        )
    return (
        f"{head} appears in no tool result of this conversation. Do not invent or reconstruct "
        f"identifiers: {fallback}."
    )


def _fallback(tool: str, lookups: Mapping[str, tuple[str, ...]], kind: str) -> str:
    """What to do when the ledger has nothing better: look it up where a tool can, else ask.

    Saying that no tool can keeps the model from trying the tools it has one by one.
    """
    return _fallback_to(tool, lookups, kind, _lookup_tools(tool, lookups, kind))


def _fallback_to(
    tool: str, lookups: Mapping[str, tuple[str, ...]], kind: str, tools: str | None
) -> str:
    """:func:`_fallback`, given what :func:`_lookup_tools` gives."""
    if tools:
        return f"look it up with {tools}, or ask the user"
    if tool in lookups.get(kind, ()):  # this very call is the lookup
        return "ask the user for it"
    return f"no tool can look up a {kind!r}, so ask the user for it"


def _no_guess(tool: str, lookups: Mapping[str, tuple[str, ...]], finding: Finding) -> str | None:
    """The advice for a value close to several entries, or of a kind the operator lists, or None."""
    operator = finding.problem == "unknown" and finding.detail.startswith(OPERATOR_DETAIL)
    if finding.nearest_role is not None or not (finding.problem == "mutated" or operator):
        return None  # before quoting the value: most refusals are explained by _explain
    head = f"- {finding.param}={shorten(finding.value, quote=True)}"
    fallback = _fallback(tool, lookups, finding.kind)
    if finding.problem == "mutated":  # one edit from several entries: no guess
        return (
            f"{head} is not an identifier any tool returned, and it matches none of the "
            f"ledger's {finding.kind!r} entries: it is {finding.detail}, so which one was "
            f"meant cannot be told. Do not pick one: copy the {finding.kind} you mean exactly "
            f"from the ID LEDGER or the tool result that returned it; otherwise {fallback}."
        )
    if operator:
        return (
            f"{head} is {finding.detail}. Use one of those exactly as written, or ask the user "
            f"which {finding.kind} they mean; do not invent one."
        )
    return None


#: What a value refused by its kind's approval policy tells the model (never that it may approve).
_POLICY = {
    "declined": (
        "was declined by the user for {tool}. Do not call {tool} with it again; tell the user "
        "the call did not run and ask what they want instead."
    ),
    "mentioned": (
        "was only seen in the text of a tool result, and a {kind!r} taken from text is not "
        "used for {tool}. Ask the user for the {kind} to use."
    ),
    "outside": (
        "was chosen by an outside party (a field such as a sender), and such a {kind!r} is "
        "not used for {tool}. Ask the user for the {kind} to use."
    ),
}


def reprompt(
    tool: str,
    findings: Sequence[Finding],
    *,
    read: bool = False,
    lookups: Mapping[str, tuple[str, ...]] | None = None,
) -> str:
    """The message for the model: what was wrong and what to do next, never a guess as fact.

    ``lookups`` maps a kind to the read tools that return it, which the
    message suggests calling again.
    """
    lines = [refusal_head(tool)]
    known = lookups or {}
    lines.extend(
        _no_guess(tool, known, finding) or _explain(tool, read, known, finding)
        for finding in findings
    )
    return "\n".join(lines)


# -- the rejection ---------------------------------------------------------------------------


class _Serializer:
    """``Rejection.__pydantic_serializer__``, built on first use.

    Built then, so importing guardrail does not import pydantic.

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


class Rejection(Refusal):
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
        return result_message(shape, call_id, self.verdict.message, error=True)

    def __str__(self) -> str:
        return self.verdict.message

    def __repr__(self) -> str:
        problems = ", ".join(f.problem for f in self.verdict.findings)
        return f"<Rejection {self.verdict.tool}: {problems}>"


#: The findings whose re-prompt tells the model to copy a ledger entry's value.
_NAMES_AN_ENTRY = frozenset({"mutated", "truncated", "wrong_kind"})


def touch_named(verdict: Verdict, state: LedgerState) -> None:
    """Mark used the entries a refusal points the model at ("copy it from the ID LEDGER").

    The ledger block given to the model at every turn shows the entries used
    last: the one a re-prompt names is shown at the next model call. A new
    epoch first, so it is the latest use even among entries used this epoch.
    """
    named = [
        entry
        for finding in verdict.findings
        if finding.problem in _NAMES_AN_ENTRY and finding.nearest_role
        if (entry := state.roles.get(finding.nearest_role)) is not None
    ]
    if named:
        with state.lock:
            state.epoch += 1
            for entry in named:
                state.touch(entry)
