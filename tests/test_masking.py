"""Masking: every known identifier, in any written form, found in text and named by role."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from guardrail import Guard, Ledger
from guardrail._data.batch import Batch
from guardrail.compaction._block import BlockLine
from guardrail.compaction._lint import lint
from guardrail.compaction._masking import Masker
from guardrail.ledger import Source
from guardrail.ledger._ledger import state_of

SOURCE = Source("t", None, "x", 0)


def ledger_of(
    values: Iterable[tuple[str, str]],
    *,
    capacity: int = 1000,
    kinds: Mapping[str, object] | None = None,
) -> Ledger:
    """A ledger holding ``(kind, value)`` pairs; kinds default to plain ones (no normaliser)."""
    guard = Guard(capacity=capacity)
    values = list(values)
    for name, normalize in (kinds or {}).items():
        guard.add_kind(name, normalize=normalize)  # type: ignore[arg-type]
    for kind, _ in values:
        if kind not in guard.kinds:
            guard.add_kind(kind)
    ledger = guard.new_ledger()
    for kind, value in values:
        key = guard.kinds[kind].normalize(value)
        state_of(ledger).admit([Batch.one(kind, value, key, "x")], source=SOURCE)
    return ledger


def masked(ledger: Ledger, text: str, carried: Sequence[BlockLine] = ()) -> str:
    return Masker(state_of(ledger), carried).mask(text)[0]


# -- behaviours -----------------------------------------------------------------------------


def test_evicted_values_are_masked_by_their_role() -> None:
    """A value evicted for capacity is still masked, by the role it had."""
    ledger = ledger_of([("order", "W1000001"), ("order", "W1000002")], capacity=1)
    assert [tomb.value for tomb in ledger.tombstones()] == ["W1000001"]
    assert masked(ledger, "W1000001 then W1000002.") == "[order] then [order_2]."


def test_carried_values_are_masked_by_their_role() -> None:
    """A value carried from an earlier block (no kind to place it in) is masked too."""
    ledger = ledger_of([])
    carried = [BlockLine("mystery", "x y 7")]
    assert masked(ledger, "It was x y 7, not x y 70.", carried) == "It was [mystery], not x y 70."


def test_an_empty_carried_value_masks_nothing() -> None:
    """A carried value that is empty (written "" in a block) matches nowhere."""
    assert masked(ledger_of([]), "a b", [BlockLine("mystery", "")]) == "a b"


def test_ids_with_punctuation_glued_to_punctuation_and_spanning_words() -> None:
    """Ids holding punctuation or spaces are masked whole, also glued to punctuation."""
    ledger = ledger_of(
        [
            ("payment", "credit_card_4421486"),
            ("order", "#W8855135"),
            ("url", "https://example.com/a?b=1"),
            ("email", "mia.li@example.com"),
            ("hotel", "Grand Hotel"),
        ]
    )
    text = (
        '(credit_card_4421486), "#W8855135". See https://example.com/a?b=1! '
        "Mail mia.li@example.com; stay at the Grand Hotel's bar."
    )
    assert masked(ledger, text) == (
        '([payment]), "[order]". See [url]! Mail [email]; stay at the [hotel]\'s bar.'
    )


def test_a_value_is_not_masked_inside_a_longer_word() -> None:
    """Neither end of a match may fall inside a word; a written form needs its marks."""
    ledger = ledger_of(
        [("payment", "credit_card_4421486"), ("hotel", "Grand Hotel"), ("order", "#W8855135")]
    )
    text = "credit_card_44214861 xcredit_card_4421486 Grand Hotels W8855135"
    assert masked(ledger, text) == text


def test_normalised_forms_are_masked_and_trimmed_of_punctuation() -> None:
    """A token the kind's normaliser maps to a value is masked, its punctuation left outside."""
    ledger = ledger_of([("order", "W1000001")], kinds={"order": ["strip", "prefix:#"]})
    assert masked(ledger, "(#W1000001). W1000001!") == "([order]). [order]!"
    upper = ledger_of([("code", "AB12")], kinds={"code": "upper"})
    assert masked(upper, "ab12 or Ab12, not ab123") == "[code] or [code], not ab123"


def test_role_references_already_in_the_text_are_left_alone() -> None:
    """A [role] in the text stays as written, even when its name is also a value."""
    ledger = ledger_of([("code", "code")])
    assert masked(ledger, "[code] is code; [other] stays") == "[code] is [code]; [other] stays"


