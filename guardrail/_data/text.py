"""Text helpers, one definition each: cut-short values, word characters, tokens, ellipses.

An identifier argument is whatever the model sent, up to megabytes of it. The
check keeps the full value; what a re-prompt, a rejection or an audit event
repeats of it is bounded here, in one place. Whether the user typed a value
is a search of their texts that must cost one pass whatever the value is.
What counts as a word character, a token of prose and an ellipsis is
decided here too, for the check, the ledger, masking and the replay alike.
"""

from __future__ import annotations

import json
import re
from typing import Final

#: How many characters of a value are repeated before it is cut short.
SHOWN: Final = 200


#: A string as a JSON string, non-ASCII kept: ``json.dumps(value, ensure_ascii=False)`` without
#: building an encoder at each call (json.dumps reuses its own only with the default options).
_quoted: Final = json.JSONEncoder(ensure_ascii=False).encode


def shorten(value: str, limit: int = SHOWN, *, quote: bool = False) -> str:
    """``value`` itself when short; else its first ``limit`` characters, "…" and its length.

    ``quote`` gives it as a JSON string (as a re-prompt quotes it), with the
    length after the closing quote: ``"W885…" (32,000 characters)``.
    """
    if len(value) <= limit:
        return _quoted(value) if quote else value
    head = value[:limit] + "…"
    size = f"({len(value):,} characters)"
    if quote:
        return f"{_quoted(head)} {size}"
    return f"{head} {size}"


# -- words, tokens and ellipses ---------------------------------------------------------------


def is_word_char(char: str) -> bool:
    """Whether one character is a word character: what ``\\w`` matches in Python's ``re``.

    An identifier written "as a whole token" has no word character right
    before or after it.
    """
    return char.isalnum() or char == "_"


#: What ends a token of prose: white space, quotes, brackets, commas, semicolons.
TOKEN_BREAKS: Final = r"\s\"'`,;()\[\]{}<>"
#: A token of prose, as the summary lint judges one: it holds at most one identifier.
TOKEN: Final = re.compile(f"[^{TOKEN_BREAKS}]+")

#: How a text cut short ends: the ellipsis character, or three dots.
ELLIPSES: Final = ("…", "...")
#: How an identifier argument cut short ends: :data:`ELLIPSES` or two dots. Kept apart on
#: purpose: no identifier ends in "..", so in an argument two dots are a cut; in prose (the
#: summary lint, the reference agent) they end a sentence by a typo, and are no cut there.
ARGUMENT_ELLIPSES: Final = (*ELLIPSES, "..")


# -- whole-token search -----------------------------------------------------------------------

#: Occurrences of a value looked at one by one before the search that costs one pass.
_FEW: Final = 8
_NON_WORD: Final = re.compile(r"(\W)")
#: Characters rare enough in text to mark word edges with; one absent from both texts is used.
_MARKS: Final = ("\x00", "\x01", "\x02", "\ue000", "\ue001", "\U000f0000")


def has_token(text: str, value: str) -> bool:
    """Whether ``value`` appears in ``text`` as a whole token (not inside a longer word).

    Linear in the length of ``text`` whatever the value: the first few
    occurrences are looked at directly; past them (``"ab"`` found 500,000
    times in ``"abab…"``, never whole) one search over the text with its
    word edges marked decides.
    """
    if not value:
        return False
    start = text.find(value)
    for _ in range(_FEW):
        if start < 0:
            return False
        end = start + len(value)
        if (start == 0 or not is_word_char(text[start - 1])) and (
            end == len(text) or not is_word_char(text[end])
        ):
            return True
        start = text.find(value, start + 1)
    return start >= 0 and _has_token_marked(text, value)


def _has_token_marked(text: str, value: str) -> bool:
    """:func:`has_token` as one substring search.

    A mark goes on both sides of every character that is not a word
    character (``\\W``), in the text (padded with a space at each end) and
    in the value alike. Between two neighbours there are then as many marks
    as there are non-word characters among them, so ``value`` with one more
    mark at each end is found exactly where it stands with a non-word
    character (or an end of the text) on each side.
    """
    mark = next((m for m in _MARKS if m not in text and m not in value), None)
    if mark is None:  # every mark in use (written on purpose): say no, which refuses
        return False
    marked_text = mark.join(_NON_WORD.split(f" {text} "))
    marked_value = mark.join(_NON_WORD.split(value))
    return f"{mark}{marked_value}{mark}" in marked_text


#: Characters of context kept on each side of a mention, for the evidence shown to the user.
_CONTEXT = 40
_SPACE = re.compile(r"\s+")


def excerpt(text: str, token: str, at: int | None = None) -> str:
    """The words around ``token`` in ``text``, white space folded, cut to a short line.

    ``at`` is where ``token`` stands in ``text`` (where a search found it);
    without it, its first occurrence is looked for.
    """
    if at is None:
        at = text.find(token)
    start = max(0, at - _CONTEXT)
    end = min(len(text), at + len(token) + _CONTEXT)
    body = _SPACE.sub(" ", text[start:end]).strip()
    return ("…" if start else "") + body + ("…" if end < len(text) else "")
