"""Message shapes: detect, read into neutral form, write back; malformed transcripts."""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrail import Guard, Rejection
from guardrail._guard.audit import SilentLogger
from guardrail._transcript.content import (
    MAX_DEPTH,
    map_text,
    mask_content,
    nesting_fault,
    strings,
)
from guardrail._transcript.messages import (
    SHAPES,
    Shape,
    default_role,
    detect,
    read,
    result_message,
    text_message,
    write,
)
from guardrail._transcript.result_text import failure_text
from guardrail.compaction._block import BLOCK_HEADER
from guardrail.errors import TranscriptError

from .conftest import corpus_conversations, needs_corpus


def _args(order: str) -> str:
    return json.dumps({"order_id": order})


CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a shop assistant."},
    {"role": "user", "content": "Where are my orders #W1000001 and W1000002?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_order", "arguments": _args("#W1000001")},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "get_order", "arguments": _args("W1000002")},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_2", "content": '{"order_id": "W1000002"}'},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"order_id": "W1000001"}'},
    {"role": "assistant", "content": [{"type": "text", "text": "Both are on their way."}]},
    {"role": "user", "content": "Thanks."},
]

RESPONSES: list[dict[str, Any]] = [
    {"role": "developer", "content": "You are a shop assistant."},
    {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "Where is #W1000001?"}],
    },
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "get_order",
        "arguments": _args("#W1000001"),
    },
    {
        "type": "function_call",
        "id": "fc_2",
        "call_id": "call_2",
        "name": "get_user",
        "arguments": "{}",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": '{"order_id": "W1000001"}'},
    {"type": "function_call_output", "call_id": "call_2", "output": "no user"},
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "It ships today."}],
    },
]

ANTHROPIC: list[dict[str, Any]] = [
    {"role": "user", "content": "Where is #W1000001?"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me look."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "get_order",
                "input": {"order_id": "#W1000001"},
            },
            {"type": "tool_use", "id": "toolu_2", "name": "get_user", "input": {}},
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": '{"order_id": "W1000001"}',
            },
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "content": [{"type": "text", "text": "no user"}],
                "is_error": True,
            },
        ],
    },
    {"role": "assistant", "content": "It ships today."},
]

# The corpus form: chat completions with parsed arguments, a parsed `result` and `error`.
CORPUS_STYLE: list[dict[str, Any]] = [
    {"role": "system", "content": "policy"},
    {"role": "user", "content": "my id is mia_li_3668"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "name": "get_user_details", "arguments": {"user_id": "mia_li_3668"}}
        ],
    },
    {
        "role": "tool",
        "content": '{"reservations": ["ZFA04Y"]}',
        "tool_call_id": "c1",
        "name": "get_user_details",
        "result": {"reservations": ["ZFA04Y"]},
        "error": False,
    },
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "name": "get_reservation_details",
                "arguments": {"reservation_id": "ZFA04Y"},
            }
        ],
    },
    {
        "role": "tool",
        "content": "Error: reservation not found",
        "tool_call_id": "c1",
        "name": "get_reservation_details",
        "result": None,
        "error": True,
    },
]


@pytest.mark.parametrize(
    ("messages", "shape"),
    [
        (CHAT, "openai_chat"),
        (RESPONSES, "openai_responses"),
        (ANTHROPIC, "anthropic"),
        (CORPUS_STYLE, "openai_chat"),
    ],
)
def test_detect_names_each_shape(messages: list[dict[str, Any]], shape: str) -> None:
    """Each shape is recognised from its tool traffic or its item types."""
    assert detect(messages) == shape


def test_plain_text_lists_read_as_openai_chat_unless_told() -> None:
    """A list with no tool traffic is ambiguous: OpenAI chat by default, or the shape given."""
    plain = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert detect(plain) == "openai_chat"
    assert read(plain, "anthropic").shape == "anthropic"


@pytest.mark.parametrize("messages", [CHAT, RESPONSES, ANTHROPIC, CORPUS_STYLE])
def test_round_trip_gives_the_same_list(messages: list[dict[str, Any]]) -> None:
    """detect -> read -> write gives back the same list, the same objects, extra fields included."""
    before = copy.deepcopy(messages)
    written = write(read(messages))
    assert written == before
    assert all(a is b for a, b in zip(written, messages, strict=True))