def test_the_earliest_match_wins_then_the_longest() -> None:
    """Matching goes left to right; at one place the longest value wins."""
    ledger = ledger_of([("x", "ab c"), ("x", "c d"), ("x", "ab"), ("x", "ab c d")])
    assert masked(ledger, "ab c d. ab c. c d. ab") == "[x_4]. [x]. [x_2]. [x_3]"
    assert Masker(state_of(ledger), ()).mask("ab c d")[1] == [("ab c d", "x_4")]


def test_identifiers_found_are_reported_with_what_was_written() -> None:
    """mask() returns the written forms it replaced, with their roles, in order."""
    ledger = ledger_of([("order", "W1000001")], kinds={"order": ["strip", "prefix:#"]})
    text, done = Masker(state_of(ledger), ()).mask("#W1000001 and W1000001")
    assert text == "[order] and [order]"
    assert done == [("#W1000001", "order"), ("W1000001", "order")]


# -- the same spans as one regex alternation of every form ----------------------------------
#
# The reference below is the straightforward implementation: one regex alternation of every
# written form, longest first, searched left to right, plus a token pass for normalisers.
# The masker must find exactly what it finds.

_WORD = re.compile(r"\w")
_TOKEN = re.compile(r"[^\s\"'`,;()\[\]{}<>]+")
_EDGE = ".,;:!?*\u201c\u201d\u2018\u2019"
_ROLE_REF = re.compile(r"\[([A-Za-z_.-][\w.-]*)\]")


def _pattern(forms: Mapping[str, str], flags: int) -> re.Pattern[str] | None:
    if not forms:
        return None
    parts = [
        re.escape(form) + (r"(?!\w)" if _WORD.match(form[-1]) else "")
        for form in sorted(forms, key=lambda f: (-len(f), f))
    ]
    return re.compile("|".join(parts), flags)


def _search(
    pattern: re.Pattern[str] | None, text: str, role_of: Callable[[str], str]
) -> list[tuple[int, int, str]]:
    spans: list[tuple[int, int, str]] = []
    at = 0
    while pattern is not None and (match := pattern.search(text, at)) is not None:
        start = match.start()
        if start and _WORD.match(text[start - 1]) and _WORD.match(text[start]):
            at = start + 1
            continue
        spans.append((start, match.end(), role_of(match.group())))
        at = match.end()
    return spans


def reference_spans(
    ledger: Ledger, carried: Sequence[BlockLine], text: str
) -> list[tuple[int, int, str]]:
    """The spans one regex alternation of every form finds (what Masker.spans must return)."""
    exact: dict[str, str] = {}
    folded: dict[str, str] = {}
    roles: set[str] = set()
    known = [(e.value, e.key, e.role, e.kind) for e in ledger.entries()]
    known += [(t.value, t.key, t.role, t.kind) for t in ledger.tombstones()]
    for value, key, role, kind_name in known:
        roles.add(role)
        kind = state_of(ledger).kinds[kind_name]
        for form in (value, key):
            if form.strip():
                exact.setdefault(form, role)
        if value.upper() != value.lower() and (
            kind.normalize(value.upper()) == kind.normalize(value.lower()) == key
        ):
            folded.setdefault(value.casefold(), role)
    for line in carried:
        exact.setdefault(line.value, line.role)
        roles.add(line.role)
    found = _search(_pattern(exact, 0), text, exact.__getitem__)
    found += _search(_pattern(folded, re.IGNORECASE), text, lambda f: folded[f.casefold()])
    normalising = [
        state_of(ledger).kinds[name]
        for name in dict.fromkeys(kind for *_, kind in known)
        if state_of(ledger).kinds[name].normalize is not str.strip
    ]
    for match in _TOKEN.finditer(text):
        raw = match.group()
        token = raw.strip(_EDGE)
        if not token:
            continue
        start = match.start() + len(raw) - len(raw.lstrip(_EDGE))
        for kind in normalising:
            key = kind.normalize(token)
            entry = state_of(ledger).tables.get(kind.name, {}).get(key)
            tomb = None if entry else state_of(ledger).tombstone(kind.name, key)
            named = entry.role if entry else tomb.role if tomb else None
            if named is not None:
                found.append((start, start + len(token), named))
                break
    refs = [(m.start(), m.end(), "") for m in _ROLE_REF.finditer(text) if m.group(1) in roles]
    chosen = sorted(refs)
    starts = [span[0] for span in chosen]
    for span in sorted(found, key=lambda s: (s[0] - s[1], s[0])):
        at = bisect.bisect_right(starts, span[0])
        if (at and chosen[at - 1][1] > span[0]) or (at < len(chosen) and chosen[at][0] < span[1]):
            continue
        starts.insert(at, span[0])
        chosen.insert(at, span)
    return [span for span in chosen if span[2]]


