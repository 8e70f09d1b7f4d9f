"""Summarizers for compaction: the protocol, the built-in extractive one, a chat-model adapter.

A summarizer is any callable ``(messages, roles) -> str``. ``messages`` is
the part of the conversation to summarize, in its own shape, with every
identifier already replaced by its ``[role]``; ``roles`` maps each role to
its kind (never to a value). An earlier summary, when there is one, comes
first as a message whose text starts with :data:`SUMMARY_HEADER`. A
summarizer that takes a ``notes`` keyword (``notes: dict[str, str] | None =
None``, or ``**kwargs``) is also given ``{role: note}``, the notes the
ledger block shows (ids in them by role), so it can say which entry is
which (:func:`takes_notes`).
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from guardrail._provenance.failure import failed
from guardrail._transcript.messages import Call, Message, read, refused
from guardrail.errors import GuardrailUsageError

#: The first line of a summary in a compacted context, right after the ledger block.
SUMMARY_HEADER = (
    "SUMMARY OF EARLIER TURNS (identifiers appear as [role]; copy their values from the ID LEDGER)"
)
DEFAULT_SUMMARY_CHARS = 3000
_LINE_CHARS = 240
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_OPEN_BRACKET = re.compile(r"\[[^\]]*$")
_SINCE = "Since then:"  # heads the new lines after an earlier summary's

INSTRUCTIONS = """\
You compact the earlier part of a conversation between a user and an agent that calls tools.
Write a short summary, in plain sentences or bullet points, that keeps:
- what the user asked for, in their words where it matters;
- the decisions taken and the actions done, with their outcomes;
- what is still open (unanswered questions, pending confirmations, next steps).
Identifiers appear as [role], for example [reservation_2]. Refer to every identifier only by its
[role], written exactly as it appears; where two of a kind could be confused, say which is which
with the note listed beside the role, as "[role] (note)". Never write an identifier's value,
never guess, shorten or alter one, and never invent a role. If an earlier summary comes first,
carry its content forward.
The roles that exist (role: kind, and its note where it has one):
"""


class Summarizer(Protocol):
    """``(messages, roles) -> str``: summarize masked messages, referring to ids by role.

    ``messages`` are fresh dicts (masked copies) and ``roles`` a dict: typed
    as narrowly as that, so a summarizer declaring ``Sequence[Mapping[...]]``,
    ``list[dict[...]]`` or ``Sequence[Any]`` all fit.
    """

    def __call__(self, messages: list[dict[str, Any]], roles: dict[str, str], /) -> str: ...


def takes_notes(summarize: Callable[..., Any]) -> bool:
    """Whether ``summarize`` takes a ``notes`` keyword (``{role: note}``), or any keyword."""
    try:
        parameters = inspect.signature(summarize).parameters.values()
    except (TypeError, ValueError):  # a callable with no signature Python can read
        return False
    return any(
        p.kind is p.VAR_KEYWORD
        or (p.name == "notes" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
        for p in parameters
    )


def note_text(note: str) -> str:
    """A note as a summary writes it after ``[role] ``: in parentheses, JSON-quoted if it holds any.

    ``[order] (Kettle K2; 2025-03-02)``, ``[order_2] ("Vortex (2L)")``:
    either reads back (:func:`~guardrail.compaction.ledger_facts`).
    """
    plain = not ({"(", ")", '"'} & set(note))
    return f"({note})" if plain else f"({json.dumps(note, ensure_ascii=False)})"


# -- the extractive summarizer --------------------------------------------------------------


def extractive_summary(
    messages: Sequence[Any],
    roles: Mapping[str, str],
    *,
    max_chars: int = DEFAULT_SUMMARY_CHARS,
    notes: Mapping[str, str] | None = None,
    failed: Callable[[str, Any], bool] | None = None,
) -> str:
    """A summary made of pieces of the conversation itself: no model, deterministic, bounded.

    It keeps the earlier summary's lines, each user request, what the agent
    said and every tool call it made with its outcome (what a call returned:
    the ``[role]`` of each id in its result, with the entry's note from
    ``notes``, ``{role: note}``, where it has one), then the open items:
    a last request not yet answered and the agent's last questions. Longer
    than ``max_chars``, it keeps the earlier summary, the first request and
    the latest lines, and says how many lines it left out. ``failed(tool,
    result)`` says whether a result is a failure (``compact`` gives the
    guard's :meth:`~guardrail.Guard.failed`; default: the default rule, a text
    starting ``Error:``, an error shape or a flag).
    """
    del roles  # the text already names identifiers by role
    if not isinstance(max_chars, int) or max_chars < 200:
        raise GuardrailUsageError(f"max_chars must be an integer >= 200, not {max_chars!r}")
    width = min(_LINE_CHARS, max_chars // 8)
    transcript = read(messages)
    earlier: list[str] = []
    lines: list[str] = []
    last_user: str | None = None
    last_agent = ""
    for message in transcript.messages:
        body = _earlier_body(message.text)
        if body is not None:
            earlier.extend(line for line in body.splitlines() if line.strip())
            continue
        if message.role == "system":
            continue  # system prompts are instructions, not narrative
        if message.starts_turn:
            if message.user_words and message.text.strip():  # a tool's content is no request
                last_user = _clip(message.text, width)
                lines.append(f"- User: {last_user}")
            continue
        if message.role == "assistant" and message.text.strip():
            last_agent = message.text
            last_user = None
            lines.append(f"- Agent: {_clip(_lead(message.text), width)}")
        for call in message.calls:
            called = _clip(_call_text(call.name, call.arguments), width)
            outcome = _outcome(call, width, notes or {}, failed or _default_failed)
            lines.append(f"- Agent called {called}{outcome}")
            last_user = None
    open_items = []
    if last_user is not None:
        open_items.append(f"- Unanswered request: {last_user}")
    questions = [s for s in _SENTENCE_END.split(last_agent.strip()) if s.endswith("?")]
    open_items.extend(f"- Agent asked: {_clip(q, width)}" for q in questions[-3:])
    return _assemble(earlier, lines, open_items, max_chars)


def _earlier_body(text: str) -> str | None:
    if text.startswith(SUMMARY_HEADER):
        return text[len(SUMMARY_HEADER) :].strip("\n")
    return None


def _assemble(earlier: list[str], lines: list[str], open_items: list[str], budget: int) -> str:
    """The three sections within ``budget`` characters: open items whole, then the rest."""
    open_part = ["Open items:", *open_items] if open_items else []
    room = budget - _size(open_part)
    if earlier and lines:
        kept_earlier = _fit(earlier, room // 2)
        room -= _size(kept_earlier) + _size([_SINCE])
        kept_lines = [_SINCE, *_fit(lines, room)]
    else:
        kept_earlier, kept_lines = _fit(earlier, room), _fit(lines, room)
    return "\n".join([*kept_earlier, *kept_lines, *open_part])


def _size(lines: list[str]) -> int:
    return sum(len(line) + 1 for line in lines)


def _fit(lines: list[str], budget: int) -> list[str]:
    """The first line and as many of the last as fit in ``budget``, with a note of the gap."""
    if _size(lines) <= budget:
        return lines
    note = 30  # "- (N lines left out)"
    head = lines[:1] if len(lines[0]) + 1 + note <= budget else []
    room = budget - note - _size(head)
    tail: list[str] = []
    for line in reversed(lines[len(head) :]):
        if len(line) + 1 > room:
            break
        tail.append(line)
        room -= len(line) + 1
    skipped = len(lines) - len(head) - len(tail)
    return [*head, f"- ({skipped} lines left out)", *reversed(tail)]


def _clip(text: str, limit: int = _LINE_CHARS) -> str:
    """One line of at most ``limit`` characters, cut between words and never inside a [role]."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 2]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    cut = _OPEN_BRACKET.sub("", cut).rstrip()
    return f"{cut} …"


