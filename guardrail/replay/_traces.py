"""Recorded conversations, read from files: the input of a replay.

Two shapes are read. The neutral corpus shape (one JSON object a line, with
``messages`` whose tool calls carry parsed ``arguments`` and whose tool
messages carry ``result`` and ``error``), and plain OpenAI chat messages: a
JSON file holding a list of messages (or an object with ``messages``, or a
list of such objects), or JSONL with a ``messages`` field on each line, or
JSONL with one message a line. Arguments given as JSON strings are parsed;
results may be plain text or errors.

A line or a message that cannot be read is kept as a :class:`Malformed`
record (file, line, reason) and skipped, never fatal. A file that cannot be
read at all (missing, not UTF-8, not JSON) raises
:class:`~guardrail.errors.TraceFileError` naming the file and the line.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from guardrail._declare.arguments import parse_arguments
from guardrail._transcript.failures import flagged
from guardrail._transcript.messages import content_text, unsuccessful
from guardrail._transcript.result_text import split_seal
from guardrail.errors import TraceFileError

Role = Literal["system", "user", "assistant", "tool"]

#: File name endings read as one JSON value a line, whatever the first line looks like.
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".jsonlines")
_ROLES: Mapping[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
}


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One recorded tool call: ``arguments`` parsed to an object, or None when unreadable."""

    id: str | None
    name: str
    arguments: Mapping[str, Any] | None
    raw_arguments: Any = None


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a conversation, whatever shape it was recorded in.

    For a ``tool`` message, ``result`` is the output parsed as JSON where it
    was recorded so (or None) and ``error`` says whether the tool failed.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    result: Any = None
    error: bool = False

    @property
    def output(self) -> Any:
        """A tool message's output for harvesting: the parsed result, else the text."""
        return self.result if self.result is not None else self.content


