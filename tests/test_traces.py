"""Reading recorded conversations: the corpus shape, OpenAI messages, bad lines and bad files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrail._transcript.result_text import failure_text
from guardrail.errors import GuardrailUsageError, TraceFileError
from guardrail.replay._traces import (
    Trace,
    load_trace_file,
    load_traces,
    parse_message,
    trace_from_messages,
)

from .conftest import AIRLINE_TRACES as TAU
from .conftest import needs_corpus

OPENAI_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You help with orders."},
    {"role": "user", "content": "Refund order #W1234567 please"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_order", "arguments": '{"order_id": "#W1234567"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"order_id": "#W1234567"}'},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "refund", "arguments": '{"order_id": "#W1234567"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_2", "content": "Error: refunds are closed"},
]


def _write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_a_gzipped_file_reads_as_what_it_holds(tmp_path: Path) -> None:
    """``traces.jsonl.gz`` is read as JSONL; a broken gzip file is a TraceFileError."""
    lines = "\n".join(json.dumps({"id": f"t{i}", "messages": OPENAI_MESSAGES}) for i in range(3))
    plain = tmp_path / "traces.jsonl"
    plain.write_text(lines, encoding="utf-8")
    packed = tmp_path / "traces.jsonl.gz"
    packed.write_bytes(gzip.compress(lines.encode("utf-8")))
    read = [(t.id, t.messages, t.line) for t in load_trace_file(packed).traces]
    assert read == [(t.id, t.messages, t.line) for t in load_trace_file(plain).traces]
    assert len(read) == 3
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(b"not gzip at all")
    with pytest.raises(TraceFileError, match="not a readable gzip file"):
        load_trace_file(broken)


@needs_corpus
def test_reads_the_corpus_shape() -> None:
    """Each corpus line is one trace; arguments are objects; tool messages keep result, error."""
    file = load_trace_file(TAU)
    assert len(file.traces) == 200
    assert file.malformed == ()
    first = file.traces[0]
    assert first.id == "tau-bench/gpt-4o-airline:0000"
    assert first.line == 1
    assert first.metadata["task_id"] == 0
    calls = [c for t in file.traces for m in t.messages for c in m.tool_calls]
    assert len(calls) == 1164
    assert all(isinstance(c.arguments, dict) for c in calls)
    tools = [m for t in file.traces for m in t.messages if m.role == "tool"]
    assert sum(m.error for m in tools) == 73
    assert all(m.content.startswith("Error:") for m in tools if m.error)


def test_reads_a_json_list_of_openai_messages(tmp_path: Path) -> None:
    """A JSON file holding a list of messages is one trace; string arguments are parsed."""
    file = load_trace_file(_write(tmp_path / "conv.json", json.dumps(OPENAI_MESSAGES)))
    (trace,) = file.traces
    assert trace.id == "conv.json"
    assert [m.role for m in trace.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    call = trace.messages[2].tool_calls[0]
    assert call.id == "call_1"
    assert call.name == "get_order"
    assert call.arguments == {"order_id": "#W1234567"}
    assert call.raw_arguments == '{"order_id": "#W1234567"}'
    assert trace.messages[2].content == ""


def test_plain_text_and_error_results(tmp_path: Path) -> None:
    """Text is kept as the output; whether 'Error: ...' failed is the tool's rule's to say.

    The reader has no rule of its own for a tool's text: the replay reads it by
    the tool's failure rule, as a live call is read (tests/test_replay.py).
    """
    file = load_trace_file(_write(tmp_path / "conv.json", json.dumps(OPENAI_MESSAGES)))
    ok, failed = (m for m in file.traces[0].messages if m.role == "tool")
    assert not ok.error
    assert ok.output == '{"order_id": "#W1234567"}'
    assert not failed.error
    assert failed.output == "Error: refunds are closed"


def test_explicit_error_flags_win_over_the_text() -> None:
    """An error flag (error, is_error, status) is what the reader reports; never the text."""
    flagged, _ = parse_message(
        {"role": "tool", "tool_call_id": "x", "content": "ok", "error": True}
    )
    anthropic, _ = parse_message({"role": "tool", "content": "fine", "is_error": True})
    langchain, _ = parse_message({"role": "tool", "content": "fine", "status": "error"})
    cleared, _ = parse_message({"role": "tool", "content": "Error: x", "error": False})
    assert flagged is not None
    assert flagged.error
    assert anthropic is not None
    assert anthropic.error
    assert langchain is not None
    assert langchain.error
    assert cleared is not None
    assert not cleared.error


@pytest.mark.parametrize(
    "message",
    [
        {"content": "guardrail refused the call to refund; the tool did not run.\n- ..."},
        {"content": json.dumps({"error": "identifier_refused", "message": "...", "findings": []})},
        {"content": "refused", "result": {"error": "identifier_refused", "findings": []}},
    ],
)
def test_a_refusal_sent_back_as_the_result_is_a_failure_whatever_the_flags(
    message: dict[str, Any],
) -> None:
    """A refusal's text or Rejection.to_dict() as a tool result is a failure, even flagged ok."""
    parsed, _ = parse_message({"role": "tool", "tool_call_id": "x", "error": False, **message})
    assert parsed is not None
    assert parsed.error