def rebuilt(text: str, spans: list[tuple[int, int, str]]) -> tuple[str, list[tuple[str, str]]]:
    """``text`` with ``spans`` replaced by their ``[role]``, and the (written, role) pairs."""
    out, done, at = [], [], 0
    for start, end, role in spans:
        out += [text[at:start], f"[{role}]"]
        done.append((text[start:end], role))
        at = end
    return "".join([*out, text[at:]]), done


def agrees_with_reference(ledger: Ledger, carried: Sequence[BlockLine], text: str) -> None:
    """spans(), roles_in(), mask() and mask_roles() all say what the reference's spans say."""
    masker = Masker(state_of(ledger), carried)
    spans = reference_spans(ledger, carried, text)
    assert masker.spans(text) == spans
    assert masker.roles_in(text) == {role for _, _, role in spans}
    assert masker.mask(text) == rebuilt(text, spans)
    assert masker.mask_roles(text) == (rebuilt(text, spans)[0], [role for _, _, role in spans])


ALPHABET = "aAbB1_-#. [](é—"
WORDS = "ab1_"
PIECES = st.text(alphabet=ALPHABET, min_size=1, max_size=5)


@st.composite
def masking_cases(
    draw: st.DrawFn, normalisers: Mapping[str, object], alphabet: str = ALPHABET
) -> tuple[Ledger, list[BlockLine], str]:
    """A small ledger (live, evicted and carried values) and text made of its values and noise."""
    pieces = st.text(alphabet=alphabet, min_size=1, max_size=5)
    kinds = ["thing", "thing_2", *normalisers]
    values = draw(
        st.lists(st.tuples(st.sampled_from(kinds), pieces), min_size=1, max_size=6, unique=True)
    )
    values = [(kind, value) for kind, value in values if value.strip()]
    capacity = draw(st.integers(1, 6))
    ledger = ledger_of(values, capacity=capacity, kinds=normalisers)
    carried = [
        BlockLine(f"carried_{i}", v) for i, v in enumerate(draw(st.lists(pieces, max_size=2)))
    ]
    forms = [value for _, value in values] + [line.value for line in carried]
    forms += [f"[{role}]" for role in [*ledger.roles, "thing", "thing_2_2"]]
    words = st.one_of(PIECES, st.sampled_from(forms))
    if normalisers:
        words = st.one_of(words, st.sampled_from(forms).map(lambda f: "#" + f.upper()))
    text = draw(st.lists(words, max_size=10).map("".join))
    return ledger, carried, text


@settings(max_examples=150, deadline=None)
@given(masking_cases({}))
def test_spans_are_those_of_one_alternation_of_every_form(
    case: tuple[Ledger, list[BlockLine], str],
) -> None:
    """Plain kinds: the spans equal those of one regex alternation of every form."""
    agrees_with_reference(*case)


@settings(max_examples=150, deadline=None)
@given(masking_cases({}, alphabet=WORDS))
def test_one_word_values_are_masked_as_the_alternation_does(
    case: tuple[Ledger, list[BlockLine], str],
) -> None:
    """Values of one word each (the quick path), role references around: the same spans."""
    agrees_with_reference(*case)


@settings(max_examples=150, deadline=None)
@given(masking_cases({}, alphabet=WORDS + "é²"))
def test_one_word_values_in_text_beyond_ascii_are_masked_as_the_alternation_does(
    case: tuple[Ledger, list[BlockLine], str],
) -> None:
    """One-word values, some not ASCII, in text that is not: the quick look for any value.

    It reads the UTF-8 bytes, and finds what the alternation finds.
    """
    agrees_with_reference(*case)


@settings(max_examples=100, deadline=None)
@given(masking_cases({"code": "casefold", "order": ["strip", "prefix:#"]}, alphabet=WORDS))
def test_one_word_values_of_normalising_kinds_are_masked_as_the_alternation_does(
    case: tuple[Ledger, list[BlockLine], str],
) -> None:
    """One-word values of casefolding and prefix kinds (the quick paths): the same spans."""
    agrees_with_reference(*case)


@settings(max_examples=150, deadline=None)
@given(masking_cases({"code": "casefold"}))
def test_spans_match_the_alternation_with_a_case_insensitive_kind(
    case: tuple[Ledger, list[BlockLine], str],
) -> None:
    """A casefolding kind: any case is found, and the spans still equal the reference's."""
    agrees_with_reference(*case)


