"""Properties: normalisers are idempotent, the ledger keeps its promises, near misses are caught.

Hypothesis drives each against a definition: the normalisers against
``n(n(x)) == n(x)``, the ledger as a state machine against a plain Python
model of what it must hold, and the check against every single edit of
every ledger value.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from guardrail import Guard, Id, Ledger, Rejection, Source
from guardrail._data.batch import Batch
from guardrail._guard.audit import SilentLogger
from guardrail._transcript.result_text import is_refusal
from guardrail.integrations.loops import Toolbox, run_tool_calls
from guardrail.kinds import NormalizeSpec, compile_normalizer
from guardrail.ledger._ledger import state_of

from .conftest import shop_guard

# -- normalisers ------------------------------------------------------------------------------

#: Every built-in normaliser, and the compositions the repository uses (README, examples, tests).
NORMALISERS: list[NormalizeSpec] = [
    None,
    "strip",
    "casefold",
    "lower",
    "upper",
    "number",
    "url",
    "email",
    "prefix:#",
    "prefix:ab",
    ["strip", "prefix:#"],
    ["prefix:#", "strip"],
    ["strip", "casefold"],
]

#: Text that looks like what each normaliser reads, mixed with anything at all.
_URL_PART = st.text(alphabet="aZ09.-_~%:@[]/?#& \t\n\x00é", max_size=8)
_URLS = st.builds(
    "".join,
    st.lists(
        st.one_of(
            st.sampled_from(["http://", "HTTPS://", "javascript://", "//", "a:", ":", "::"]),
            st.sampled_from(["@", ":80", ":443", ":0443", ":99999", "[::1]", "/", "?", "#"]),
            _URL_PART,
        ),
        max_size=8,
    ),
)
_NUMBERS = st.one_of(
    st.from_regex(r"\s*[+-]?[0-9_]{0,6}(\.[0-9]{0,6})?([eE][+-]?[0-9]{1,12})?\s*", fullmatch=True),
    st.decimals(allow_nan=True, allow_infinity=True).map(str),
)
TEXTS = st.one_of(
    st.text(),
    st.text(alphabet="#ab \t", max_size=30),
    _URLS,
    _NUMBERS,
)


@pytest.mark.slow
@pytest.mark.parametrize("spec", NORMALISERS, ids=repr)
@settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(text=TEXTS)
def test_normalisers_are_idempotent_and_raise_only_for_urls(spec: NormalizeSpec, text: str) -> None:
    """Property: n(n(x)) == n(x); only the url normaliser raises, and only ValueError."""
    normalize = compile_normalizer(spec)
    try:
        key = normalize(text)
    except ValueError:
        assert spec == "url", f"{spec!r} raised on {text!r}"
        return
    assert type(key) is str
    assert normalize(key) == key


def _rounds(names: list[str]) -> Callable[[str], str]:
    """The composition run round after round until it settles, with no bound: the definition."""
    steps = [compile_normalizer(name) for name in names]

    def normalize(value: str) -> str:
        while True:
            before = value
            for step in steps:
                value = step(value)
            if value == before:
                return value

    return normalize


@pytest.mark.parametrize(
    "names", [["strip", "prefix:#"], ["prefix:#", "strip"], ["strip", "prefix:ab", "prefix:#"]]
)
@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=st.text(alphabet="#ab \t\n\u3000", max_size=30))
def test_strip_and_prefixes_settle_in_one_pass_where_rounds_would(
    names: list[str], text: str
) -> None:
    """Property: the one-pass strip-and-prefixes normaliser is the fixed point of its rounds."""
    assert compile_normalizer(names)(text) == _rounds(names)(text)


# -- the ledger as a state machine ------------------------------------------------------------


@dataclass
class _Entry:
    """What the model knows of a live entry."""

    role: str
    verified: bool
    pinned: bool
    last_used: int


_KINDS = ("order", "user")
_VALUES = tuple(f"v{n}" for n in range(10))
_SRC = Source("search", None, "p", 0)
Key = tuple[str, str]


class LedgerMachine(RuleBasedStateMachine):
    """A ledger driven by random admissions, turns, uses, pins, labels and round trips.

    The model holds what must be true (live keys, flags, last uses, which
    tombstones and drop marks are remembered, in order); where the ledger
    may choose (which of several equally old entries to evict), the rule
    checks the choice was allowed and the model follows it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ledger = Ledger()
        self.live: dict[Key, _Entry] = {}
        self.tombs: OrderedDict[Key, str] = OrderedDict()
        self.marks: OrderedDict[Key, None] = OrderedDict()
        self.turn = 0
        self.labels = 0
        self.owners: dict[str, Key] = {}  # every role ever seen on a live entry -> its key

    @initialize(capacity=st.integers(1, 6), tombstones=st.integers(0, 5))
    def start(self, capacity: int, tombstones: int) -> None:
        self.ledger = Ledger(capacity=capacity, tombstones=tombstones)

    # -- helpers --------------------------------------------------------------------------

    def _add_tomb(self, key: Key, role: str) -> None:
        self.tombs.pop(key, None)
        self.tombs[key] = role
        while len(self.tombs) > state_of(self.ledger).tombstone_capacity:
            self.tombs.popitem(last=False)

    def _evicted(self, keys: list[Key], *, candidates: dict[Key, _Entry], needed: int) -> None:
        """Check the ledger evicted the right number of least recently used candidates."""
        assert len(keys) == min(needed, len(candidates)), (keys, needed, candidates)
        assert set(keys) <= set(candidates)
        kept = [e.last_used for k, e in candidates.items() if k not in keys]
        if keys and kept:
            assert max(candidates[k].last_used for k in keys) <= min(kept)
        for key in keys:
            self._add_tomb(key, self.live.pop(key).role)

    def _evictable(self, *, spare_current: bool = True) -> dict[Key, _Entry]:
        current = self.turn if spare_current and self.turn > 0 else None
        return {k: e for k, e in self.live.items() if not e.pinned and e.last_used != current}

    def _room_needed(self) -> int:
        pinned = sum(e.pinned for e in self.live.values())
        return max(0, len(self.live) - pinned - self.ledger.capacity)

    def _live_keys(self) -> list[Key]:
        return sorted(self.live)

    # -- rules ----------------------------------------------------------------------------

    @rule(
        items=st.lists(st.tuples(st.sampled_from(_KINDS), st.sampled_from(_VALUES)), max_size=8),
        verified=st.booleans(),
        limit=st.one_of(st.none(), st.integers(0, 4)),
    )
    def admit(self, items: list[tuple[str, str]], verified: bool, limit: int | None) -> None:
        found = [Batch.one(kind, value, value, "p") for kind, value in items]
        room = len(items) if limit is None else limit
        admitted: list[Key] = []
        skipped: dict[Key, None] = {}
        revived: dict[Key, str] = {}
        for key in items:
            entry = self.live.get(key)
            if entry is not None:
                entry.verified = entry.verified or verified
                entry.last_used = self.turn
            elif key in admitted:
                continue
            elif not room:
                skipped[key] = None
            else:
                room -= 1
                admitted.append(key)
                self.live[key] = _Entry("?", verified, False, self.turn)
                if key in self.tombs:
                    revived[key] = self.tombs.pop(key)
                self.marks.pop(key, None)
        needed = self._room_needed()
        result = state_of(self.ledger).admit(found, source=_SRC, verified=verified, limit=limit)
        for added in result.added:
            key = (added.kind, added.key)
            self.live[key].role = added.role
            owner = self.owners.setdefault(added.role, key)
            assert owner == key, f"role {added.role} named {owner} before"
        evicted = [(e.kind, e.key) for e in result.evicted]
        self._evicted(evicted, candidates=self._evictable(), needed=needed)
        # What did not fit is taken back, newest first; the rest stays listed as added (even
        # if it was evicted again at once, which only a turn-0 ledger does).
        kept = [(e.kind, e.key) for e in result.added]
        taken = admitted[len(kept) :]
        assert kept + taken == admitted
        assert len(taken) == needed - len(evicted)
        assert self.turn > 0 or not taken  # turn 0: plain least recently used, nothing taken
        for key in taken:
            del self.live[key]
            if key in revived:
                self._add_tomb(key, revived[key])
        dropped = [*taken, *skipped]
        assert [(d.kind, d.key) for d in result.dropped] == dropped
        keep = state_of(self.ledger).tombstone_capacity
        for key in dropped[-keep:] if keep else []:
            self.marks.pop(key, None)
            self.marks[key] = None
        while len(self.marks) > keep:
            self.marks.popitem(last=False)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def touch(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(self._live_keys()))
        entry = state_of(self.ledger).tables[key[0]][key[1]]
        state_of(self.ledger).touch(entry)
        self.live[key].last_used = self.turn
        assert entry.last_used == self.turn

    @rule()
    def next_turn(self) -> None:
        self.turn += 1
        assert state_of(self.ledger).next_turn() == self.turn

    @precondition(lambda self: self.live)
    @rule(data=st.data(), pinned=st.booleans())
    def pin(self, data: st.DataObject, pinned: bool) -> None:
        key = data.draw(st.sampled_from(self._live_keys()))
        was = self.live[key].pinned
        before = {k: e.role for k, e in self.live.items()}
        self.ledger.pin(self.live[key].role, pinned)
        self.live[key].pinned = pinned
        needed = self._room_needed()
        gone = [k for k in before if self.ledger.get(k[0], k[1]) is None]
        if pinned or was == pinned:
            assert gone == []
            return
        # Unpinning evicts this turn's entries only when nothing older is left.
        older = self._evictable()
        first = [k for k in gone if k in older]
        self._evicted(first, candidates=older, needed=needed)
        rest = [k for k in gone if k not in first]
        self._evicted(rest, candidates=self._evictable(spare_current=False), needed=len(rest))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def forget(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(self._live_keys()))
        entry = self.live.pop(key)
        self.ledger.forget(entry.role)
        if state_of(self.ledger).tombstone_capacity:
            self._add_tomb(key, entry.role)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def label(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(self._live_keys()))
        self.labels += 1
        new_role = f"named_{self.labels}"
        old = self.live[key].role
        self.ledger.label(old, new_role)
        self.live[key].role = new_role
        self.owners[new_role] = key
        assert self.ledger[old] is self.ledger[new_role]  # the old role stays an alias

    @rule()
    def round_trip(self) -> None:
        text = self.ledger.to_json()
        self.ledger = Ledger.from_json(text)
        assert self.ledger.to_json() == text
        # One record per id: an id evicted and then named beyond a limit is saved as evicted.
        for key in [key for key in self.marks if key in self.tombs]:
            del self.marks[key]

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def holds_what_the_model_holds(self) -> None:
        ledger = self.ledger
        got = {(e.kind, e.key): e for e in ledger}
        assert sorted(got) == self._live_keys()
        for key, entry in got.items():
            known = self.live[key]
            assert (entry.role, entry.verified, entry.pinned, entry.last_used) == (
                known.role,
                known.verified,
                known.pinned,
                known.last_used,
            )

    @invariant()
    def stays_within_capacity(self) -> None:
        pinned = sum(e.pinned for e in self.ledger)
        assert len(self.ledger) - pinned <= self.ledger.capacity

    @invariant()
    def roles_are_unique(self) -> None:
        roles = [e.role for e in self.ledger]
        assert len(roles) == len(set(roles))
        assert all(self.ledger[role] is e for role, e in zip(roles, self.ledger, strict=True))

    @invariant()
    def evicted_ids_leave_bounded_tombstones(self) -> None:
        tombs = self.ledger.tombstones()
        assert len(tombs) <= state_of(self.ledger).tombstone_capacity
        assert [((t.kind, t.key), t.role) for t in tombs] == list(self.tombs.items())

    @invariant()
    def drop_marks_are_bounded_and_in_order(self) -> None:
        marks = list(state_of(self.ledger).dropped.values())
        assert len(marks) <= state_of(self.ledger).tombstone_capacity
        assert [(d.kind, d.key) for d in marks] == list(self.marks)

    @invariant()
    def no_key_is_both_live_and_remembered_as_gone(self) -> None:
        live = {(e.kind, e.key) for e in self.ledger}
        assert not live & {(t.kind, t.key) for t in self.ledger.tombstones()}
        assert not live & {(d.kind, d.key) for d in state_of(self.ledger).dropped.values()}


