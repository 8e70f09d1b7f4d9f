"""Chat-completions messages and tools in Anthropic's shape, as a request sends them."""

from __future__ import annotations

from typing import Any

import pytest

from guardrail._transcript.chat_to_anthropic import anthropic_messages


def test_anthropic_messages_start_with_the_user() -> None:
    """A compacted context of system messages only still gives the API a user message."""
    system, messages = anthropic_messages(
        [{"role": "system", "content": "a"}, {"role": "system", "content": "b"}]
    )
    assert system == "a\n\nb"
    assert messages == [{"role": "user", "content": [{"type": "text", "text": "(continue)"}]}]


@pytest.mark.parametrize("arguments", ["", "  ", "{oops", "[1]", None, ["a"]])
def test_arguments_that_are_no_object_become_an_empty_input(arguments: Any) -> None:
    """A tool_use block's input is an object: arguments that are none (or not JSON) give {}."""
    call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": arguments}}
    _, messages = anthropic_messages(
        [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": [call]}]
    )
    assert messages[1]["content"] == [{"type": "tool_use", "id": "c1", "name": "t", "input": {}}]