def test_chat_parallel_calls_pair_by_id_whatever_the_order() -> None:
    """Parallel calls pair with results by id, even when results come back in another order."""
    transcript = read(CHAT)
    first, second = transcript.messages[2].calls
    assert first.arguments == {"order_id": "#W1000001"}
    assert first.result is not None
    assert first.result.index == 4
    assert second.result is not None
    assert second.result.index == 3
    assert first.result.data == {"order_id": "W1000001"}
    assert first.result.name == "get_order"
    assert transcript.messages[5].text == "Both are on their way."


def test_responses_items_read_as_calls_results_and_messages() -> None:
    """function_call and function_call_output items pair by call_id; other items stay opaque."""
    transcript = read(RESPONSES)
    roles = [m.role for m in transcript.messages]
    assert roles == [
        "system",
        "user",
        "assistant",
        "assistant",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    call = transcript.messages[3].calls[0]
    assert (call.id, call.name, call.arguments) == (
        "call_1",
        "get_order",
        {"order_id": "#W1000001"},
    )
    assert call.result is not None
    assert call.result.data == {"order_id": "W1000001"}
    assert transcript.messages[6].results[0].data is None
    assert transcript.messages[1].text == "Where is #W1000001?"


def test_anthropic_blocks_read_as_calls_and_results_with_error_flag() -> None:
    """tool_use and tool_result blocks pair by id; is_error marks a failed result."""
    transcript = read(ANTHROPIC)
    assistant, results = transcript.messages[1], transcript.messages[2]
    assert assistant.text == "Let me look."
    assert len(assistant.calls) == 2
    assert [r.error for r in results.results] == [False, True]
    assert results.results[1].text == "no user"
    assert not results.starts_turn  # tool results in a user message do not start a turn
    assert [list(t) for t in transcript.turns()] == [[0, 1, 2, 3]]


def test_anthropic_system_may_lead_the_list() -> None:
    """An Anthropic list may carry the system prompt as a leading message."""
    messages = [{"role": "system", "content": "Be brief."}, *ANTHROPIC]
    transcript = read(messages)
    assert transcript.shape == "anthropic"
    assert transcript.messages[0].role == "system"
    assert write(transcript) == messages


def test_corpus_style_keeps_parsed_result_and_error() -> None:
    """The corpus's parsed `result` is the result's data; its `error` flag is read."""
    transcript = read(CORPUS_STYLE)
    first = transcript.messages[3].results[0]
    assert first.data == {"reservations": ["ZFA04Y"]}
    assert not first.error
    second = transcript.messages[5].results[0]
    assert second.error
    assert second.data is None


def test_a_results_value_is_its_json_else_its_text() -> None:
    """Result.value (what a record harvests) is the parsed JSON, or the text when not JSON."""
    transcript = read(RESPONSES)
    parsed, plain = (m.results[0] for m in transcript.messages[5:7])
    assert parsed.value == {"order_id": "W1000001"}
    assert plain.value == "no user"


def test_a_reused_call_id_answers_the_latest_open_call() -> None:
    """A call id used again after its result pairs with the new call, not the old one."""
    transcript = read(CORPUS_STYLE)
    old, new = transcript.calls()
    assert old.result is not None
    assert old.result.index == 3
    assert new.result is not None
    assert new.result.index == 5


def test_turns_start_at_user_messages_and_a_preamble_is_a_turn() -> None:
    """A turn is a user message and what follows; messages before the first user form one."""
    messages = [
        {"role": "system", "content": "s"},
        {"role": "assistant", "content": "Welcome!"},
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ]
    assert [list(t) for t in read(messages).turns(1)] == [[1], [2, 3], [4]]


_CALL = {"id": "c1", "type": "function", "function": {"name": "fetch", "arguments": "{}"}}


@pytest.mark.parametrize(
    "messages",
    [
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": None, "tool_calls": [_CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
            {"role": "user", "content": "the tool's page"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
        ],
        [
            {"type": "message", "role": "user", "content": "a"},
            {"type": "function_call", "call_id": "c1", "name": "fetch", "arguments": "{}"},
            {"type": "message", "role": "user", "content": "the tool's page"},
            {"type": "function_call_output", "call_id": "c1", "output": "r"},
            {"type": "message", "role": "assistant", "content": "b"},
            {"type": "message", "role": "user", "content": "c"},
        ],
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "f"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1"}]},
            {"role": "user", "content": [{"type": "text", "text": "the tool's page"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "b"}]},
            {"role": "user", "content": "c"},
        ],
    ],
    ids=["openai_chat", "openai_responses", "anthropic"],
)
def test_a_user_message_sent_with_tool_results_is_not_the_users_words(messages: list[Any]) -> None:
    """A user message with no assistant message between it and a tool result is tool content.

    It still bounds a turn for the cut, as it always did: only what is observed changes.
    """
    transcript = read(messages)
    (content,) = [m for m in transcript.messages if m.text == "the tool's page"]
    assert content.with_results and not content.user_words
    typed = [m.user_words for m in transcript.messages if m.role == "user" and not m.results]
    assert typed == [True, False, True]


