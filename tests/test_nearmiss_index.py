"""The near-miss search reading the keys near a value: the same answer as building every variant.

With every key sharing a prefix, or many keys sharing a value's first
characters, the search builds variants only where keys differ and reads the
few keys near the value for the rest. Whatever it reads, it must name the
key and the edit the plain search (every variant, in order) names.
"""

from __future__ import annotations

import random
import unicodedata
from typing import Any

import pytest

from guardrail import Guard
from guardrail._check.nearmiss import _CONFUSABLES, _first_variant, near_miss, skeleton
from guardrail._data.batch import Batch
from guardrail.kinds import Kind
from guardrail.ledger import Source
from guardrail.ledger._index import KeyIndex
from guardrail.ledger._ledger import state_of
from guardrail.ledger._state import LedgerState


def _edit(value: str, rng: random.Random, letters: str) -> str:
    """``value`` with one random edit, swap, or two (then usually near nothing)."""
    for _ in range(rng.choice([1, 1, 1, 2])):
        i = rng.randrange(len(value))
        j = rng.randrange(len(value))
        edit = rng.choice(["change", "add", "drop", "swap", "neighbours"])
        if edit == "change":
            value = value[:i] + rng.choice(letters) + value[i + 1 :]
        elif edit == "add":
            value = value[:i] + rng.choice(letters) + value[i:]
        elif edit == "drop" and len(value) > 1:
            value = value[:i] + value[i + 1 :]
        elif edit == "swap":
            i, j = min(i, j), max(i, j)
            value = value[:i] + value[j] + value[i + 1 : j] + value[i] + value[j + 1 :]
        elif i + 1 < len(value):
            value = value[:i] + value[i + 1] + value[i] + value[i + 2 :]
    return value


def _ledger(keys: list[str]) -> LedgerState:
    guard = Guard(capacity=1_000_000)
    guard.add_kind("order")
    state = state_of(guard.new_ledger("s"))
    state.admit(
        [Batch("order", "x", None, keys, list(keys), None)], source=Source("t", None, "x", 0)
    )
    return state


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(
    ("prefix", "letters", "length", "count"),
    [
        ("ord_", "abcdef0123", 8, 3000),  # few letters: many keys share first characters
        ("", "ab", 10, 800),  # runs of one letter: insertions found at several places
        ("INV-00", "0123456789", 5, 5000),  # numbered, most of the key shared
        ("x", "abcdefghijklmnopqrstuvwxyz", 6, 40),  # a ledger smaller than what is read
    ],
)
def test_reading_near_keys_names_what_building_every_variant_names(
    seed: int, prefix: str, letters: str, length: int, count: int
) -> None:
    rng = random.Random(seed)
    keys = list(
        dict.fromkeys(prefix + "".join(rng.choices(letters, k=length)) for _ in range(count))
    )
    state = _ledger(keys)
    kind = Guard().add_kind("order")
    _search_like_plain(state, kind, [_edit(rng.choice(keys), rng, letters) for _ in range(150)])


def test_keys_all_sharing_a_prefix_are_varied_only_after_it() -> None:
    state = _ledger(["ord_abc1", "ord_abd2", "ord_xyz3"])
    assert state.index["order"].shared == "ord_"
    state.admit(
        [Batch("order", "x", None, ["orx_q"], ["orx_q"], None)], source=Source("t", None, "x", 0)
    )
    assert state.index["order"].shared == "or"


def test_a_search_that_passes_over_a_key_finds_the_next_and_leaves_the_index_whole() -> None:
    """hidden= finds another near key, never the hidden one, and the index keeps every key.

    The second search of a dense ledger (is the value one edit from several
    entries?) passes over the first hit; the index it reads is the ledger's
    own, so a rebuild it starts must not lose the key passed over.
    """
    keys = [f"L{n}" for n in range(1001, 1400)]
    state = _ledger(keys)
    kind = Kind("order")
    index = state.index["order"]
    index.stale = 10_000  # due a rebuild from the table at the next search
    first = near_miss(kind, "L1005x", state)
    assert first is not None
    second = near_miss(kind, "L1005x", state, hidden=first.entry.key)
    assert second is None or second.entry.key != first.entry.key
    index.stale = 10_000
    near_miss(kind, "L100", state, hidden="L1001")
    assert set(index.starts) | set(index.pending) >= set(keys)
    again = near_miss(kind, "L1001x", state)
    assert again is not None and again.entry.key == "L1001"


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    ("prefix", "suffix", "letters"),
    [
        ("", "@acme.com", "abcdefgh"),  # every key ends alike: the end tells nothing
        ("cus_", "", "abcdefghijklmnopqrstuvwxyz0123456789"),
        ("T-", "-2024", "0123456789"),
    ],
)
def test_keys_read_from_their_end_name_what_building_every_variant_names(
    seed: int, prefix: str, suffix: str, letters: str
) -> None:
    """Searches between arrivals of new keys, which the index reads from both ends."""
    rng = random.Random(seed)

    def fresh(count: int) -> list[str]:
        length = rng.choice([5, 6, 7])
        return [prefix + "".join(rng.choices(letters, k=length)) + suffix for _ in range(count)]

    keys = list(dict.fromkeys(fresh(2000)))
    state = _ledger(keys)
    table = state.tables["order"]
    kind = Guard().add_kind("order")
    for round_ in range(6):
        if round_:
            more = [key for key in dict.fromkeys(fresh(rng.choice([5, 300, 900]))) if key]
            state.admit(
                [Batch("order", "x", None, more, list(more), None)],
                source=Source("t", None, "x", 0),
            )
            keys = list(table)
        values = [_edit(rng.choice(keys), rng, letters) for _ in range(40)]
        _search_like_plain(state, kind, values, again=False)