def test_a_failure_guardrail_wrote_is_a_failure_whatever_the_flags() -> None:
    """The text run_tool_calls writes for a call that raised is a failure, even flagged ok."""
    text = failure_text("find_order failed: LookupError: W1234567 is not yours")
    for flags in ({}, {"error": False}):
        parsed, _ = parse_message({"role": "tool", "tool_call_id": "x", "content": text, **flags})
        assert parsed is not None
        assert parsed.error


@pytest.mark.parametrize(
    "message",
    [
        {"content": "An error occurred while running the tool. Please try again."},
        {"content": "Tool 'find_order' timed out after 5 seconds.", "error": False},
        {"content": "W1234567 is not yours", "isError": True},
        {"content": "W1234567 is not yours", "status": "error"},
    ],
)
def test_a_failure_a_runtime_wrote_is_a_failure(message: dict[str, Any]) -> None:
    """The Agents SDK's failure sentences, MCP's isError and LangChain's status read as failures."""
    parsed, _ = parse_message({"role": "tool", "tool_call_id": "x", **message})
    assert parsed is not None
    assert parsed.error


def test_openai_messages_keep_the_error_flag() -> None:
    """A failed result whose text does not say so keeps its flag in the OpenAI messages."""
    failed = {"role": "tool", "tool_call_id": "call_1", "content": "no", "error": True}
    trace = trace_from_messages([*OPENAI_MESSAGES[:3], failed])
    assert trace.openai_messages()[-1]["error"] is True
    assert trace_from_messages(trace.openai_messages()).messages == trace.messages


def test_reads_a_json_object_and_a_list_of_conversations(tmp_path: Path) -> None:
    """A JSON object with messages is one trace; a list of such objects is several."""
    one = load_trace_file(
        _write(tmp_path / "one.json", json.dumps({"id": "c1", "messages": OPENAI_MESSAGES}))
    )
    many = load_trace_file(
        _write(
            tmp_path / "many.json",
            json.dumps([{"id": "a", "messages": OPENAI_MESSAGES}, {"messages": []}]),
        )
    )
    assert [t.id for t in one.traces] == ["c1"]
    assert [t.id for t in many.traces] == ["a", "many.json#1"]


def test_reads_jsonl_with_a_messages_field(tmp_path: Path) -> None:
    """OpenAI messages as JSONL, one conversation a line, keep their line numbers."""
    lines = [json.dumps({"messages": OPENAI_MESSAGES}), "", json.dumps({"messages": []})]
    file = load_trace_file(_write(tmp_path / "convs.jsonl", "\n".join(lines)))
    assert [t.line for t in file.traces] == [1, 3]
    assert [t.id for t in file.traces] == ["convs.jsonl:1", "convs.jsonl:3"]