def test_a_result_put_in_for_an_unanswered_call_makes_no_user_message_tool_content() -> None:
    """The user's next message after a call that never got its result still starts a turn."""
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": None, "tool_calls": [_CALL]},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "d"},
    ]
    transcript = read(messages)
    assert [m.role for m in transcript.messages] == [
        "user",
        "assistant",
        "tool",
        "user",
        "assistant",
    ]
    assert transcript.messages[3].user_words


def test_arguments_that_are_not_json_stay_as_written() -> None:
    """Arguments given as text that is not a JSON object are kept as written."""
    messages = copy.deepcopy(CHAT)
    messages[2]["tool_calls"][0]["function"]["arguments"] = "not json"
    assert read(messages).messages[2].calls[0].arguments == "not json"


# -- malformed transcripts ------------------------------------------------------------------


def test_a_result_with_no_call_is_an_error_naming_its_index() -> None:
    """A tool result that answers no open call raises TranscriptError with its index."""
    messages = [CHAT[0], CHAT[1], CHAT[3]]
    with pytest.raises(TranscriptError, match="call_2") as caught:
        read(messages)
    assert caught.value.index == 2


def test_a_duplicated_open_call_id_is_an_error_naming_its_index() -> None:
    """Two open calls with one id cannot be told apart: TranscriptError at the second call."""
    messages = copy.deepcopy(CHAT)
    messages[2]["tool_calls"][1]["id"] = "call_1"
    with pytest.raises(TranscriptError, match="used again") as caught:
        read(messages)
    assert caught.value.index == 2


def test_an_unknown_role_is_an_error_naming_its_index() -> None:
    """A role none of the shapes knows raises TranscriptError with its index."""
    messages = [*CHAT[:2], {"role": "narrator", "content": "meanwhile"}]
    with pytest.raises(TranscriptError, match="narrator") as caught:
        read(messages)
    assert caught.value.index == 2


@pytest.mark.parametrize("shape", SHAPES)
def test_a_role_that_is_not_text_is_an_unknown_role(shape: Shape) -> None:
    """A list or a dict as a role (unhashable) is an unknown role, not a TypeError."""
    roles: list[Any] = [[], {"a": 1}]
    for role in roles:
        messages = [text_message(shape, "user", "hi"), {"type": "message", "role": role}]
        with pytest.raises(TranscriptError, match="unknown role") as caught:
            read(messages, shape)
        assert caught.value.index == 1


@pytest.mark.parametrize("content", [42, {"text": "hi"}, True])
def test_non_string_content_of_a_message_is_an_error(content: object) -> None:
    """Content that is neither text nor a list of parts raises TranscriptError."""
    with pytest.raises(TranscriptError, match="content") as caught:
        read([{"role": "user", "content": content}])
    assert caught.value.index == 0


def test_non_string_content_of_a_tool_result_is_read_as_json_and_reported() -> None:
    """A tool result whose content is data is read as JSON, kept raw, and listed as a repair."""
    messages = copy.deepcopy(CHAT)
    messages[3]["content"] = {"order_id": "W1000002"}
    transcript = read(messages)
    result = transcript.messages[3].results[0]
    assert result.data == {"order_id": "W1000002"}
    assert "W1000002" in result.text
    assert [(r.problem, r.index) for r in transcript.repairs] == [("non_string_content", 3)]
    assert write(transcript) == messages


def test_a_tool_result_holding_a_list_of_data_is_repaired_like_other_data() -> None:
    """A list of data as tool content: a parsed `result` still wins, and no item makes it raise."""
    messages = copy.deepcopy(CHAT)
    messages[3]["content"] = [{"order_id": "W1000002"}]
    messages[3]["result"] = {"order_id": "W1000002", "status": "shipped"}
    odd = object()
    messages[4]["content"] = [1, odd]
    transcript = read(messages)
    given, unwritable = (m.results[0] for m in transcript.messages[3:5])
    assert given.data == {"order_id": "W1000002", "status": "shipped"}
    assert given.text == '[{"order_id": "W1000002"}]'
    assert unwritable.data == [1, odd]
    assert unwritable.text == str([1, odd])
    assert [(r.problem, r.index, r.detail) for r in transcript.repairs] == [
        ("non_string_content", 3, "a list of data read as JSON"),
        ("non_string_content", 4, "a list of data read as JSON"),
    ]
    assert write(transcript) == messages