def _search_like_plain(
    state: LedgerState, kind: Kind, values: list[str], *, again: bool = True
) -> None:
    """Each value not held is named by the search as by building every variant.

    ``again``: also the second search, which passes over the first hit.
    """
    table = state.tables["order"]
    alphabet = sorted(state.alphabet("order"))
    for value in values:
        if value in table:
            continue
        found = near_miss(kind, value, state)
        plain = _first_variant(value, alphabet, table.keys())
        assert (None if found is None else (found.entry.key, found.detail)) == plain, value
        if again and found is not None:
            hidden = near_miss(kind, value, state, hidden=found.entry.key)
            rest = {key: None for key in table if key != found.entry.key}
            plain = _first_variant(value, alphabet, rest.keys())
            assert (None if hidden is None else (hidden.entry.key, hidden.detail)) == plain, value


def _first_live(
    ordered: list[str], holds: Any, part: str, pending: list[str], table: dict[str, int], limit: int
) -> list[str] | None:
    """What a key index answers, read the plain way: every sorted key, then the pending ones."""
    found: list[str] = []
    for read, key in enumerate(key for key in ordered if holds(key, part)):
        if read > 4 * limit:
            return None
        if key in table:
            if len(found) >= limit:
                return None
            found.append(key)
    for key in pending:
        if holds(key, part) and key in table and key not in found:
            if len(found) >= limit:
                return None
            found.append(key)
    return found


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("odd_keys", [False, True])
def test_key_index_answers_as_reading_every_key_in_order(seed: int, odd_keys: bool) -> None:
    """Prefix and suffix look-ups give what sorting every key and reading them in order gives.

    Keys arrive in batches of every size (several sorted runs, some pending),
    some are evicted (left in the index, gone from the table), some come
    again (one key in two runs, or twice in one), and few letters make many
    keys share a start or an end: the look-ups that bisect each run, or scan
    the text of the keys not yet sorted, must agree with the plain reading,
    and fall back to it where a run repeats a key. ``odd_keys``: now and then
    a key holding a line break (what separates keys in that text), which
    sends the scan back to reading the keys one by one.
    """
    rng = random.Random(seed)
    index = KeyIndex()
    table: dict[str, int] = {}
    seen: list[str] = []
    for _ in range(40):
        size = rng.choice([1, 3, 40, 65, 70, 200])
        fresh = ["".join(rng.choices("abc", k=rng.choice([1, 2, 3, 4, 5]))) for _ in range(size)]
        if seen and rng.random() < 0.3:
            fresh += rng.choices(seen, k=5)
        if odd_keys and rng.random() < 0.2:
            fresh.append(rng.choice(["a\nb", "ab\n", "\nab", "\n"]))
        index.add(fresh)
        seen += fresh
        for key in fresh:
            table[key] = rng.randrange(50)  # at times one entry for two keys
        for key in rng.sample(sorted(table), k=min(len(table), rng.choice([0, 2, 10, 150]))):
            del table[key]
            index.stale += 1
        for _ in range(8):
            part = "".join(rng.choices("abc\n", [4, 4, 4, 1], k=rng.choice([0, 1, 2, 3])))
            limit = rng.choice([1, 2, 16])
            got = index.starting_with(part, table, limit)
            runs = sorted(set(index.starts))  # read after the look-up: it may sort pending keys
            assert got == _first_live(runs, str.startswith, part, index.pending, table, limit)
            got = index.ending_with(part, table, limit)
            assert index.ends is not None
            ends = [key[::-1] for key in sorted(set(index.ends))]
            assert got == _first_live(ends, str.endswith, part, index.pending, table, limit)
            entries = index.with_prefix(part, table, limit)
            plain: list[int] = []
            for key in sorted(set(index.starts)):
                if key.startswith(part) and len(plain) < limit:
                    entry = table.get(key)
                    if entry is not None and key != part and entry not in plain:
                        plain.append(entry)
            for key in index.pending:
                if key.startswith(part) and key != part and len(plain) < limit:
                    entry = table.get(key)
                    if entry is not None and entry not in plain:
                        plain.append(entry)
            assert entries == plain


def test_the_skeleton_of_ascii_text_is_the_text_itself() -> None:
    """ASCII text skips the folding, so the folding must leave every ASCII character alone."""
    texts = [chr(c) for c in range(128)] + ["ord_28e6aKAQW1", "W885\t \x00~", ""]
    for text in texts:
        assert skeleton(text) == unicodedata.normalize("NFKC", text).translate(_CONFUSABLES)
        assert skeleton(text) == text
    assert skeleton("ord_\u0430\uff42") == "ord_ab"  # Cyrillic a, full-width b: folded
