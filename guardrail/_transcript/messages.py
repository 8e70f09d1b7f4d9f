"""Message shapes: OpenAI chat completions, OpenAI Responses items, Anthropic messages.

A core module: the check, compaction, the replay harness and the adapters
all read and write these shapes, and none of them owns them. It also reads
tool arguments given as text (:func:`parse_arguments`). Walking a message's
content is :mod:`guardrail._transcript.content`'s; what a result's text says of itself
(a refusal, a failure guardrail wrote, a server's seal) is
:mod:`guardrail._transcript.result_text`'s.

:func:`read` turns a message list of any of the three shapes into one
neutral :class:`Transcript` (messages with their text, the tool calls they
make and the tool results they carry, calls paired with results by id);
:func:`write` gives the list back in its own shape. Every message keeps its
original object (``raw``), so a list read and written unchanged is the same
list, extra fields (``result``, ``error``, provider metadata) included.

Pairing: a result answers the latest open call with its id. Call ids may be
reused within a conversation once the earlier call has its result.

Malformed transcripts, case by case:

==========================  ========================================================
a result with no call       ``TranscriptError`` (no call means no tool name or
                            arguments to read it with, and every API refuses it)
a call with no result       at the end of the list: left as it is (the result is
                            on its way); elsewhere: repaired with an error result
                            inserted after the call, listed in ``repairs``
an unknown role / item      ``TranscriptError`` (unknown Responses item *types* are
                            kept as opaque items: the API has many)
non-string content          a list of parts, or ``None`` beside tool calls, is
                            normal; other content of a tool result is read as
                            JSON and listed in ``repairs``; of any other message,
                            ``TranscriptError``
a call id already open      ``TranscriptError`` (results could not be told apart)
a refusal sent back         read as a failed result in every shape (its text, or
                            ``Rejection.to_dict()`` as JSON): no tool produced it
a failure guardrail wrote   read as a failed result in every shape (its text
                            begins ``guardrail:``): chat completions has no flag
a failure a runtime wrote   read as a failed result in every shape: the OpenAI
                            Agents SDK's sentences, which its items carry with
                            no status (see :mod:`guardrail._transcript.failures`)
user text sent with results tool content (no assistant message between): not observed
a result that does not      a failure: a flag a runtime sets (``error``,
show it succeeded           ``is_error``, ``isError``, ``status: "error"``), a
                            Responses ``status`` other than ``completed`` (a
                            plain chat message, with no such field, is a success)
content that contains       ``TranscriptError`` naming the message (found only
itself, or nests absurdly   after walking it ran out of stack)
==========================  ========================================================

An identifier is never dropped: errors name the message index, repairs
add and never remove.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from guardrail._declare.arguments import parse_arguments
from guardrail._transcript.content import nesting_fault
from guardrail._transcript.failures import flagged, runtime_failure
from guardrail._transcript.result_text import REFUSED_ERROR, is_failure, is_refusal, split_seal
from guardrail.errors import TranscriptError

Shape = Literal["openai_chat", "openai_responses", "anthropic"]
SHAPES: tuple[str, ...] = ("openai_chat", "openai_responses", "anthropic")

_CHAT_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_MISSING_RESULT = "guardrail: no result was recorded for this call"
#: The first line of the message a compaction writes (the ledger block's header).
COMPACTED_HEADER = "ID LEDGER (verbatim, do not paraphrase)\n"
#: The last line of a sealed ledger block (see ``_block``), for recognising its form.
_SEAL_LINE = re.compile(r"^\(seal [0-9a-f]{32}\)$", re.MULTILINE)


@dataclass(eq=False)
class Call:
    """One tool call: its id, the tool, the arguments (parsed when given as JSON text)."""

    id: str
    name: str
    arguments: Any
    index: int
    result: Result | None = None


@dataclass(eq=False)
class Result:
    """One tool result: which call it answers, its text, its JSON value, whether it failed.

    ``seal`` is the seal a server wrote on its last line (see :mod:`guardrail._provenance.seal`),
    which ``text`` and ``data`` leave out, or None.
    """

    call_id: str
    text: str
    data: Any
    error: bool
    index: int
    name: str | None = None
    call: Call | None = None
    seal: str | None = None

    @property
    def value(self) -> Any:
        """What a record of this result harvests: its JSON value, else its text."""
        return self.data if self.data is not None else self.text

    @property
    def text_value(self) -> Any:
        """What the text alone holds: its JSON value, else the text.

        A value given beside the text (the corpus's ``result``, a LangChain
        artifact) is left out: a seal covers the text, nothing beside it.
        """
        data = _result_value(self.text)
        return data if data is not None else self.text


@dataclass(eq=False)
class Message:
    """One message (or Responses item) in neutral form; ``raw`` is the original object."""

    role: str
    text: str
    raw: Any
    calls: list[Call] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    with_results: bool = False  # a user message sent with tool results: tool content

    @property
    def starts_turn(self) -> bool:
        """A user message that is not only carrying tool results starts a turn."""
        return self.role == "user" and not self.results

    @property
    def user_words(self) -> bool:
        """Whether this is the user's own text: a turn's start not sent with tool results."""
        return self.starts_turn and not self.with_results


@dataclass(frozen=True)
class Repair:
    """A conservative repair made while reading: what, where (message index), and why."""

    problem: str
    index: int
    detail: str


@dataclass(eq=False)
class Transcript:
    """A message list in neutral form, with the repairs made reading it."""

    shape: Shape
    messages: list[Message]
    repairs: list[Repair] = field(default_factory=list)

    def turns(self, start: int = 0) -> list[range]:
        """Index ranges of the turns from ``start``: a user message and everything up to the next.

        Messages before the first user message form a turn of their own.
        """
        bounds = [i for i in range(start, len(self.messages)) if self.messages[i].starts_turn]
        if not bounds or bounds[0] != start:
            bounds.insert(0, start)
        bounds.append(len(self.messages))
        return [range(a, b) for a, b in itertools.pairwise(bounds) if b > a]

    def calls(self) -> list[Call]:
        """Every call, in order."""
        return [call for message in self.messages for call in message.calls]


# -- detecting ------------------------------------------------------------------------------


def detect(messages: Sequence[Any]) -> Shape:
    """The shape of a message list. Lists with no tool traffic read as OpenAI chat.

    (A compacted Anthropic list with no tool traffic left is recognised by
    its compacted message; otherwise pass ``shape=`` where it matters.)
    """
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise TranscriptError(
                f"a message is a dict (mapping), not {type(message).__name__}", index=index
            )
        kind = message.get("type")
        if ("role" not in message and kind is not None) or kind == "message":
            return "openai_responses"
        if message.get("role") in ("tool", "function") or "tool_calls" in message:
            return "openai_chat"
        if "tool_call_id" in message:
            return "openai_chat"
        content = message.get("content")
        if isinstance(content, list):
            types = {
                part.get("type")
                for part in content
                if isinstance(part, Mapping) and isinstance(part.get("type"), str)
            }
            if types & {"tool_use", "tool_result", "thinking", "redacted_thinking"}:
                return "anthropic"
            if types & {"input_text", "output_text"}:
                return "openai_responses"
    # With no tool traffic left, a compacted Anthropic list still says what it is: its
    # compacted message is a user message (the other shapes use a system message). Only
    # a message in the sealed form counts, so text that merely starts with the header
    # does not change how a list is read (the seal itself is checked by compaction).
    for message in messages:
        if message.get("role") == "system":
            continue
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str) and _compacted(content):
            return "anthropic"
        break
    return "openai_chat"


def _compacted(text: str) -> bool:
    """Whether ``text`` has the form of a compacted message: the header, a sealed block."""
    if not text.startswith(COMPACTED_HEADER):
        return False
    block = text.partition("\n\n")[0]
    return _SEAL_LINE.search(block, len(COMPACTED_HEADER)) is not None


# -- reading --------------------------------------------------------------------------------


def read(messages: Sequence[Any], shape: Shape | None = None) -> Transcript:
    """Read a message list into neutral form (see the module docstring for malformed input)."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise TranscriptError("pass the conversation as a list of messages")
    shape = shape or detect(messages)
    if shape not in SHAPES:
        raise TranscriptError(f"unknown shape {shape!r}; use one of {', '.join(SHAPES)}")
    reader = {"openai_chat": _chat, "openai_responses": _responses, "anthropic": _anthropic}[shape]
    repairs: list[Repair] = []
    read_messages = []
    try:
        for index, raw in enumerate(messages):
            if type(raw) is not dict and not isinstance(raw, Mapping):
                raise TranscriptError(
                    f"a message is a dict (mapping), not {type(raw).__name__}", index=index
                )
            read_messages.append(reader(raw, index, repairs))
    except RecursionError:
        fault = nesting_fault(messages)
        if fault is None:
            raise
        raise fault from None
    _mark_sent_with_results(read_messages)  # before any repair: an inserted result marks none
    transcript = Transcript(shape=shape, messages=read_messages, repairs=repairs)
    _pair(transcript)
    return transcript