def test_a_call_with_no_result_mid_conversation_gets_an_error_result() -> None:
    """An unanswered call followed by more talk is repaired with an error result, reported."""
    messages = [CHAT[0], CHAT[1], CHAT[2], CHAT[4], CHAT[5], CHAT[6]]  # call_2 never answered
    transcript = read(messages)
    assert [(r.problem, r.index) for r in transcript.repairs] == [("unanswered_call", 2)]
    written = write(transcript)
    assert len(written) == len(messages) + 1
    assert written[4] == result_message("openai_chat", "call_2", written[4]["content"], error=True)
    for call in transcript.calls():
        assert call.result is not None
    assert read(written).repairs == []


@pytest.mark.parametrize("shape", ["openai_chat", "openai_responses", "anthropic"])
def test_an_inserted_error_result_reads_back_as_an_error(shape: Any) -> None:
    """The result put in for an unanswered call is still a failure once written and read again."""
    call = {
        "openai_chat": CHAT[2],
        "openai_responses": RESPONSES[3],
        "anthropic": {"role": "assistant", "content": [ANTHROPIC[1]["content"][1]]},
    }[shape]
    messages = [
        text_message(shape, "user", "Where is it?"),
        call,
        text_message(shape, "assistant", "One moment."),
        text_message(shape, "user", "Well?"),
    ]
    repaired = read(messages, shape)
    assert {r.problem for r in repaired.repairs} == {"unanswered_call"}
    again = read(write(repaired), shape)
    assert again.repairs == []
    calls = again.calls()
    assert calls
    assert all(call.result is not None and call.result.error for call in calls)


def test_pending_calls_at_the_end_are_left_alone() -> None:
    """Calls whose results have not arrived yet (nothing said after them) are not repaired."""
    transcript = read(CHAT[:3])
    assert transcript.repairs == []
    assert all(call.result is None for call in transcript.calls())


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        ([["role", "user"]], "dict"),
        ([{"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}], "no id"),
        ([{"type": "function_call", "name": "f", "call_id": ""}], "no id"),
        ([{"role": "assistant", "content": [{"type": "tool_use", "id": "t"}]}], "tool name"),
    ],
)
def test_shapeless_messages_are_errors(messages: list[Any], match: str) -> None:
    """A message that is not a dict, or a call without id or name, is a TranscriptError."""
    with pytest.raises(TranscriptError, match=match) as caught:
        read(messages)
    assert caught.value.index == 0


def test_a_string_is_not_a_message_list() -> None:
    """Passing text instead of a list says what to pass."""
    with pytest.raises(TranscriptError, match="list of messages"):
        read("hello")


# -- rewriting text -------------------------------------------------------------------------


def test_map_text_rewrites_content_arguments_and_results_but_not_structure() -> None:
    """map_text changes content, arguments and result data (keys too), never ids or roles."""
    messages = copy.deepcopy(CORPUS_STYLE)
    messages[3]["result"] = {"payment_methods": {"c1": {"id": "c1"}}}
    kept = copy.deepcopy(messages)
    mapped = [map_text(m, lambda s: s.replace("c1", "X").upper()) for m in messages]
    assert mapped[2]["tool_calls"][0]["id"] == "c1"
    assert mapped[2]["tool_calls"][0]["name"] == "get_user_details"
    assert mapped[2]["tool_calls"][0]["arguments"] == {"USER_ID": "MIA_LI_3668"}
    assert mapped[3]["tool_call_id"] == "c1"
    assert mapped[3]["role"] == "tool"
    assert mapped[3]["result"] == {"PAYMENT_METHODS": {"X": {"ID": "X"}}}
    assert mapped[1]["content"] == "MY ID IS MIA_LI_3668"
    assert messages == kept  # the input is not changed
    data = {"role": "tool", "tool_call_id": "c1", "content": [{"id": "c1", "name": "n"}]}
    assert map_text(data, str.upper)["content"] == [{"ID": "C1", "NAME": "N"}]  # data, not blocks
    anthropic = map_text(ANTHROPIC[2], str.upper)
    assert anthropic["content"][0]["tool_use_id"] == "toolu_1"
    assert anthropic["content"][1]["content"][0]["text"] == "NO USER"


def test_a_result_is_json_only_when_all_of_it_is() -> None:
    """A tool result is parsed when it is one JSON value (white space around allowed), else text."""
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [_call("a"), _call("b"), _call("c")]},
        {"role": "tool", "tool_call_id": "a", "content": ' {"x": [1, 2]}\n'},
        {"role": "tool", "tool_call_id": "b", "content": '{"x": 1} and more'},
        {"role": "tool", "tool_call_id": "c", "content": "[1, 2"},
    ]
    results = [m.results[0] for m in read(messages).messages[2:]]
    assert [r.data for r in results] == [{"x": [1, 2]}, None, None]
    assert results[1].text == '{"x": 1} and more'


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def test_strings_lists_every_string_keys_included() -> None:
    """strings() yields every string of a message, dict keys included."""
    assert strings({"a": ["b", {"c": 1}], "d": "e"}) == ["a", "b", "c", "d", "e"]


