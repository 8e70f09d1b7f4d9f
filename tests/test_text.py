"""Text helpers: values cut short for people and models, whole-token search in one pass."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrail._text import has_token, shorten


def test_short_values_are_shown_whole() -> None:
    """Up to the limit a value is itself (quoted as JSON when asked)."""
    assert shorten("W8855135") == "W8855135"
    assert shorten("W8855135", quote=True) == '"W8855135"'
    assert shorten("x" * 200) == "x" * 200


def test_long_values_are_cut_with_an_ellipsis_and_their_length() -> None:
    """Past the limit: the first characters, an ellipsis and the full length."""
    value = "W885" * 8000
    assert shorten(value) == f"{value[:200]}… (32,000 characters)"
    assert shorten(value, quote=True) == f'"{value[:200]}…" (32,000 characters)'
    assert shorten("abcdef", 3) == "abc… (6 characters)"


@pytest.mark.parametrize(
    ("text", "value", "found"),
    [
        ("I stay at the Grand Hyatt, room 12.", "Grand Hyatt", True),
        ("I stay at the Grand Hyatt, room 12.", "Grand Hy", False),
        ("order #W1 please", "#W1", True),
        ("order x#W1 please", "#W1", False),
        ("W1", "W1", True),
        ("W12", "W1", False),
        ("a_W1", "W1", False),
        ("anything", "", False),
        ("ab" * 1000 + " ab", "ab", True),  # whole only after 1,000 occurrences inside a word
        ("ab" * 1000, "ab", False),
        ("a " * 1000 + "ab", "a a ab", True),
    ],
)
def test_has_token(text: str, value: str, found: bool) -> None:
    """A value counts only as a whole token: no word character touches either end."""
    assert has_token(text, value) is found


def test_has_token_says_no_when_every_mark_is_taken() -> None:
    """A text holding every mark character (on purpose) is searched no further: no."""
    marks = "\x00\x01\x02\ue000\ue001\U000f0000"
    assert not has_token(marks + "ab" * 100 + " ab", "ab")


def _naive(text: str, value: str) -> bool:
    """The definition: some occurrence with no word character on either side."""
    start = text.find(value) if value else -1
    while start >= 0:
        end = start + len(value)
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return True
        start = text.find(value, start + 1)
    return False


@settings(max_examples=500, deadline=None, derandomize=True)
@given(
    st.text(alphabet="ab _#-é\x00", max_size=40),
    st.text(alphabet="ab _#-é", min_size=1, max_size=6),
)
def test_has_token_agrees_with_its_definition(text: str, value: str) -> None:
    """Property: the one-pass search finds exactly the whole-token occurrences."""
    padded = ("x" + value) * 9 + " " + text  # nine occurrences that are not whole come first
    assert has_token(text, value) == _naive(text, value)
    assert has_token(padded, value) == _naive(padded, value)
