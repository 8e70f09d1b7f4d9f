"""The user's last texts: conversation state kept beside a ledger's id tables.

An id the user typed is admitted unverified, and a value that is no kind's
shape is recognised by being in what the user wrote. The texts are saved in
the session's meta (``user_texts``) and merged by
:func:`~guardrail.stores.protocol.merge_meta`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from guardrail._data.entry import Source
from guardrail._data.text import has_token
from guardrail.kinds import _RUN_WORDS, Kind
from guardrail.ledger._merge import USER_TEXTS_KEPT

#: Kinds (by run length) whose keys in the user texts are kept worked out.
_TYPED_KEYS_KEPT = 64
#: Result texts kept for recognising mentions of kinds with no pattern, and each one's bound.
RESULT_TEXTS_KEPT = 16
RESULT_TEXT_CHARS = 20_000


class ResultText(NamedTuple):
    """The free text of a successful result, kept for a mention of a kind with no pattern.

    Where it came from is its :class:`~guardrail._data.entry.Source` and the call
    as the user would recognise it; ``outside``: an outside party wrote it.
    """

    text: str
    source: Source
    call: str
    outside: bool


class ResultTexts:
    """The free texts of the last results (in memory with the live ledger; never saved).

    A value of a kind with no pattern cannot be found in text when a result
    arrives; it is looked for here when a call uses it. Not saved: a ledger
    loaded elsewhere finds nothing here, and refuses such a value as before.
    """

    __slots__ = ("_texts",)

    def __init__(self) -> None:
        self._texts: deque[ResultText] = deque(maxlen=RESULT_TEXTS_KEPT)

    def add(self, text: ResultText) -> None:
        """Keep one more result's text (cut to its bound; the oldest goes past the count)."""
        self._texts.append(text._replace(text=text.text[:RESULT_TEXT_CHARS]))

    def find(self, value: str, kind: Kind) -> ResultText | None:
        """The newest text holding ``value`` as a whole token (or as ``kind`` reads it).

        One an outside party did not write comes first: the most permissive source.
        """
        key = kind.key(value)
        found: ResultText | None = None
        for kept in reversed(self._texts):
            if has_token(kept.text, value) or (key and key in kind.keys_in(kept.text)):
                if not kept.outside:
                    return kept
                found = found or kept
        return found


class UserTexts:
    """The last :data:`~guardrail.ledger.USER_TEXTS_KEPT` user texts, oldest first.

    Iterating gives the texts; :meth:`holds` says whether they hold a value.
    """

    __slots__ = ("_keys", "_texts")

    def __init__(self) -> None:
        self._texts: deque[str] = deque(maxlen=USER_TEXTS_KEPT)
        #: Per (kind, words): the texts and kind last read, and the keys written in them.
        self._keys: dict[tuple[str, int], tuple[tuple[str, ...], Kind, frozenset[str]]] = {}

    def __iter__(self) -> Iterator[str]:
        return iter(self._texts)

    def __len__(self) -> int:
        return len(self._texts)

    def last(self) -> str | None:
        """The latest text kept, if any."""
        return self._texts[-1] if self._texts else None

    def add(self, text: str) -> None:
        """Keep one more text (the oldest goes past the bound)."""
        self._texts.append(text)

    def replace(self, texts: Iterable[str]) -> None:
        """Keep ``texts`` in place of the ones kept (a load)."""
        self._texts.clear()
        self._texts.extend(texts)

    def holds(self, value: str, kind: Kind | None = None) -> bool:
        """Whether the texts hold ``value``: as a whole token, or by ``kind``'s key.

        Verbatim is one pass over each text, whatever the value (see
        :func:`~guardrail._data.text.has_token`). With a ``kind``, a run of the
        user's words that the kind's normaliser reads as the value's key
        counts too (``Ana@Example.com.`` for ``ana@example.com`` under
        ``email``), as a pattern's match would: the keys of the kept texts
        are worked out once per kind and reused until the next user text.
        """
        if not value.strip():
            return False  # nothing typed is no id the user typed
        texts = tuple(self._texts)
        if any(has_token(text, value) for text in texts):
            return True
        key = kind.key(value) if kind is not None else None
        if kind is None or not key:
            return False
        words = max(_RUN_WORDS, len(value.split()))
        cached = self._keys.get((kind.name, words))
        # The texts are compared by identity first: the same strings, nothing to redo.
        if cached is None or cached[0] != texts or cached[1] is not kind:
            keys = frozenset().union(*(kind.keys_in(text, words=words) for text in texts))
            if len(self._keys) >= _TYPED_KEYS_KEPT:
                self._keys.clear()
            cached = (texts, kind, keys)
            self._keys[kind.name, words] = cached
        return key in cached[2]