def test_strings_reads_mappings_of_any_kind_at_any_depth() -> None:
    """strings() looks inside mappings that are not dicts, nested ones too."""
    inner = MappingProxyType({"k": "v"})
    assert strings({"a": inner, "b": [inner]}) == ["a", "k", "v", "b", "k", "v"]


@pytest.mark.parametrize("message", [*CHAT, *RESPONSES, *ANTHROPIC])
def test_mapped_and_unmapped_strings_are_every_string_once(message: Any) -> None:
    """The strings map_text maps and those it leaves alone are strings(), each once."""
    mapped: list[str] = []
    left: list[str] = []

    def keep(text: str) -> str:
        mapped.append(text)
        return text

    assert map_text(message, keep, left) == map_text(message, keep)
    assert Counter(mapped[: len(mapped) // 2] + left) == Counter(strings(message))


@pytest.mark.parametrize("shape", ["openai_chat", "openai_responses", "anthropic"])
def test_new_messages_are_readable_in_their_shape(shape: Any) -> None:
    """Text and result messages built for a shape read back in that shape."""
    call = {
        "openai_chat": CHAT[2],
        "openai_responses": RESPONSES[3],
        "anthropic": {"role": "assistant", "content": [ANTHROPIC[1]["content"][1]]},
    }[shape]
    call_id = read([call], shape).calls()[0].id
    made = [
        text_message(shape, "user", "hi"),
        call,
        result_message(shape, call_id, "gone", error=True),
    ]
    transcript = read(made, shape)
    assert transcript.messages[0].text == "hi"
    assert transcript.calls()[0].result is not None
    assert default_role(shape) == ("user" if shape == "anthropic" else "system")


# -- refusals read back ---------------------------------------------------------------------


def _refusal() -> Rejection:
    guard = Guard("reprompt", logger=SilentLogger())
    guard.add_kind("order", pattern=r"W\d{7}")
    guard.declare("cancel_order", ids={"order_id": "order"})
    with guard.session("s"):
        return Rejection(guard.check("cancel_order", {"order_id": "W1234567"}))


def _call_in(shape: Shape) -> dict[str, Any]:
    return {
        "openai_chat": CHAT[2],
        "openai_responses": RESPONSES[3],
        "anthropic": {"role": "assistant", "content": [ANTHROPIC[1]["content"][1]]},
    }[shape]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("form", ["text", "json", "marked"])
def test_a_refusal_sent_back_as_a_result_reads_as_a_failure(shape: Shape, form: str) -> None:
    """A refusal's text, its to_dict() JSON, or result_message() is a failed result in any shape."""
    rejection = _refusal()
    call = _call_in(shape)
    call_id = read([call], shape).calls()[0].id
    if form == "marked":
        back = rejection.result_message(shape, call_id)
    else:
        text = str(rejection) if form == "text" else json.dumps(rejection.to_dict())
        back = result_message(shape, call_id, text, error=False)  # sent back unmarked
    transcript = read([text_message(shape, "user", "Cancel it."), call, back], shape)
    (result,) = transcript.messages[2].results
    assert result.error
    assert result.call is transcript.calls()[0]
    assert str(rejection) in result.text or form == "json"


def test_rejection_result_message_is_marked_in_each_shapes_own_way() -> None:
    """Anthropic's is_error, Responses' status; chat carries the refusal's text."""
    rejection = _refusal()
    anthropic = rejection.result_message("anthropic", "t1")
    assert anthropic["content"][0]["is_error"] is True
    assert rejection.result_message("openai_responses", "t1")["status"] == "incomplete"
    chat = rejection.result_message("openai_chat", "t1")
    assert chat == {"role": "tool", "tool_call_id": "t1", "content": str(rejection)}
    assert rejection.to_dict()["error"] == "identifier_refused"


@pytest.mark.parametrize("shape", SHAPES)
def test_a_failure_guardrail_wrote_reads_as_a_failure_even_unmarked(shape: Shape) -> None:
    """Text beginning "guardrail: " is a failed result in any shape, whatever its flags say."""
    call = _call_in(shape)
    call_id = read([call], shape).calls()[0].id
    text = failure_text("find_order failed: LookupError: no such order W1234567")
    back = result_message(shape, call_id, text, error=False)  # a runtime dropped the flag
    transcript = read([text_message(shape, "user", "Find it."), call, back], shape)
    (result,) = transcript.messages[2].results
    assert result.error
    assert result.text == text


@pytest.mark.parametrize(
    ("status", "error"),
    [(None, False), ("completed", False), ("in_progress", True), ("incomplete", True), ("x", True)],
)
def test_a_responses_output_is_a_success_only_when_completed_or_unmarked(
    status: str | None, error: bool
) -> None:
    """A function_call_output shows a success with no status or "completed", not otherwise."""
    call = _call_in("openai_responses")
    call_id = read([call], "openai_responses").calls()[0].id
    back: dict[str, Any] = {"type": "function_call_output", "call_id": call_id, "output": "{}"}
    if status is not None:
        back["status"] = status
    (result,) = read([call, back], "openai_responses").messages[1].results
    assert result.error is error


def test_a_result_that_only_mentions_a_refusal_is_not_one() -> None:
    """Text quoting the refusal prefix later on, or JSON with another error, is a plain result."""
    quoted = "The agent said: guardrail refused the call to x"
    other = json.dumps({"error": "not_found", "message": "guardrail refused the call to x"})
    for text in (quoted, other):
        transcript = read([CHAT[2], result_message("openai_chat", "call_1", text, error=False)])
        assert not transcript.messages[1].results[0].error


# -- the compacted message ------------------------------------------------------------------


def test_a_user_message_that_merely_starts_with_the_header_does_not_make_a_list_anthropic() -> None:
    """Only a user message in the sealed form marks a list with no tool traffic as Anthropic."""
    typed = f"{BLOCK_HEADER}\norder  W1234567\n\nSUMMARY"
    sealed = f"{BLOCK_HEADER}\norder  W1234567\n(seal {'0' * 32})\n\nSUMMARY"
    tail = [{"role": "assistant", "content": "ok"}]
    assert detect([{"role": "user", "content": typed}, *tail]) == "openai_chat"
    assert detect([{"role": "user", "content": sealed}, *tail]) == "anthropic"


# -- content that loops or goes too deep -----------------------------------------------------


def deep(levels: int) -> Any:
    """A value nested ``levels`` containers deep."""
    value: Any = "W1000001"
    for _ in range(levels):
        value = {"inner": [value]}
    return value


def test_reading_content_nested_absurdly_deep_is_an_error_naming_its_message() -> None:
    """A result nested thousands deep (its JSON text cannot be written) is a TranscriptError."""
    messages = [*CHAT[:4], {"role": "tool", "tool_call_id": "call_1", "content": [deep(5000)]}]
    with pytest.raises(TranscriptError, match=f"more than {MAX_DEPTH}") as caught:
        read(messages)
    assert caught.value.index == 4


def test_nesting_fault_finds_a_loop_before_depth_and_walks_shared_parts_once() -> None:
    """The error path names the message that loops; a value shared many times is no loop."""
    looped: dict[str, Any] = {"orders": ["W1000001"]}
    looped["self"] = [looped]
    shared: Any = ["W1000001"]
    for _ in range(60):  # 2**60 paths, 60 distinct lists
        shared = [shared, shared]
    assert nesting_fault([CHAT[0], {"content": shared}]) is None
    fault = nesting_fault([CHAT[0], {"content": deep(MAX_DEPTH + 5)}, {"content": looped}])
    assert fault is not None
    assert (fault.index, "contains itself" in str(fault)) == (2, True)
    fault = nesting_fault([{"content": deep(MAX_DEPTH + 5)}, {"content": deep(MAX_DEPTH + 9)}])
    assert fault is not None
    assert fault.index == 1  # the deepest


# -- round trips over the three shapes ------------------------------------------------------

TEXT = st.text(max_size=12)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=12,
)
#: A tool result's content: text, JSON text, or (for odd lists) anything at all.
RESULTS = TEXT | JSON.map(json.dumps)
ODD = (
    JSON
    | st.binary(max_size=8)
    | st.frozensets(st.integers(0, 9), max_size=3)
    | st.tuples(TEXT, JSON)
    | st.floats()
    | st.integers(0, 3).map(lambda n: deep(MAX_DEPTH * n))
)


def _say(shape: Shape, role: str, text: str, parts: bool) -> dict[str, Any]:
    if not parts:
        return text_message(shape, role, text)
    if shape == "openai_responses":
        kind = "input_text" if role == "user" else "output_text"
        return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}
    return {"role": role, "content": [{"type": "text", "text": text}]}