def _lead(text: str) -> str:
    """The first two sentences of what the agent said."""
    sentences = _SENTENCE_END.split(" ".join(text.split()))
    return " ".join(sentences[:2])


def _call_text(name: str, arguments: Any) -> str:
    if isinstance(arguments, Mapping):
        shown = ", ".join(f"{key}={_value_text(value)}" for key, value in arguments.items())
    else:
        shown = _value_text(arguments) if arguments not in (None, "") else ""
    return f"{name}({shown})"


def _value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


#: How a summary says a call was refused: it never ran, so it must never read as done.
REFUSED_OUTCOME = "refused by guardrail; the tool did not run"


_RETURNED = re.compile(r"\[([A-Za-z0-9_.-]+)\]")


def _outcome(
    call: Call, width: int, notes: Mapping[str, str], failed: Callable[[str, Any], bool]
) -> str:
    result = call.result
    if result is None:
        return " (no result yet)"
    if refused(result.text, result.data):
        return f" -> {REFUSED_OUTCOME}"
    if result.error or failed(call.name, result.value):
        return f" -> failed: {_clip(result.text, width // 2)}"
    taken = set(_RETURNED.findall(_call_text(call.name, call.arguments)))
    return f" -> {_returned(result.text, taken, width, notes)}"


def _returned(text: str, taken: set[str], width: int, notes: Mapping[str, str]) -> str:
    """What a successful call returned: each id's ``[role]`` with its note, within ``width``.

    The result is masked, so its ids read ``[role]``. An id the call took
    that comes back with no note says nothing new; a result naming nothing
    else is "done".
    """
    found = dict.fromkeys(_RETURNED.findall(text))
    roles = [role for role in found if role not in taken or notes.get(role)]
    if not roles:
        return "done"
    shown: list[str] = []
    room = width
    for index, role in enumerate(roles):
        note = notes.get(role)
        part = f"[{role}] {note_text(note)}" if note else f"[{role}]"
        more = len(roles) - index - 1
        tail = len(f", and {more} more") if more else 0
        if shown and len(part) + 2 + tail > room:
            return f"{', '.join(shown)}, and {len(roles) - index} more"
        shown.append(part)
        room -= len(part) + 2
    return ", ".join(shown)


