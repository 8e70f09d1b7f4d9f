"""Sealed tool results: the seal line, what it binds, and the guard's seal_result."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from guardrail import Guard, GuardrailUsageError
from guardrail._provenance.seal import canonical_arguments, seal_result, seal_verifies
from guardrail._transcript.messages import SHAPES, Shape, read, result_message
from guardrail._transcript.result_text import split_seal
from guardrail.ledger._ledger import state_of

from .conftest import shop_guard

SECRET = b"the server's own secret"


def _ledger(session: str = "conv-a") -> Any:
    return state_of(Guard(secret=SECRET).new_ledger(session))


def _fields(**changes: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "call_id": "c1",
        "tool": "get_order",
        "arguments": {"order_id": "W1000001"},
        "content": '{"order_id": "W1000001"}',
    }
    fields.update(changes)
    return fields


def test_a_sealed_text_splits_back_into_the_text_and_its_seal() -> None:
    """The seal is one last line; taking it off gives the text back exactly."""
    ledger = _ledger()
    fields = _fields()
    text, seal = split_seal(seal_result(fields["content"], ledger, **_without(fields, "content")))
    assert text == fields["content"]
    assert seal is not None and len(seal) == 32
    assert seal_verifies(seal, ledger, **fields)


@pytest.mark.parametrize(
    "text", ["", "plain", "(result seal 0123)", "x\n(result seal " + "g" * 32 + ")", "ends (x)"]
)
def test_a_text_without_a_seal_line_is_left_whole(text: str) -> None:
    """Only a last line of the exact form is a seal; anything else is the result's text."""
    assert split_seal(text) == (text, None)


@given(
    st.sampled_from(["session", "call_id", "tool", "arguments", "content"]),
    st.text(min_size=1, max_size=8),
)
def test_any_change_to_what_a_seal_binds_fails_it(field: str, extra: str) -> None:
    """Another session, call id, tool, arguments or text: the seal no longer verifies."""
    ledger = _ledger()
    fields = _fields()
    seal = split_seal(seal_result(fields["content"], ledger, **_without(fields, "content")))[1]
    if field == "session":
        ledger = _ledger("conv-a" + extra)
    elif field == "arguments":
        fields["arguments"] = {"order_id": "W1000001" + extra}
    else:
        fields[field] += extra
    assert not seal_verifies(seal, ledger, **fields)


def test_arguments_read_as_json_seal_alike_whatever_their_spacing() -> None:
    """JSON text of the arguments and the object it parses to are the same arguments."""
    given_as_text = '{ "b": 1,  "a": ["x"] }'
    assert canonical_arguments(given_as_text) == canonical_arguments({"a": ["x"], "b": 1})
    assert canonical_arguments("not json") != canonical_arguments('"not json"')


def _without(fields: dict[str, Any], name: str) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if key != name}


@pytest.mark.parametrize("shape", SHAPES)
def test_a_sealed_result_reads_as_its_text_and_value_with_the_seal_apart(shape: Shape) -> None:
    """Every shape's reader takes the seal line off before reading the result as JSON."""
    guard = shop_guard(secret=SECRET)
    text = guard.seal_result(
        "get_order",
        {"order_id": "W1000001"},
        '{"order_id": "W1000001"}',
        call_id="c1",
        session="s",
    )
    call: dict[str, Any]
    if shape == "anthropic":
        use = {"type": "tool_use", "id": "c1", "name": "get_order", "input": {}}
        call = {"role": "assistant", "content": [use]}
    elif shape == "openai_responses":
        call = {"type": "function_call", "call_id": "c1", "name": "get_order", "arguments": "{}"}
    else:
        function = {"name": "get_order", "arguments": "{}"}
        call = {"role": "assistant", "tool_calls": [{"id": "c1", "function": function}]}
    (result,) = (
        read([call, result_message(shape, "c1", text, error=False)], shape).messages[1].results
    )
    assert result.text == '{"order_id": "W1000001"}'
    assert result.data == {"order_id": "W1000001"}
    assert result.seal is not None and text.endswith(f"(result seal {result.seal})")


def test_seal_result_without_a_secret_gives_the_text_back() -> None:
    """A guard with no secret seals nothing: nothing would check the seal."""
    guard = shop_guard()
    assert not guard.seals_results
    assert guard.seal_result("get_order", "{}", "found", call_id="c1", session="s") == "found"


def test_seal_result_is_keyed_by_the_session_however_it_is_named() -> None:
    """session=, ledger= and the current session give the seal a rebuilt ledger verifies."""
    guard = shop_guard(secret=SECRET)
    assert guard.seals_results
    by_id = guard.seal_result("get_order", '{"order_id": "W1"}', "found", call_id="c1", session="s")
    by_ledger = guard.seal_result(
        "get_order", {"order_id": "W1"}, "found", call_id="c1", ledger=guard.new_ledger("s")
    )
    with guard.session("s"):
        current = guard.seal_result("get_order", {"order_id": "W1"}, "found", call_id="c1")
    assert by_id == by_ledger == current
    text, seal = split_seal(by_id)
    rebuilt = guard.new_ledger("s")
    assert seal_verifies(
        seal,
        state_of(rebuilt),
        call_id="c1",
        tool="get_order",
        arguments={"order_id": "W1"},
        content=text,
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"content": {"order_id": "W1"}}, "seals the text of a tool result"),
        ({"call_id": ""}, "needs the call_id"),
        ({"session": "s", "ledger": "given"}, "not both"),
        ({"session": ""}, "session id"),
    ],
)
def test_seal_result_says_what_is_wrong_with_its_arguments(
    options: dict[str, Any], message: str
) -> None:
    """Content that is not text, no call id, or two sessions at once: a usage error."""
    guard = shop_guard(secret=SECRET)
    arguments: dict[str, Any] = {"content": "found", "call_id": "c1", **options}
    if arguments.get("ledger") == "given":
        arguments["ledger"] = guard.new_ledger("s")
    content = arguments.pop("content")
    with pytest.raises(GuardrailUsageError, match=message):
        guard.seal_result("get_order", json.dumps({}), content, **arguments)