@dataclass(frozen=True, slots=True)
class Malformed:
    """A line or a message that could not be read, and why.

    ``line`` is the line of the file (for JSONL); ``item`` the position of
    the conversation in a JSON document; ``message`` the position of the
    message in its conversation. A record with no ``message`` is a whole
    line (or conversation) skipped.
    """

    path: str
    line: int | None
    reason: str
    message: int | None = None
    item: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe fields."""
        return {
            "path": self.path,
            "line": self.line,
            "item": self.item,
            "message": self.message,
            "reason": self.reason,
        }

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        if self.item is not None:
            where += f": conversation {self.item}"
        if self.message is not None:
            where += f": message {self.message}"
        return f"{where}: {self.reason}"


@dataclass(frozen=True)
class Trace:
    """One recorded conversation: its messages and where it was read from."""

    id: str
    messages: tuple[Message, ...]
    path: str = "<memory>"
    line: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def openai_messages(self, stop: int | None = None) -> list[dict[str, Any]]:
        """The messages before ``stop`` (all by default) as OpenAI chat-completions dicts."""
        out: list[dict[str, Any]] = []
        for message in self.messages[:stop]:
            item: dict[str, Any] = {"role": message.role, "content": message.content}
            if message.tool_calls:
                item["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": json.dumps(call.arguments, ensure_ascii=False)
                            if call.arguments is not None
                            else str(call.raw_arguments),
                        },
                    }
                    for call in message.tool_calls
                ]
            if message.role == "tool":
                item["tool_call_id"] = message.tool_call_id
                if message.name:
                    item["name"] = message.name
                if message.error:  # the corpus's flag, which the chat reader knows
                    item["error"] = True
            out.append(item)
        return out


@dataclass(frozen=True)
class TraceFile:
    """The conversations read from one file and the lines or messages that were skipped."""

    path: str
    traces: tuple[Trace, ...]
    malformed: tuple[Malformed, ...] = ()


# -- reading one message ----------------------------------------------------------------------


def _arguments(raw: Any) -> Mapping[str, Any] | None:
    if raw is None or raw == "":
        return {}
    return parse_arguments(raw) if isinstance(raw, (Mapping, str)) else None


def _tool_call(raw: Any) -> tuple[ToolCall | None, str | None]:
    """A call in the corpus shape or the OpenAI shape; or the reason it cannot be read."""
    if not isinstance(raw, Mapping):
        return None, f"a tool call is an object, not {type(raw).__name__}"
    function = raw.get("function")
    holder = function if isinstance(function, Mapping) else raw
    name = holder.get("name")
    if not isinstance(name, str) or not name:
        return None, "a tool call has no name"
    call_id = raw.get("id")
    raw_arguments = holder.get("arguments", holder.get("input"))
    return (
        ToolCall(
            id=call_id if isinstance(call_id, str) and call_id else None,
            name=name,
            arguments=_arguments(raw_arguments),
            raw_arguments=raw_arguments,
        ),
        None,
    )


def _is_error(raw: Mapping[str, Any], text: str) -> bool:
    """Whether a tool message records a failure: a flag the recording kept, or a text no tool wrote.

    A refusal sent back as the result (its text, or its JSON), a failure
    guardrail wrote (its text begins ``guardrail:``) and one the Agents SDK
    wrote (its sentences, see :mod:`guardrail._transcript.failures`) are failures whatever
    the flags say: no tool produced them. What the tool's own result says of
    itself (``Error: ...``) is the tool's failure rule's to read, as at run
    time: the replay applies it (:func:`guardrail._provenance.failure.failed`).
    """
    return unsuccessful(text, raw.get("result")) or flagged(raw)


def parse_message(raw: Any) -> tuple[Message | None, list[str]]:
    """One message in either shape, and the problems met (a None message was skipped)."""
    if not isinstance(raw, Mapping):
        return None, [f"a message is an object, not {type(raw).__name__}"]
    raw_role = raw.get("role")
    role = _ROLES.get(raw_role) if isinstance(raw_role, str) else None
    if role is None:
        return None, [f"unknown role {raw.get('role')!r} (expected system, user, assistant, tool)"]
    text = content_text(raw.get("content"))
    if text is None:
        return None, [f"content is neither text nor a list of parts: {type(raw['content'])}"]
    problems: list[str] = []
    if role == "assistant":
        calls: list[ToolCall] = []
        raw_calls = raw.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            problems.append("tool_calls is not a list; the calls were skipped")
            raw_calls = []
        legacy = raw.get("function_call")
        if isinstance(legacy, Mapping):
            raw_calls = [*raw_calls, {"function": legacy}]
        for raw_call in raw_calls:
            call, problem = _tool_call(raw_call)
            if call is not None:
                calls.append(call)
            else:
                problems.append(f"{problem}; the call was skipped")
        return Message(role, text, tool_calls=tuple(calls)), problems
    if role == "tool":
        text, _ = split_seal(text)  # a server's seal line is not part of the result
        call_id = raw.get("tool_call_id")
        name = raw.get("name")
        return (
            Message(
                role,
                text,
                tool_call_id=call_id if isinstance(call_id, str) and call_id else None,
                name=name if isinstance(name, str) else None,
                result=raw.get("result"),
                error=_is_error(raw, text),
            ),
            problems,
        )
    return Message(role, text), problems


def parse_messages(
    raw: Sequence[Any], *, path: str = "<memory>", line: int | None = None, item: int | None = None
) -> tuple[list[Message], list[Malformed]]:
    """A list of raw messages, and a record for every message skipped or partly read."""
    messages: list[Message] = []
    malformed: list[Malformed] = []
    for index, entry in enumerate(raw):
        message, problems = parse_message(entry)
        malformed.extend(Malformed(path, line, p, message=index, item=item) for p in problems)
        if message is not None:
            messages.append(message)
    return messages, malformed


def trace_from_messages(
    messages: Sequence[Any], *, id: str = "conversation", path: str = "<memory>"
) -> Trace:
    """A trace from an in-memory list of messages (corpus or OpenAI shape); bad ones skipped."""
    parsed, _ = parse_messages(messages, path=path)
    return Trace(id=id, messages=tuple(parsed), path=path)


# -- reading files ----------------------------------------------------------------------------


def _trace(
    obj: Mapping[str, Any], *, path: str, line: int | None, item: int | None, fallback: str
) -> tuple[Trace | None, list[Malformed]]:
    raw = obj.get("messages")
    if not isinstance(raw, list):
        reason = "no 'messages' list: expected a conversation object or a message"
        return None, [Malformed(path, line, reason, item=item)]
    messages, malformed = parse_messages(raw, path=path, line=line, item=item)
    trace_id = obj.get("id")
    metadata = {key: value for key, value in obj.items() if key != "messages"}
    return (
        Trace(
            id=str(trace_id) if trace_id not in (None, "") else fallback,
            messages=tuple(messages),
            path=path,
            line=line,
            metadata=metadata,
        ),
        malformed,
    )


def _read_text(path: Path, name: str) -> str:
    if path.is_dir():
        raise TraceFileError(
            "is a directory; pass the trace files inside it (e.g. DIR/*.jsonl)", path=name
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceFileError(f"cannot read it: {exc.strerror or exc}", path=name) from None
    if path.suffix.lower() == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceFileError(f"not a readable gzip file: {exc}", path=name) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TraceFileError(
            f"not UTF-8 text (byte {exc.start}); traces are JSON or JSONL text files",
            path=name,
            line=line,
        ) from None


def _read_jsonl(text: str, name: str) -> TraceFile:
    traces: list[Trace] = []
    malformed: list[Malformed] = []
    loose: list[Any] = []  # files holding one message a line make one conversation
    loose_line: int | None = None
    # Split on newlines only: JSON text may hold U+2028 and other characters splitlines() breaks on.
    for number, raw_line in enumerate(text.split("\n"), start=1):
        if not raw_line.strip():
            continue
        try:
            obj = json.loads(raw_line)
        except (ValueError, RecursionError) as exc:
            malformed.append(Malformed(name, number, f"not JSON: {exc}"))
            continue
        if not isinstance(obj, dict):
            reason = f"a line holds a JSON object, not {type(obj).__name__}"
            malformed.append(Malformed(name, number, reason))
            continue
        if "messages" not in obj and "role" in obj:
            loose.append(obj)
            loose_line = loose_line or number
            continue
        trace, problems = _trace(
            obj, path=name, line=number, item=None, fallback=f"{Path(name).name}:{number}"
        )
        malformed.extend(problems)
        if trace is not None:
            traces.append(trace)
    if loose:
        messages, problems = parse_messages(loose, path=name, line=loose_line)
        malformed.extend(problems)
        traces.append(Trace(Path(name).name, tuple(messages), path=name, line=loose_line))
    return TraceFile(name, tuple(traces), tuple(malformed))


def _read_document(doc: Any, name: str) -> TraceFile:
    if isinstance(doc, Mapping):
        doc = [doc] if "messages" in doc else None
    if not isinstance(doc, list):
        raise TraceFileError(
            "holds no conversation: expected a list of messages, an object with 'messages', "
            "or a list of such objects",
            path=name,
            line=1,
        )
    if doc and all(isinstance(item, Mapping) and "messages" not in item for item in doc):
        messages, malformed = parse_messages(doc, path=name)
        return TraceFile(
            name, (Trace(Path(name).name, tuple(messages), path=name),), tuple(malformed)
        )
    traces: list[Trace] = []
    skipped: list[Malformed] = []
    for item, obj in enumerate(doc):
        if not isinstance(obj, Mapping):
            reason = f"a conversation is an object, not {type(obj).__name__}"
            skipped.append(Malformed(name, None, reason, item=item))
            continue
        trace, problems = _trace(
            obj, path=name, line=None, item=item, fallback=f"{Path(name).name}#{item}"
        )
        skipped.extend(problems)
        if trace is not None:
            traces.append(trace)
    return TraceFile(name, tuple(traces), tuple(skipped))


def _first_line_is_object(text: str) -> bool:
    for line in text.split("\n"):
        if line.strip():
            try:
                return isinstance(json.loads(line), dict)
            except (ValueError, RecursionError):
                return False
    return False


def load_trace_file(path: str | os.PathLike[str]) -> TraceFile:
    """Read one file of traces (JSONL or JSON); unreadable input raises ``TraceFileError``.

    A file named ``*.jsonl`` (or ``.ndjson``) is read a line at a time. Any
    other file is read as one JSON document, or as JSONL when it does not
    parse whole and its first line is an object. A ``.gz`` file is
    decompressed first and named by what it holds (``traces.jsonl.gz``).
    """
    name = os.fspath(path)
    file = Path(name)
    text = _read_text(file, name)
    inner = file.with_suffix("") if file.suffix.lower() == ".gz" else file
    if inner.suffix.lower() in JSONL_SUFFIXES:
        return _read_jsonl(text, name)
    try:
        doc = json.loads(text)
    except RecursionError:
        raise TraceFileError("JSON nested too deeply to read", path=name) from None
    except json.JSONDecodeError as exc:
        if _first_line_is_object(text):
            return _read_jsonl(text, name)
        raise TraceFileError(
            f"not valid JSON ({exc.msg}, column {exc.colno}); traces are JSONL (one "
            "conversation a line) or a JSON list of messages",
            path=name,
            line=exc.lineno,
        ) from None
    return _read_document(doc, name)


def load_traces(paths: Iterable[str | os.PathLike[str]]) -> list[TraceFile]:
    """Read several trace files in order; the first unreadable one raises ``TraceFileError``."""
    return [load_trace_file(path) for path in paths]