def _exchange(
    shape: Shape, calls: list[tuple[str, str, dict[str, Any], Any]], order: list[int]
) -> list[dict[str, Any]]:
    """Tool calls and their results (in ``order``) as ``shape`` writes them."""
    if shape == "openai_chat":
        made = [
            {"id": c, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for c, n, a, _ in calls
        ]
        answers = [
            {"role": "tool", "tool_call_id": calls[i][0], "content": calls[i][3]} for i in order
        ]
        return [{"role": "assistant", "content": None, "tool_calls": made}, *answers]
    if shape == "openai_responses":
        items = [
            {"type": "function_call", "call_id": c, "name": n, "arguments": json.dumps(a)}
            for c, n, a, _ in calls
        ]
        outputs = [
            {"type": "function_call_output", "call_id": calls[i][0], "output": calls[i][3]}
            for i in order
        ]
        return [*items, *outputs]
    uses = [{"type": "tool_use", "id": c, "name": n, "input": a} for c, n, a, _ in calls]
    answers = [
        {"type": "tool_result", "tool_use_id": calls[i][0], "content": calls[i][3]} for i in order
    ]
    return [{"role": "assistant", "content": uses}, {"role": "user", "content": answers}]


@st.composite
def shaped_lists(
    draw: st.DrawFn, results: st.SearchStrategy[Any] = RESULTS
) -> tuple[Shape, list[dict[str, Any]]]:
    """Random conversations in one of the three shapes: text or parts, calls, extra fields."""
    shape: Shape = draw(st.sampled_from(SHAPES))
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(TEXT)})
    serial = 0
    for _ in range(draw(st.integers(0, 4))):
        messages.append(_say(shape, "user", draw(TEXT), draw(st.booleans())))
        if draw(st.booleans()):
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                serial += 1
                name = draw(st.sampled_from(["get_order", "cancel_order", "note"]))
                arguments = draw(st.dictionaries(TEXT, JSON, max_size=3))
                calls.append((f"c{serial}", name, arguments, draw(results)))
            messages += _exchange(shape, calls, draw(st.permutations(range(len(calls)))))
        messages.append(_say(shape, "assistant", draw(TEXT), draw(st.booleans())))
    for message in messages:
        if draw(st.integers(0, 4)) == 0:
            message["metadata"] = draw(JSON)  # provider fields ride along untouched
    return shape, messages