LedgerMachine.TestCase.settings = settings(
    max_examples=400, stateful_step_count=40, deadline=None, derandomize=True
)
test_ledger_state_machine = pytest.mark.slow(LedgerMachine.TestCase)


# -- near-miss soundness ----------------------------------------------------------------------

_ORDER_VALUES = st.lists(
    st.from_regex(r"#?W[0-9]{7}", fullmatch=True), min_size=1, max_size=6, unique=True
)
_EDIT_CHARS = "0123456789W#ABZ_-"


@st.composite
def _single_edit(draw: st.DrawFn) -> tuple[list[str], str]:
    """Ledger values, and one edit of one of them: substitute, delete, insert or swap."""
    values = draw(_ORDER_VALUES)
    value = draw(st.sampled_from(values)).lstrip("#")
    edit = draw(st.sampled_from(["substitute", "delete", "insert", "swap"]))
    at = draw(st.integers(0, len(value) - 1))
    char = draw(st.sampled_from(_EDIT_CHARS))
    if edit == "substitute":
        edited = value[:at] + char + value[at + 1 :]
    elif edit == "delete":
        edited = value[:at] + value[at + 1 :]
    elif edit == "insert":
        edited = value[:at] + char + value[at:]
    else:
        at = min(at, len(value) - 2)
        edited = value[:at] + value[at + 1] + value[at] + value[at + 2 :]
    return values, edited