def test_reads_jsonl_with_one_message_a_line(tmp_path: Path) -> None:
    """A JSONL file of bare messages is one conversation."""
    text = "\n".join(json.dumps(m) for m in OPENAI_MESSAGES)
    file = load_trace_file(_write(tmp_path / "messages.jsonl", text))
    (trace,) = file.traces
    assert len(trace.messages) == len(OPENAI_MESSAGES)


def test_a_json_file_that_is_really_jsonl(tmp_path: Path) -> None:
    """A file not named .jsonl that holds JSON lines is read as JSONL."""
    text = "\n".join(json.dumps({"messages": OPENAI_MESSAGES}) for _ in range(3))
    file = load_trace_file(_write(tmp_path / "traces.json", text))
    assert len(file.traces) == 3


def test_malformed_lines_are_counted_with_their_line_numbers(tmp_path: Path) -> None:
    """Bad lines are recorded with file and line and skipped; good lines are still read."""
    lines = [
        json.dumps({"messages": OPENAI_MESSAGES}),
        "{not json",
        "[1, 2]",
        json.dumps({"id": "no messages"}),
        json.dumps({"id": "fine", "messages": []}),
    ]
    path = _write(tmp_path / "t.jsonl", "\n".join(lines))
    file = load_trace_file(path)
    assert [t.line for t in file.traces] == [1, 5]
    assert [m.line for m in file.malformed] == [2, 3, 4]
    assert all(m.path == str(path) and m.message is None for m in file.malformed)
    assert "not JSON" in file.malformed[0].reason
    assert str(file.malformed[0]).startswith(f"{path}:2: ")


