"""The re-prompt text: what was wrong with a refused call, and what the model should do next.

It names roles, never ledger values: a near miss is a guess, so the text
says which entry the value is close to and tells the model to copy that
entry exactly, look it up again, or ask the user.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from guardrail._text import shorten

if TYPE_CHECKING:
    from guardrail._verdict import Finding

#: The ``error`` field of a refusal written as JSON (``Rejection.to_dict()``).
REFUSED_ERROR = "identifier_refused"

#: How every refusal's text begins, so a refusal sent back as a tool result is known as one.
REFUSAL_PREFIX = "guardrail refused the call to "


def refusal_head(tool: str) -> str:
    """The first line of the text of a refused call to ``tool``."""
    return f"{REFUSAL_PREFIX}{tool}; the tool did not run."


def is_refusal(text: str) -> bool:
    """Whether ``text`` is a refusal's text (a tool result that no tool produced)."""
    return text.lstrip().startswith(REFUSAL_PREFIX)


#: How the text of every tool result guardrail writes for a call that failed or never ran
#: begins (a tool that raised, arguments that did not validate, no such tool, no result).
#: OpenAI chat completions has no error field, so this text is how guardrail's own readers
#: know such a result for a failure in that shape; they check it in every shape.
FAILURE_PREFIX = "guardrail: "


def failure_text(detail: str) -> str:
    """The text of a tool result guardrail writes for a call that failed or did not run."""
    return f"{FAILURE_PREFIX}{detail}"


def is_failure(text: str) -> bool:
    """Whether ``text`` is one guardrail wrote for a call that failed or never ran."""
    return text.lstrip().startswith(FAILURE_PREFIX)


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
    # What to do when the ledger has nothing better: look it up where a tool can, else ask.
    fallback = f"look it up with {tools}, or ask the user" if tools else "ask the user"
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
        if tools is None:
            return (
                f"{head} was typed by the user and no tool has confirmed it. None of your "
                f"tools can confirm an identifier of kind {finding.kind!r}, so do not retry "
                f"with it: tell the user this {'call' if read else 'change'} needs a "
                f"{finding.kind!r} that a tool returned."
            )
        return (
            f"{head} was typed by the user and no tool has confirmed it yet. Before this "
            f"{'call' if read else 'change'}, confirm it with a lookup ({tools}), then retry."
        )
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
    lines.extend(_explain(tool, read, lookups or {}, finding) for finding in findings)
    return "\n".join(lines)