def _with_orders(values: list[str]) -> tuple[Guard, Ledger]:
    guard = shop_guard()
    ledger = guard.new_ledger("p")
    guard.record("search_orders", {}, {"orders": [{"order_id": v} for v in values]}, ledger=ledger)
    return guard, ledger


@pytest.mark.slow
@settings(max_examples=500, deadline=None, derandomize=True)
@given(_single_edit())
def test_every_single_edit_of_a_ledger_value_is_refused_as_a_near_miss(
    case: tuple[list[str], str],
) -> None:
    """Property: one edit of a ledger value (not itself a value or example) is mutated/truncated."""
    values, edited = case
    guard, ledger = _with_orders(values)
    kind = guard.kinds["order"]
    key = kind.key(edited)
    assume(key and ledger.get("order", edited) is None and key not in kind.examples)
    verdict = guard.check("issue_refund", {"order_id": edited}, ledger=ledger)
    assert not verdict.allowed
    assert [f.problem for f in verdict.findings] in (["mutated"], ["truncated"])


@pytest.mark.slow
@settings(max_examples=200, deadline=None, derandomize=True)
@given(_ORDER_VALUES, st.sampled_from(["{}", "#{}", " {} ", "##{}"]))
def test_no_verified_ledger_value_is_refused_by_a_write_tool(values: list[str], form: str) -> None:
    """Property: every verified ledger value, in any written form of it, passes a write tool."""
    guard, ledger = _with_orders(values)
    for value in values:
        written = form.format(value.lstrip("#"))
        verdict = guard.check("issue_refund", {"order_id": written}, ledger=ledger)
        assert verdict.allowed, (written, verdict.findings)


