"""Text helpers: values cut short for people and models, whole-token search in one pass."""

from __future__ import annotations

import json
import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import guardrail.replay._arguments
import guardrail.replay._lossy
import guardrail.replay._reference_agent
import guardrail.replay._run
from guardrail._data.text import (
    ARGUMENT_ELLIPSES,
    ELLIPSES,
    TOKEN,
    has_token,
    is_word_char,
    shorten,
)


def test_short_values_are_shown_whole() -> None:
    """Up to the limit a value is itself (quoted as JSON when asked)."""
    assert shorten("W8855135") == "W8855135"
    assert shorten("W8855135", quote=True) == '"W8855135"'
    assert shorten("x" * 200) == "x" * 200


@settings(max_examples=300)
@given(st.text(st.characters(codec=None, exclude_categories=())))
def test_a_quoted_value_is_what_json_dumps_gives(value: str) -> None:
    """Quoting (re-prompts quote values) is json.dumps with non-ASCII kept, for any text."""
    assert shorten(value, quote=True, limit=10_000) == json.dumps(value, ensure_ascii=False)
    for tricky in ['a"b\\c', "\x00\x1f\n\t", "\ud800", "\u2028\u0430", "\U0001f600"]:
        assert shorten(tricky, quote=True) == json.dumps(tricky, ensure_ascii=False)


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


def test_is_word_char_is_what_re_calls_a_word_character() -> None:
    """For every code point, is_word_char says what \\w in a regular expression says."""
    word = re.compile(r"\w")
    for point in range(sys.maxunicode + 1):
        char = chr(point)
        assert is_word_char(char) is (word.match(char) is not None), hex(point)


def test_a_token_of_prose_ends_at_spaces_quotes_brackets_and_list_punctuation() -> None:
    """TOKEN splits prose into the pieces the summary lint judges, one id each at most."""
    text = 'Refund "#W1234567", (cus_A1) [order_2]; see <a-b.c>, `x=y|z` ok.'
    assert TOKEN.findall(text) == [
        "Refund", "#W1234567", "cus_A1", "order_2", "see", "a-b.c", "x=y|z", "ok.",
    ]  # fmt: skip


def test_two_dots_cut_an_argument_short_but_not_prose() -> None:
    """ARGUMENT_ELLIPSES adds ".." to ELLIPSES: an id never ends so, a sentence may by typo."""
    assert ELLIPSES == ("…", "...")
    assert ARGUMENT_ELLIPSES == ("…", "...", "..")


def test_the_replay_uses_the_linear_token_search() -> None:
    """One whole-token search: the replay's copy (quadratic on repeated values) is gone."""
    for module in (
        guardrail.replay._run,
        guardrail.replay._reference_agent,
        guardrail.replay._lossy,
    ):
        assert vars(module)["has_token"] is has_token, module.__name__
    assert "has_token" not in vars(guardrail.replay._arguments)