def _mark_sent_with_results(messages: Sequence[Message]) -> None:
    """Mark the user messages of a request (between two assistant messages) with results."""
    for is_request, run in itertools.groupby(messages, lambda m: m.role != "assistant"):
        request = list(run)
        if is_request and any(message.results for message in request):
            for message in request:
                message.with_results = message.role == "user" and not message.results


def read_role(shape: Shape, role: str) -> str:
    """The role a message written as ``role`` in ``shape`` reads back as (``developer``: system)."""
    return role if shape == "anthropic" else _CHAT_ROLES.get(role, role)


def refused(text: str, data: Any = None) -> bool:
    """Whether a tool result is a refusal sent back (as text or as ``Rejection.to_dict()``).

    No tool produced it, so it is read as a failure: nothing in it is harvested.
    """
    if is_refusal(text):
        return True
    if data is None and text.lstrip().startswith("{") and REFUSED_ERROR in text:
        data = _result_value(text)  # JSON text that was not parsed yet (a recorded trace)
    return isinstance(data, Mapping) and data.get("error") == REFUSED_ERROR


def unsuccessful(text: str, data: Any = None) -> bool:
    """Whether a tool result's text says it is no success: a refusal, or a failure written.

    A failure guardrail wrote, or one a runtime writes as text alone (the Agents
    SDK's). Read in every shape, whatever its flags say: a runtime may drop a
    flag, never the text.
    """
    return is_failure(text) or refused(text, data) or runtime_failure(text)