@settings(max_examples=150, deadline=None)
@given(shaped_lists())
def test_read_then_write_gives_the_same_list_in_every_shape(
    drawn: tuple[Shape, list[dict[str, Any]]],
) -> None:
    """read then write returns the very list; map_text with the identity returns equal messages."""
    shape, messages = drawn
    before = copy.deepcopy(messages)
    transcript = read(messages, shape)
    assert transcript.shape == shape
    assert transcript.repairs == []
    written = write(transcript)
    assert written == before
    assert all(a is b for a, b in zip(written, messages, strict=True))
    assert [map_text(message, lambda text: text) for message in messages] == before
    assert all(call.result is not None for call in transcript.calls())


# -- the corpus -----------------------------------------------------------------------------


@needs_corpus
def test_every_corpus_trace_round_trips_and_pairs() -> None:
    """All 200 recorded conversations read, pair every call with its result and write back."""
    reused = 0
    for messages in corpus_conversations():
        transcript = read(messages)
        assert transcript.shape == "openai_chat"
        assert transcript.repairs == []
        assert write(transcript) == messages
        calls = transcript.calls()
        assert all(call.result is not None for call in calls)
        reused += sum(n - 1 for n in Counter(call.id for call in calls).values())
    assert reused == 73


class _Text(str):
    """A subclass of str, as some SDKs' message types hold."""