_PLAIN_VALUES = st.lists(
    st.text(alphabet=st.characters(blacklist_categories=("Z", "C")), min_size=1, max_size=12),
    min_size=1,
    max_size=6,
    unique=True,
)


@st.composite
def _single_edit_of_any_text(draw: st.DrawFn) -> tuple[list[str], str]:
    """Ledger values of any printable text, and one edit of one of them."""
    values = draw(_PLAIN_VALUES)
    value = draw(st.sampled_from(values))
    edit = draw(st.sampled_from(["substitute", "delete", "insert", "swap"]))
    at = draw(st.integers(0, len(value) - 1))
    char = draw(st.characters(blacklist_categories=("Z", "C")))
    if edit == "substitute":
        edited = value[:at] + char + value[at + 1 :]
    elif edit == "delete":
        edited = value[:at] + value[at + 1 :]
    elif edit == "insert":
        edited = value[:at] + char + value[at:]
    else:
        at = max(0, min(at, len(value) - 2))
        edited = value[:at] + value[at + 1 : at + 2] + value[at] + value[at + 2 :]
    return values, edited


@pytest.mark.slow
@settings(max_examples=500, deadline=None, derandomize=True)
@given(_single_edit_of_any_text())
def test_every_single_edit_of_any_text_id_is_refused_as_a_near_miss(
    case: tuple[list[str], str],
) -> None:
    """Property: for a kind with no shape, one edit of a ledger value is mutated or truncated."""
    values, edited = case
    guard = Guard()
    guard.add_kind("token")
    guard.declare("list_tokens", produces={"[*]": "token"}, effect="read")
    guard.declare("spend", ids={"token": "token"})
    ledger = guard.new_ledger("p")
    guard.record("list_tokens", {}, values, ledger=ledger)
    assume(edited and ledger.get("token", edited) is None)
    verdict = guard.check("spend", {"token": edited}, ledger=ledger)
    assert not verdict.allowed
    assert [f.problem for f in verdict.findings] in (["mutated"], ["truncated"])
    for value in values:  # and no ledger value is refused
        assert guard.check("spend", {"token": value}, ledger=ledger).allowed


# -- what a tool receives: the model's own argument, always ------------------------------------