def test_malformed_messages_are_skipped_and_recorded() -> None:
    """A message with an unknown role or a call with no name is skipped, the rest kept."""
    raw = [
        {"role": "user", "content": "hi"},
        {"role": "wizard", "content": "?"},
        "just text",
        {"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]},
        {"role": "assistant", "tool_calls": "not a list"},
        {"role": "user", "content": {"nested": True}},
    ]
    trace = trace_from_messages(raw)
    assert [m.role for m in trace.messages] == ["user", "assistant", "assistant"]
    assert trace.messages[1].tool_calls == ()


def test_unreadable_arguments_are_kept_raw() -> None:
    """Arguments that are not a JSON object leave the call readable, with arguments None."""
    message, problems = parse_message(
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{oops"}}],
        }
    )
    assert problems == []
    assert message is not None
    (call,) = message.tool_calls
    assert call.arguments is None
    assert call.raw_arguments == "{oops"


def test_content_parts_and_legacy_function_calls() -> None:
    """Text parts are joined; a legacy function_call and function result are read as tool ones."""
    trace = trace_from_messages(
        [
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"}, "b"]},
            {"role": "assistant", "function_call": {"name": "f", "arguments": '{"x": 1}'}},
            {"role": "function", "name": "f", "content": "done"},
        ]
    )
    user, assistant, tool = trace.messages
    assert user.content == "a\nb"
    assert assistant.tool_calls[0].name == "f"
    assert assistant.tool_calls[0].id is None
    assert tool.role == "tool"
    assert tool.name == "f"


def test_line_separators_inside_json_strings_do_not_split_lines(tmp_path: Path) -> None:
    """Only newlines end a JSONL line: U+2028 or U+0085 inside a string stay in the message."""
    line = json.dumps(
        {"messages": [{"role": "user", "content": "a\u2028b\x85c"}]}, ensure_ascii=False
    )
    file = load_trace_file(_write(tmp_path / "t.jsonl", line + "\r\n" + line))
    assert file.malformed == ()
    assert [t.messages[0].content for t in file.traces] == ["a\u2028b\x85c"] * 2


def test_openai_messages_round_trip() -> None:
    """A trace rendered as OpenAI messages reads back to the same trace."""
    trace = trace_from_messages(OPENAI_MESSAGES)
    again = trace_from_messages(trace.openai_messages())
    assert again.messages == trace.messages
    assert len(trace.openai_messages(stop=2)) == 2


def test_missing_file_is_an_error_of_use(tmp_path: Path) -> None:
    """A file that does not exist raises TraceFileError naming it."""
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(TraceFileError, match=r"nope\.jsonl") as info:
        load_trace_file(missing)
    assert isinstance(info.value, GuardrailUsageError)
    assert info.value.path == str(missing)
    assert info.value.line is None


def test_directory_is_an_error_of_use(tmp_path: Path) -> None:
    """A directory raises TraceFileError saying to pass the files inside."""
    with pytest.raises(TraceFileError, match="directory"):
        load_trace_file(tmp_path)


def test_non_utf8_file_names_the_line(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 raise TraceFileError with the line where they are."""
    path = _write(tmp_path / "bin.jsonl", b'{"messages": []}\n{"messages": []}\n\xff\xfe\n')
    with pytest.raises(TraceFileError, match=r"bin\.jsonl:3: not UTF-8") as info:
        load_trace_file(path)
    assert info.value.line == 3


def test_invalid_json_document_names_the_line(tmp_path: Path) -> None:
    """A .json file that does not parse (and is not JSONL) names the line of the error."""
    path = _write(tmp_path / "broken.json", '[\n  {"role": "user", "content": "x"},\n  oops\n]')
    with pytest.raises(TraceFileError, match=r"broken\.json:3: not valid JSON") as info:
        load_trace_file(path)
    assert info.value.line == 3


def test_json_without_a_conversation_is_an_error(tmp_path: Path) -> None:
    """A JSON value that holds no conversation raises TraceFileError."""
    path = _write(tmp_path / "tools.json", json.dumps({"kinds": {}}))
    with pytest.raises(TraceFileError, match="holds no conversation"):
        load_trace_file(path)


def test_load_traces_reads_files_in_order(tmp_path: Path) -> None:
    """load_traces returns one TraceFile per path, in the order given."""
    a = _write(tmp_path / "a.json", json.dumps(OPENAI_MESSAGES))
    b = _write(tmp_path / "b.jsonl", json.dumps({"messages": []}))
    assert [f.path for f in load_traces([a, b])] == [str(a), str(b)]


def test_trace_from_messages_is_a_trace() -> None:
    """trace_from_messages builds a Trace with the given id."""
    trace = trace_from_messages(OPENAI_MESSAGES, id="c42")
    assert isinstance(trace, Trace)
    assert trace.id == "c42"


_LINES = st.lists(
    st.one_of(
        st.text(max_size=30),
        st.just(json.dumps({"messages": OPENAI_MESSAGES})),
        st.just(json.dumps({"role": "user", "content": "hi"})),
        st.just(json.dumps({"messages": "nope"})),
        st.just("[]"),
    ),
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(lines=_LINES)
def test_any_jsonl_text_reads_without_crashing(tmp_path_factory: Any, lines: list[str]) -> None:
    """Whatever text a .jsonl holds, reading never raises and every line is accounted for."""
    text = "\n".join(line.replace("\n", " ") for line in lines)
    path = tmp_path_factory.mktemp("prop") / "t.jsonl"
    path.write_text(text, encoding="utf-8")
    file = load_trace_file(path)
    read = {t.line for t in file.traces if t.id != "t.jsonl"}
    skipped = {m.line for m in file.malformed if m.message is None}
    rows = text.removeprefix("\ufeff").split("\n")  # the reader drops a byte-order mark
    loose = sum(1 for line in rows if _is_message(line))
    blank = sum(1 for line in rows if not line.strip())
    assert len(read) + len(skipped) + loose + blank == len(rows)


def _is_message(line: str) -> bool:
    try:
        obj = json.loads(line)
    except ValueError:
        return False
    return isinstance(obj, dict) and "messages" not in obj and "role" in obj