#: Content as it comes: JSON values, and in them odd things (a subclass of str, a tuple, a
#: frozenset, bytes, a mapping that is no dict, a key that is no string).
_ODD_LEAVES = (
    SCALARS | TEXT.map(_Text) | st.binary(max_size=4) | st.frozensets(st.integers(0, 9), max_size=2)
)
_ODD_CONTENT = st.recursive(
    _ODD_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=2).map(tuple)
        | st.dictionaries(TEXT | TEXT.map(_Text) | st.integers(0, 3), inner, max_size=3)
        | st.dictionaries(TEXT, inner, max_size=2).map(MappingProxyType)
        | st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "tool"]), "content": inner},
            optional={"name": inner, "tool_calls": inner, "type": TEXT, "result": inner},
        )
    ),
    max_leaves=14,
)


# -- the plain reading the one walk must agree with: each string mapped where it stands ---------

_STRUCTURE = frozenset(
    {"role", "type", "id", "call_id", "tool_call_id", "tool_use_id", "name", "status", "is_error"}
)
_CONTAINERS = frozenset({"tool_calls", "function", "content"})
_SHAPED = frozenset(
    {"role", "type", "function", "arguments", "input", "tool_call_id", "call_id", "tool_use_id"}
)


def _plain_map(value: Any, fn: Callable[[str], str], left: list[str]) -> Any:
    """A message mapped by ``fn`` string by string, structure left alone and put in ``left``."""
    if isinstance(value, Mapping):
        if _SHAPED.isdisjoint(value):
            return _plain_data(value, fn)
        out: dict[Any, Any] = {}
        left.extend(key for key in value if isinstance(key, str))
        for key, item in value.items():
            if type(item) is str:
                if key in _STRUCTURE:
                    out[key] = item
                    left.append(item)
                else:
                    out[key] = fn(item)
            elif key in _STRUCTURE and not isinstance(item, (Mapping, list)):
                out[key] = item
                left.extend(strings(item))
            elif key in _CONTAINERS and isinstance(item, (Mapping, list)):
                out[key] = _plain_map(item, fn, left)
            else:
                out[key] = _plain_data(item, fn)
        return out
    if isinstance(value, list):
        return [_plain_map(item, fn, left) for item in value]
    return _plain_data(value, fn)


def _plain_data(value: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, Mapping):
        return {
            fn(k) if isinstance(k, str) else k: fn(v) if type(v) is str else _plain_data(v, fn)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [fn(item) if type(item) is str else _plain_data(item, fn) for item in value]
    return value


def _twin_mapped(message: Any) -> None:
    """mask_content gives what the plain reading and strings give, masking each string once."""
    seen: list[str] = []

    def fn(text: str) -> str:
        seen.append(text)
        return f"<{text.upper()}>"

    left_before: list[str] = []
    before = _plain_map(message, fn, left_before)
    memo: dict[str, str] = {}
    misses: list[str] = []
    odd: list[str] = []
    left: list[str] = []
    given_: list[str] = []
    every: list[str] = []

    def miss(text: str) -> str:
        misses.append(text)
        memo[text] = f"<{text.upper()}>"
        return memo[text]

    def odd_fn(text: str) -> str:
        odd.append(text)
        return f"<{text.upper()}>"

    after = mask_content(message, memo, miss, odd_fn, left, given_, every)
    assert repr(after) == repr(before)  # key order too
    assert left == left_before
    assert every == strings(message)
    assert given_ == [text for text in seen if type(text) is str]
    assert odd == [text for text in seen if type(text) is not str]
    assert misses == list(dict.fromkeys(given_))


@settings(max_examples=300, deadline=None)
@given(_ODD_CONTENT)
def test_mask_content_is_map_text_and_strings_in_one_walk(message: Any) -> None:
    """The one walk compaction masks with gives the copy, left and strings of the two walks."""
    _twin_mapped(message)


@settings(max_examples=100, deadline=None)
@given(shaped_lists())
def test_mask_content_of_conversations_is_map_text_and_strings(shaped: Any) -> None:
    """The same for messages of every shape, calls and results included."""
    for message in shaped[1]:
        _twin_mapped(message)


@pytest.mark.parametrize("message", [*CHAT, *RESPONSES, *ANTHROPIC])
def test_mask_content_of_each_shape_is_map_text_and_strings(message: Any) -> None:
    """The same for the messages of each shape written out here."""
    _twin_mapped(message)