def content_text(content: Any) -> str | None:
    """The text of a content field: a string, the text parts of a list, "" for no content.

    None for content of any other type.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return None


def _text(content: Any, index: int) -> str:
    text = content_text(content)
    if text is None:
        raise TranscriptError(
            f"content must be a string or a list of parts, not {type(content).__name__}",
            index=index,
        )
    return text


def _arguments(value: Any) -> Any:
    """Arguments as a dict when they are one or a JSON object as text; else as written."""
    if isinstance(value, str):
        parsed = parse_arguments(value)
        return value if parsed is None else parsed
    return value


def _result_value(text: str, given: Any = None) -> Any:
    if given is not None:
        return given
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return _json(stripped)
        except (ValueError, RecursionError):
            return None
    return None


_DECODER = json.JSONDecoder()


def _json(text: str) -> Any:
    """``json.loads(text)`` for text with no white space around it, without its per-call cost."""
    value, end = _DECODER.raw_decode(text)
    if end != len(text):
        raise ValueError(f"extra data after the JSON value at {end}")
    return value


def _call_id(value: Any, index: int, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise TranscriptError(f"{what} has no id; every tool call needs one", index=index)
    return value


def _tool_content(
    content: Any, index: int, repairs: list[Repair], given: Any = None
) -> tuple[str, Any, str | None]:
    """Text, JSON value and seal of a tool result's content, repairing content that is data.

    Text, a list of parts and ``None`` are read as text, without the seal line a
    server may have written last. Anything else (a list holding data is data
    too) is written as JSON (as ``str()`` where it is not JSON) and is the
    result's value, unless ``given`` (a parsed ``result``) is.
    """
    if type(content) is str:  # the usual case
        text, seal = split_seal(content)
        return text, _result_value(text, given), seal
    if content is None or isinstance(content, str) or _parts(content):
        text, seal = split_seal(_text(content, index))
        return text, _result_value(text, given), seal
    what = "a list of data" if isinstance(content, list) else f"{type(content).__name__} content"
    repairs.append(Repair("non_string_content", index, f"{what} read as JSON"))
    try:
        text = json.dumps(content, ensure_ascii=False)
    except (TypeError, ValueError):
        text = str(content)
    return text, content if given is None else given, None


def _parts(content: Any) -> bool:
    """Whether ``content`` is a list of content parts (strings, or blocks with a type)."""
    return isinstance(content, list) and all(
        isinstance(p, str) or (isinstance(p, Mapping) and "type" in p) for p in content
    )


def _chat(raw: Mapping[str, Any], index: int, repairs: list[Repair]) -> Message:
    role = raw.get("role")
    if role == "tool":
        call_id = _call_id(raw.get("tool_call_id"), index, "a tool message")
        text, data, seal = _tool_content(raw.get("content"), index, repairs, raw.get("result"))
        name = raw.get("name") if isinstance(raw.get("name"), str) else None
        # Chat has no error field but what writers add (the corpus's "error", LangChain's
        # status, MCP's isError); a refusal sent back, and a failure guardrail or the Agents
        # SDK wrote (a result put in for an unanswered call among them), are known by their
        # text. Any other plain tool message is a success: recorded traces and other
        # runtimes write their results so.
        error = flagged(raw) or unsuccessful(text, data)
        result = Result(call_id, text, data, error, index, name, seal=seal)
        return Message("tool", text, raw, results=[result])
    if not isinstance(role, str) or role not in _CHAT_ROLES:
        raise TranscriptError(
            f"unknown role {role!r}; expected system, developer, user, assistant or tool",
            index=index,
        )
    calls = []
    for item in raw.get("tool_calls") or ():
        if not isinstance(item, Mapping):
            raise TranscriptError("a tool call is a dict", index=index)
        function = item.get("function")
        spec = function if isinstance(function, Mapping) else item
        name = spec.get("name")
        if not isinstance(name, str):
            raise TranscriptError("a tool call has no function name", index=index)
        calls.append(
            Call(
                _call_id(item.get("id"), index, "a tool call"),
                name,
                _arguments(spec.get("arguments")),
                index,
            )
        )
    return Message(_CHAT_ROLES[role], _text(raw.get("content"), index), raw, calls=calls)


def _anthropic(raw: Mapping[str, Any], index: int, repairs: list[Repair]) -> Message:
    role = raw.get("role")
    if role not in ("system", "user", "assistant"):
        raise TranscriptError(
            f"unknown role {role!r}; Anthropic messages are user or assistant "
            "(system given separately, or as a leading message)",
            index=index,
        )
    content = raw.get("content")
    if isinstance(content, str) or (content is None and role == "system"):
        return Message(role, content or "", raw)
    if not isinstance(content, list):
        raise TranscriptError(
            f"content must be a string or a list of blocks, not {type(content).__name__}",
            index=index,
        )
    texts, calls, results = [], [], []
    for block in content:
        if not isinstance(block, Mapping):
            raise TranscriptError("a content block is a dict", index=index)
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind in ("tool_use", "server_tool_use"):
            name = block.get("name")
            if not isinstance(name, str):
                raise TranscriptError("a tool_use block has no tool name", index=index)
            call_id = _call_id(block.get("id"), index, "a tool_use block")
            calls.append(Call(call_id, name, block.get("input"), index))
        elif kind == "tool_result":
            call_id = _call_id(block.get("tool_use_id"), index, "a tool_result block")
            text, data, seal = _tool_content(block.get("content"), index, repairs)
            error = flagged(block) or unsuccessful(text, data)
            results.append(Result(call_id, text, data, error, index, seal=seal))
    return Message(role, "\n".join(texts), raw, calls=calls, results=results)


def _responses(raw: Mapping[str, Any], index: int, repairs: list[Repair]) -> Message:
    kind = raw.get("type", "message" if "role" in raw else None)
    if kind == "message":
        role = raw.get("role")
        if not isinstance(role, str) or role not in _CHAT_ROLES:
            raise TranscriptError(
                f"unknown role {role!r}; expected system, developer, user or assistant",
                index=index,
            )
        return Message(_CHAT_ROLES[role], _text(raw.get("content"), index), raw)
    if not isinstance(kind, str):
        raise TranscriptError("a Responses item needs a type or a role", index=index)
    if kind.endswith("_call_output"):
        call_id = _call_id(raw.get("call_id"), index, f"a {kind} item")
        text, data, seal = _tool_content(raw.get("output"), index, repairs)
        # Only a finished output shows a success: "in_progress", "incomplete" or a status
        # this reader does not know does not (an item with no status was written by a
        # client, as a chat message is).
        error = raw.get("status") not in (None, "completed") or flagged(raw)
        error = error or unsuccessful(text, data)
        result = Result(call_id, text, data, error, index, seal=seal)
        return Message("tool", text, raw, results=[result])
    if kind.endswith("_call") and "call_id" in raw:
        call_id = _call_id(raw.get("call_id"), index, f"a {kind} item")
        name = raw["name"] if isinstance(raw.get("name"), str) else kind
        arguments = _arguments(raw.get("arguments", raw.get("input", raw.get("action"))))
        return Message("assistant", "", raw, calls=[Call(call_id, name, arguments, index)])
    # reasoning, web searches and other item types the API may add: opaque, kept as they are.
    return Message("assistant", "", raw)


def _pair(transcript: Transcript) -> None:
    """Pair results with calls (the latest open call with the id); repair unanswered calls."""
    open_calls: dict[str, Call] = {}
    for message in transcript.messages:
        for result in message.results:
            call = open_calls.pop(result.call_id, None)
            if call is None:
                raise TranscriptError(
                    f"tool result for call id {result.call_id!r} answers no earlier open call; "
                    "restore the assistant message that made the call, or drop this result",
                    index=result.index,
                )
            call.result, result.call = result, call
            result.name = result.name or call.name
        for call in message.calls:
            if call.id in open_calls:
                raise TranscriptError(
                    f"call id {call.id!r} is used again while the call made at message "
                    f"{open_calls[call.id].index} has no result yet; give each open call "
                    "its own id",
                    index=call.index,
                )
            open_calls[call.id] = call
    if open_calls:
        _repair_unanswered(transcript, list(open_calls.values()))


def _repair_unanswered(transcript: Transcript, unanswered: list[Call]) -> None:
    messages = transcript.messages
    last_talk = max(
        (i for i, m in enumerate(messages) if not m.results and not m.calls and m.role != "system"),
        default=-1,
    )
    # Calls after the last plain message are pending: their results are on their way.
    stale = [call for call in unanswered if call.index < last_talk]
    for call in reversed(stale):
        at = call.index + 1
        while at < len(messages) and messages[at].results and not messages[at].starts_turn:
            at += 1
        raw = result_message(transcript.shape, call.id, _MISSING_RESULT, error=True)
        result = Result(call.id, _MISSING_RESULT, None, True, at, call.name, call)
        call.result = result
        messages.insert(at, Message("tool", _MISSING_RESULT, raw, results=[result]))
        transcript.repairs.append(
            Repair(
                "unanswered_call",
                call.index,
                f"call {call.id!r} to {call.name} had no result; an error result was inserted",
            )
        )
    if stale:
        for index, message in enumerate(messages):
            for call in message.calls:
                call.index = index
            for result in message.results:
                result.index = index
        transcript.repairs.sort(key=lambda repair: repair.index)


# -- writing --------------------------------------------------------------------------------


def write(transcript: Transcript | Iterable[Message]) -> list[Any]:
    """The message list in its own shape: every message's original object, in order."""
    messages = transcript.messages if isinstance(transcript, Transcript) else transcript
    return [message.raw for message in messages]


def text_message(shape: Shape, role: str, text: str) -> dict[str, Any]:
    """A plain text message of ``role`` in ``shape``."""
    if shape == "openai_responses":
        return {"type": "message", "role": role, "content": text}
    return {"role": role, "content": text}


def result_message(shape: Shape, call_id: str, text: str, *, error: bool) -> dict[str, Any]:
    """A tool result answering ``call_id`` in ``shape``.

    A failure is marked with Anthropic's ``is_error`` and with Responses'
    ``status: "incomplete"``. Chat completions has no such field: there the
    text has to say it (the reader knows the text of an inserted result).
    """
    if shape == "anthropic":
        block = {"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": error}
        return {"role": "user", "content": [block]}
    if shape == "openai_responses":
        item = {"type": "function_call_output", "call_id": call_id, "output": text}
        return {**item, "status": "incomplete"} if error else item
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def default_role(shape: Shape) -> str:
    """The role a compacted context message takes: Anthropic has no system messages."""
    return "user" if shape == "anthropic" else "system"