@settings(max_examples=150, deadline=None)
@given(masking_cases({"order": ["strip", "prefix:#"]}))
def test_spans_match_the_alternation_with_a_normalising_kind(
    case: tuple[Ledger, list[BlockLine], str],
) -> None:
    """A prefix-stripping kind: ``#`` forms are found, and the spans equal the reference's."""
    agrees_with_reference(*case)


# -- normalisers that fail --------------------------------------------------------------------


def _no_latin_o(value: str) -> str:
    """A normaliser that cannot read a Latin "O" (as user normalisers may fail on odd text)."""
    if "O" in value:
        raise ValueError("no O here")
    return value.strip()


def test_a_normaliser_that_fails_on_a_token_or_its_look_alike_is_no_id() -> None:
    """Masking and the lint skip tokens (and look-alikes of them) a normaliser cannot read."""
    ledger = ledger_of(
        [("code", "C0DE1"), ("link", "https://shop.example/a1")],
        kinds={"code": _no_latin_o, "link": "url"},
    )
    masker = Masker(state_of(ledger), ())
    text = "See C0DE1, CODE1, http://shop:x1 and https://SHOP.example/a1/."
    assert masker.mask(text)[0] == "See [code], CODE1, http://shop:x1 and [link]."
    # A Cyrillic O (U+041E): folded to a Latin one the normaliser refuses, the look-alike is no
    # crash; it is still one character from C0DE1, so the lint scrubs it as a near miss.
    summary, issues = lint("Ask about C\u041eDE1 and http://shop:x2.", masker)
    assert summary == "Ask about [code] and http://shop:x2."
    assert [(issue.problem, issue.action) for issue in issues] == [("near_miss", "scrubbed")]


def test_the_lint_reads_two_dots_in_prose_as_punctuation_not_a_cut() -> None:
    """'W10..' in a summary is a short word ending a sentence twice; 'W10...' is an id cut short."""
    ledger = ledger_of([("order", "W1000001")])
    masker = Masker(state_of(ledger), ())
    summary, issues = lint("Then W10.. Then W10... done.", masker)
    assert summary == "Then W10.. Then [order] done."
    assert [(issue.problem, issue.text, issue.action) for issue in issues] == [
        ("truncated", "W10...", "scrubbed")
    ]


def test_the_lint_judges_each_summary_against_its_own_ledger() -> None:
    """Words found fine once are fine for any ledger; an id-shaped one is judged again each time."""
    guard = Guard()
    guard.add_kind("order", pattern=r"W\d{7}")
    maskers = []
    for value in ("W1000001", "W2000001"):
        ledger = guard.new_ledger()
        state_of(ledger).admit([Batch.one("order", value, value, "x")], source=SOURCE)
        maskers.append(Masker(state_of(ledger), ()))
    text = "Refund W1000011 today, then W2000011 (see [order])."
    first, second = (lint(text, masker) for masker in maskers)
    assert first[0] == "Refund [order] today, then W2000011 (see [order])."
    assert [(issue.problem, issue.text) for issue in first[1]] == [
        ("near_miss", "W1000011"),
        ("unknown", "W2000011"),
    ]
    assert second[0] == "Refund W1000011 today, then [order] (see [order])."
    assert [(issue.problem, issue.text) for issue in second[1]] == [
        ("unknown", "W1000011"),
        ("near_miss", "W2000011"),
    ]


def test_the_lint_reads_key_value_tokens_as_the_value_they_name() -> None:
    """order_id=#W… or order:W… in a summary: the value is judged, scrubbed or flagged."""
    guard = Guard()
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    ledger = guard.new_ledger()
    for value in ("#W8855135", "#W2378156"):
        key = guard.kinds["order"].key(value) or value
        state_of(ledger).admit([Batch.one("order", value, key, "x")], source=SOURCE)
    masker = Masker(state_of(ledger), ())
    summary, issues = lint(
        "Refunded order_id=#W2378157, then (order:W885513...) and ref=#W9999999 at 10:30.",
        masker,
    )
    assert summary == (
        "Refunded order_id=[order_2], then (order:[order]) and ref=#W9999999 at 10:30."
    )
    assert [(issue.problem, issue.text, issue.action) for issue in issues] == [
        ("near_miss", "#W2378157", "scrubbed"),
        ("truncated", "W885513...", "scrubbed"),
        ("unknown", "#W9999999", "flagged"),
    ]