#: Per normaliser: a pattern for reading the id from user text, and spellings it folds into one.
SPELLINGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "prefix:#": (r"#?W\d{7}", ("W5061109", "#W5061109")),
    "upper": (r"[A-Za-z]{2}\d{2}[A-Za-z]{2}", ("ab12cd", "AB12CD", "Ab12cD")),
    "lower": (r"[A-Za-z]{2}\d{2}[A-Za-z]{2}", ("AB12CD", "ab12cd", "aB12Cd")),
    "email": (
        r"[\w.+-]+@[\w.-]+\.[A-Za-z]{2,}",
        ("ana@example.com", "ana@Example.com", "ana@EXAMPLE.COM"),
    ),
    "url": (
        r"(?i:https?)://\S+",
        ("https://example.com/a", "HTTPS://EXAMPLE.COM/a", "https://example.com:443/a"),
    ),
    "number": (r"\+?\d+(?:\.\d+)?", ("42", "42.0", "042", "+42")),
    "strip": (r"W\d{7}", ("W5061109", " W5061109", "W5061109 ")),
}

#: An identifier parameter of the property's tools.
Thing = Annotated[str, Id("thing")]

#: How a call reaches a tool: the decorator's allowed path (a read, a write), its full check
#: (a write taking a list), a runtime running ``verdict.arguments`` after ``guard.enforce``,
#: and ``run_tool_calls`` answering a chat message.
CALLERS = ("read", "write", "write_many", "enforce", "loop")

#: One step of a conversation: the user types spelling i, a tool writes spelling i, or the
#: model calls a tool with spelling i through one of the callers.
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["user", "tool", *CALLERS]),
        st.integers(min_value=0, max_value=3),
    ),
    min_size=1,
    max_size=12,
)


@pytest.mark.slow
@pytest.mark.parametrize("normalizer", sorted(SPELLINGS))
@settings(max_examples=80, deadline=None, derandomize=True)
@given(steps=STEPS)
def test_a_tool_receives_exactly_the_models_own_argument(
    normalizer: str, steps: list[tuple[str, int]]
) -> None:
    """Property: a call that runs gets the model's own argument, whatever the ledger holds.

    Whatever the user typed and the tools wrote, in whatever spelling the
    normaliser folds together, and whichever way the call reaches the tool.
    """
    pattern, spellings = SPELLINGS[normalizer]
    guard = Guard(mode="reprompt", logger=SilentLogger(), max_reprompts=1000)
    guard.add_kind("thing", pattern=pattern, normalize=normalizer)
    received: list[object] = []
    written: list[str] = []

    @guard.tool(produces={"thing_id": "thing"}, effect="read")
    def lookup() -> dict[str, str]:
        return {"thing_id": written[-1]}

    @guard.tool(effect="read")
    def read(thing_id: Thing) -> str:
        received.append(thing_id)
        return "ok"

    @guard.tool(effect="write")
    def write(thing_id: Thing) -> str:
        received.append(thing_id)
        return "done"

    @guard.tool(effect="write")
    def write_many(thing_ids: list[Thing]) -> str:
        received.extend(thing_ids)
        return "done"

    def enforced(value: str) -> object:
        verdict = guard.enforce("write", {"thing_id": value})
        if not verdict.allowed:
            return Rejection(verdict)
        assert verdict.arguments is not None
        received.append(verdict.arguments["thing_id"])  # what a runtime runs the tool with
        return "done"

    toolbox = Toolbox(guard, {"write": write})

    def looped(value: str) -> object:
        arguments = json.dumps({"thing_id": value})
        function = {"name": "write", "arguments": arguments}
        message = {"role": "assistant", "tool_calls": [{"id": "c", "function": function}]}
        [answer] = run_tool_calls(guard, message, toolbox)
        return None if is_refusal(answer["content"]) else answer

    calls: dict[str, Callable[[str], object]] = {
        "read": read,
        "write": write,
        "write_many": lambda value: write_many([value]),
        "enforce": enforced,
        "loop": looped,
    }
    with guard.session("p"):
        for step, number in steps:
            spelling = spellings[number % len(spellings)]
            if step == "user":
                guard.observe_user(f"my id is {spelling} please")
            elif step == "tool":
                written.append(spelling)
                lookup()
            else:
                received.clear()
                answer = calls[step](spelling)
                if answer is None or isinstance(answer, Rejection):
                    assert received == []
                    continue
                assert received == [spelling], (step, spelling, received, written)