def _default_failed(tool: str, result: Any) -> bool:
    """A result the default failure rule reads as a failure (no guard says the tool's own)."""
    del tool
    return failed(None, result)


# -- a chat model as summarizer -------------------------------------------------------------


def render(messages: Sequence[Any]) -> str:
    """A plain-text transcript of (masked) messages of any shape, one line per event."""
    transcript = read(messages)
    lines = []
    for message in transcript.messages:
        lines.extend(_render_one(message))
    return "\n".join(lines)


def _render_one(message: Message) -> list[str]:
    out = []
    if message.text.strip() and message.role != "tool":  # a tool message's text is its result
        out.append(f"{message.role}: {message.text.strip()}")
    for call in message.calls:
        out.append(f"assistant called {call.name}({_value_text(call.arguments)})")
    for result in message.results:
        if refused(result.text, result.data):
            flag = f" ({REFUSED_OUTCOME})"
        else:
            flag = " (failed)" if result.error or failed(None, result.value) else ""
        name = result.name or (result.call.name if result.call is not None else "a tool")
        out.append(f"tool result{flag} for {name}: {result.text.strip()}")
    return out


def model_summarizer(
    chat: Callable[[list[dict[str, str]]], object],
    *,
    instructions: str = INSTRUCTIONS,
) -> Summarizer:
    """Wrap a chat-model callable as a summarizer, with instructions to refer by role only.

    ``chat`` takes a list of ``{"role", "content"}`` messages (a system
    message with the instructions and the roles, each with its kind and the
    note the ledger block shows for it, a user message with the
    masked transcript) and returns the reply: a string, or an object with a
    ``content`` string (a message) or a ``"content"`` key.
    """

    def summarize(
        messages: list[dict[str, Any]],
        roles: dict[str, str],
        /,
        *,
        notes: Mapping[str, str] | None = None,
    ) -> str:
        noted = notes or {}
        listed = (
            "\n".join(
                f"[{role}]: {kind} {note_text(noted[role])}"
                if noted.get(role)
                else f"[{role}]: {kind}"
                for role, kind in roles.items()
            )
            or "(none)"
        )
        prompt = [
            {"role": "system", "content": instructions + (listed or "(none)")},
            {"role": "user", "content": render(messages)},
        ]
        return _reply_text(chat(prompt))

    return summarize


def _reply_text(reply: object) -> str:
    if isinstance(reply, str):
        return reply
    content = (
        reply.get("content") if isinstance(reply, Mapping) else getattr(reply, "content", None)
    )
    if isinstance(content, str):
        return content
    raise TypeError(
        f"the chat callable returned {type(reply).__name__}; return the reply text "
        "(or a message with a string `content`)"
    )
