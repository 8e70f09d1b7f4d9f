"""The failures runtimes write in place of a tool's result: their flags, and the SDK's texts."""

from __future__ import annotations

from typing import Any

import pytest

from guardrail._transcript.failures import flagged, runtime_failure


@pytest.mark.parametrize(
    "text",
    [
        "An error occurred while running the tool. Please try again.",
        "  An error occurred while running the tool. Please try again.\n",
        "An error occurred while running the tool. Please try again. Error: no order W1",
        (
            "An error occurred while parsing tool arguments. Please try again with valid JSON. "
            "Error: Expecting value: line 1 column 1 (char 0)"
        ),
        "Tool 'find_order' timed out after 5 seconds.",
        "Tool 'find_order' timed out after 0.01 seconds.",
        "Tool 'find_order' timed out after 1e-05 seconds.",
        "Tool 'lookup_tool' not found.",
        "Tool execution was not approved.",
        "Multiple handoffs detected, ignoring this one.",
    ],
)
def test_the_agents_sdks_failure_texts_are_failures(text: str) -> None:
    """Each text the OpenAI Agents SDK writes in place of a result is read as a failure."""
    assert runtime_failure(text)


@pytest.mark.parametrize(
    "text",
    [
        "An error occurred while running the nightly report: order W1 was late.",
        "An error occurred while running the tool. Please try again later with order W1.",
        "Tool 'find_order' timed out after 5 seconds, then found W1.",
        "Tool 'find_order' not found. Try W1.",
        "Tool 'it's' not found.",
        "Tool execution was not approved. W1 was approved instead.",
        "Error executing tool find_order: W1",
        "",
    ],
)
def test_a_text_that_only_begins_like_a_failure_is_not_one(text: str) -> None:
    """A runtime's sentence counts only whole: a success that begins alike keeps its ids."""
    assert not runtime_failure(text)


@pytest.mark.parametrize(
    "fields",
    [
        {"error": True},
        {"error": "the lookup failed"},
        {"is_error": True},
        {"isError": True},
        {"status": "error"},
    ],
)
def test_a_flag_any_runtime_sets_marks_a_failure(fields: dict[str, Any]) -> None:
    """error, is_error, isError and status "error" each mark a result failed."""
    assert flagged({"role": "tool", "content": "W1", **fields})


@pytest.mark.parametrize(
    "fields",
    [{}, {"error": False}, {"is_error": False}, {"isError": False}, {"status": "completed"}],
)
def test_a_result_without_a_set_flag_is_not_flagged(fields: dict[str, Any]) -> None:
    """A flag that is absent or false marks nothing."""
    assert not flagged({"role": "tool", "content": "W1", **fields})
