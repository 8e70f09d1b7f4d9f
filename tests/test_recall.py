"""A read that returns a record it returned before: not walked again, recorded as in full.

Every test here runs the same calls through two guards alike in all but one
thing: one keeps a read tool's plain records and lets a held, settled id
only be marked used; the other records every result in full. Their ledgers
must stay the same after every step, whatever the results: held ids
repeated beside a new one, a held id with a new status, note, spelling or
kind, a failure, an unverified or evicted entry.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrail import Guard, Ledger, SQLiteStore
from guardrail._provenance import recall as recall_module
from guardrail._provenance.recall import Recall
from guardrail.ledger._ledger import state_of
from guardrail.ledger._settled import settled

O1, O2, O3 = "W1000001", "W1000002", "W1000003"
C1, C2 = "cus_AAAAAA", "cus_BBBBBB"

BASE = {"order_id": O1, "customer_id": C1, "status": "paid"}
#: Results a read may return: each differs from BASE in one way the record must see.
RESULTS: dict[str, Any] = {
    "base": BASE,
    "again": dict(BASE),
    "reordered": {"customer_id": C1, "order_id": O1, "status": "paid"},
    "status": {**BASE, "status": "refunded"},
    "no status": {"order_id": O1, "customer_id": C1},
    "named": {**BASE, "name": "Kettle K2"},
    "renamed": {**BASE, "name": "Vortex blender"},
    "int": {**BASE, "amount": 1},
    "float": {**BASE, "amount": 1.0},
    "bool": {**BASE, "amount": True},
    "zero": {**BASE, "amount": 0.0},
    "negative zero": {**BASE, "amount": -0.0},
    "spelled": {**BASE, "order_id": "#W1000001"},
    "new order": {**BASE, "order_id": O2},
    "new customer": {**BASE, "customer_id": C2},
    "other": {"order_id": O3, "customer_id": C2, "status": "pending"},
    "failed": {**BASE, "error": "order not found"},
    "is_error": {**BASE, "is_error": True},
    "nested new id": {**BASE, "lines": [{"order_id": O2}]},
    "example": {**BASE, "order_id": "#W0000000"},
    "json text": json.dumps(BASE),
    "failed text": json.dumps({**BASE, "error": "order not found"}),
    "literal text": str(BASE),
    "list text": json.dumps([BASE]),
    "padded text": json.dumps({**BASE, "pad": "x" * 20_000}),
    "none": {"order_id": None, "customer_id": C1, "status": "paid"},
}
#: How a read reaches the guard: its decorated tool, or ``Guard.record`` of what it returned.
VIAS = ("tool", "record")
#: What the user may type: ids that enter unverified.
TEXTS = (f"where is {O1}?", f"and {O2} for {C2}", "hello")


class Pair:
    """Two guards alike but for the recall, each with its ledger, and the tools of each."""

    def __init__(
        self, capacity: int = 1000, store_dir: Path | None = None, *, via: str = "tool"
    ) -> None:
        #: "tool": each read calls the decorated tool; "record": ``Guard.record`` of its result.
        self.via = via
        self.result: Any = None
        self.sides: list[tuple[Guard, Ledger, dict[str, Callable[[], Any]]]] = []
        for recall in (True, False):
            store = None if store_dir is None else SQLiteStore(store_dir / f"{recall}.db")
            guard = Guard(
                logger=_quiet_logger(),
                capacity=capacity,
                store=store,
            )
            guard.add_kind(
                "order",
                pattern=r"#?W\d{7}",
                normalize=["strip", "prefix:#"],
                examples=["#W0000000"],
            )
            guard.add_kind("customer", pattern=r"cus_[A-Za-z0-9]{6}")

            @guard.tool(
                effect="read",
                produces={
                    "order_id": {"kind": "order", "status": "status"},
                    "customer_id": "customer",
                },
            )
            def get_order() -> Any:
                return self.result

            # The same field under another kind: a held id re-returned as another kind.
            @guard.tool(effect="read", produces={"order_id": "customer"})
            def order_as_customer() -> Any:
                return self.result

            @guard.tool(
                effect="read",
                produces={"order_id": {"kind": "order", "status": "status", "outside": True}},
            )
            def outside_order() -> Any:
                return self.result

            tools = {"get_order": get_order, "as customer": order_as_customer}
            tools["outside"] = outside_order
            if not recall:
                for tool in tools.values():
                    guarded = tool.__guardrail_tool__  # type: ignore[attr-defined]
                    guarded.recalled = (guarded.plans[guarded.name], None)
                    guard._engine.recalls._by_tool[guarded.name] = guarded.recalled
            ledger = guard.new_ledger("s") if store is None else Ledger(session_id="s")
            self.sides.append((guard, ledger, tools))

    @property
    def recalled(self) -> Guard:
        return self.sides[0][0]

    def read(self, tool: str, result: Any) -> None:
        self.result = result
        for guard, ledger, tools in self.sides:
            with guard.session("s", ledger=ledger):
                if self.via == "record":
                    name = tools[tool].__guardrail_tool__.name  # type: ignore[attr-defined]
                    guard.record(name, {}, result)
                else:
                    tools[tool]()

    def user(self, text: str) -> None:
        for guard, ledger, _ in self.sides:
            guard.observe_user(text, ledger=ledger)

    def forget(self, role: str) -> None:
        for guard, ledger, _ in self.sides:
            if role in ledger.roles:
                with guard.session("s", ledger=ledger):
                    ledger.forget(role)

    def assert_same(self) -> None:
        (_, first, _), (_, second, _) = self.sides
        assert _saved(first) == _saved(second)
        a, b = state_of(first), state_of(second)
        assert [(e.kind, e.key, e.epoch) for e in a] == [(e.kind, e.key, e.epoch) for e in b]
        assert (a.epoch, a.turn) == (b.epoch, b.turn)


def _saved(ledger: Ledger) -> dict[str, Any]:
    """The ledger as saved, but for the random value naming this life of it."""
    saved = ledger.to_dict()
    saved["meta"].pop("instance")
    return saved


def _quiet_logger() -> logging.Logger:
    logger = logging.getLogger("guardrail.tests.recall")
    logger.setLevel(logging.WARNING)
    return logger


@pytest.fixture
def settled_calls(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """What each look at a kept record found: True where it only marked the ids used."""
    calls: list[bool] = []
    real = settled

    def spy(state: Any, ids: Any) -> bool:
        calls.append(real(state, ids))
        return calls[-1]

    monkeypatch.setattr(recall_module, "settled", spy)
    return calls


@pytest.mark.parametrize("via", VIAS)
def test_a_repeated_read_of_held_ids_only_marks_them_used(
    settled_calls: list[bool], via: str
) -> None:
    pair = Pair(via=via)
    pair.read("get_order", BASE)
    pair.user("next turn")
    pair.read("get_order", dict(BASE))
    pair.assert_same()
    assert settled_calls == [True]
    entry = pair.sides[0][1].get("order", O1)
    assert entry is not None and entry.last_used == 1 and entry.status == "paid"


@pytest.mark.parametrize(
    "second",
    [name for name in RESULTS if name not in ("base", "again", "json text", "literal text")],
)
@pytest.mark.parametrize("via", VIAS)
def test_a_record_that_differs_in_any_way_is_recorded_in_full(
    second: str, settled_calls: list[bool], via: str
) -> None:
    pair = Pair(via=via)
    pair.read("get_order", BASE)
    pair.read("get_order", BASE)
    pair.user("next turn")
    pair.read("get_order", RESULTS[second])
    pair.assert_same()
    assert settled_calls[0] is True
    assert len(settled_calls) == 1  # the different record was never taken for the kept one


def test_a_new_status_of_a_held_id_is_recorded() -> None:
    pair = Pair()
    pair.read("get_order", BASE)
    pair.read("get_order", RESULTS["status"])
    pair.read("get_order", BASE)  # kept before, but the ledger holds another status now
    pair.assert_same()
    assert pair.sides[0][1].get("order", O1).status == "paid"  # type: ignore[union-attr]


def test_a_new_note_of_a_held_id_is_recorded(settled_calls: list[bool]) -> None:
    pair = Pair()
    pair.read("get_order", RESULTS["named"])
    pair.read("get_order", RESULTS["renamed"])
    pair.read("get_order", RESULTS["named"])  # kept, but the ledger holds the other note now
    pair.assert_same()
    assert settled_calls == [False]
    assert pair.sides[0][1].get("order", O1).note == "Kettle K2"  # type: ignore[union-attr]


def test_a_held_id_returned_under_another_kind_is_added() -> None:
    pair = Pair()
    pair.read("get_order", BASE)
    pair.read("as customer", BASE)
    pair.read("as customer", BASE)
    pair.assert_same()
    assert pair.sides[0][1].get("customer", O1) is not None


def test_a_failed_result_records_nothing_even_after_the_same_ids() -> None:
    pair = Pair()
    pair.read("get_order", BASE)
    pair.read("get_order", RESULTS["failed"])
    pair.read("get_order", RESULTS["new order"] | {"error": "no such order"})
    pair.assert_same()
    assert pair.sides[0][1].get("order", O2) is None


def test_an_id_the_user_typed_is_verified_by_a_kept_record() -> None:
    pair = Pair()
    pair.read("get_order", BASE)  # kept in the recall, in another session of the same guard
    fresh = [(guard, guard.new_ledger("t"), tools) for guard, _, tools in pair.sides]
    for guard, ledger, tools in fresh:
        guard.observe_user(f"where is {O1}?", ledger=ledger)
        with guard.session("t", ledger=ledger):
            tools["get_order"]()
    entries = [ledger.get("order", O1) for _, ledger, _ in fresh]
    assert all(entry is not None and entry.verified for entry in entries)
    assert _saved(fresh[0][1]) == _saved(fresh[1][1])


def test_an_evicted_id_comes_back_from_a_kept_record() -> None:
    pair = Pair(capacity=2)
    pair.read("get_order", BASE)
    pair.user("next")
    pair.read("get_order", RESULTS["other"])  # evicts the first two
    pair.read("get_order", BASE)
    pair.assert_same()
    assert pair.sides[0][1].get("order", O1) is not None


def test_an_outside_read_does_not_lower_a_produced_id() -> None:
    pair = Pair()
    pair.read("outside", BASE)
    pair.read("get_order", BASE)
    pair.read("get_order", BASE)
    pair.read("outside", BASE)
    pair.assert_same()
    entry = pair.sides[0][1].get("order", O1)
    assert entry is not None and not entry.outside


def test_a_kept_record_raises_an_id_an_outside_party_chose(settled_calls: list[bool]) -> None:
    pair = Pair()
    pair.read("get_order", BASE)  # kept
    pair.forget("order")
    pair.read("outside", BASE)  # back, as an outside party's
    pair.read("get_order", BASE)  # the kept record: the id is no longer only the outside's
    pair.assert_same()
    assert settled_calls == [False]
    entry = pair.sides[0][1].get("order", O1)
    assert entry is not None and not entry.outside


def test_a_debug_logger_sees_every_record() -> None:
    guard = Guard(logger=logging.getLogger("guardrail.tests.recall.debug"))
    logging.getLogger("guardrail.tests.recall.debug").setLevel(logging.DEBUG)
    guard.add_kind("order", normalize="strip")

    @guard.tool(effect="read", produces={"order_id": "order"})
    def get_order() -> dict[str, str]:
        return {"order_id": O1}

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    logging.getLogger("guardrail.tests.recall.debug").addHandler(handler)
    try:
        with guard.session("s"):
            get_order()
            get_order()
    finally:
        logging.getLogger("guardrail.tests.recall.debug").removeHandler(handler)
    recorded = [r for r in records if "ids_recorded" in r.getMessage()]
    assert len(recorded) == 2


def test_a_store_sees_the_use_a_kept_record_marks(tmp_path: Path) -> None:
    pair = Pair(store_dir=tmp_path)
    pair.read("get_order", BASE)
    for turn in range(3):
        pair.user(f"turn {turn}")
        pair.read("get_order", BASE)
    stored = []
    for recall in (True, False):
        guard = Guard(store=SQLiteStore(tmp_path / f"{recall}.db"))
        guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
        guard.add_kind("customer", pattern=r"cus_[A-Za-z0-9]{6}")
        with guard.session("s") as ledger:
            stored.append(_saved(ledger))
            entry = ledger.get("order", O1)
            assert entry is not None and entry.last_used == 3
    assert stored[0] == stored[1]


def test_only_plain_records_of_flat_fields_are_kept() -> None:
    guard = Guard()
    guard.add_kind("order", normalize="strip")
    flat = guard.declare("flat", produces={"order_id": "order"}, effect="read")
    deep = guard.declare("deep", produces={"orders[*].order_id": "order"}, effect="read")
    text = guard.declare("text", produces={"$": "order"}, effect="read")
    assert Recall.of(flat, mentions=False) is not None
    assert Recall.of(flat, mentions=True) is None
    assert Recall.of(deep, mentions=False) is None
    assert Recall.of(text, mentions=False) is None
    recall = Recall()
    recall.keep({"order_id": O1, "lines": [1]}, [])
    recall.keep({"order_id": O2, "big": "x" * 10_000}, [])
    recall.keep({"order_id": O3, "total": 0.0}, [])
    assert recall.get({"order_id": O1, "lines": [1]}) is None
    assert recall.get({"order_id": O2, "big": "x" * 10_000}) is None
    assert recall.get({"order_id": O3, "total": 0.0}) is None
    recall.keep({"order_id": O1, "total": 1}, [])
    assert recall.get({"order_id": O1, "total": 1}) is not None
    assert recall.get({"order_id": O1, "total": 1.0}) is None
    assert recall.get({"order_id": O1, "total": True}) is None
    assert recall.get({"total": 1, "order_id": O1}) is None


_STEPS = st.one_of(
    st.tuples(
        st.just("read"),
        st.sampled_from(("get_order", "as customer", "outside")),
        st.sampled_from(sorted(RESULTS)),
    ),
    st.tuples(st.just("user"), st.sampled_from(TEXTS), st.none()),
    st.tuples(st.just("forget"), st.sampled_from(("order", "customer", "order_2")), st.none()),
)


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(_STEPS, max_size=14),
    capacity=st.sampled_from((2, 3, 1000)),
    via=st.sampled_from(VIAS),
)
def test_any_sequence_of_calls_leaves_both_ledgers_alike(
    steps: list[tuple[str, str, str | None]], capacity: int, via: str
) -> None:
    pair = Pair(capacity=capacity, via=via)
    for action, what, result in steps:
        if action == "read":
            assert result is not None
            pair.read(what, RESULTS[result])
        elif action == "user":
            pair.user(what)
        else:
            pair.forget(what)
        pair.assert_same()


async def _three_async_reads(recall: bool) -> Ledger:
    """A held id read twice, then with a new status, through an async tool."""
    guard = Guard(logger=_quiet_logger())
    guard.add_kind("order", normalize="strip")
    result = {"order_id": O1, "status": "paid"}

    @guard.tool(effect="read", produces={"order_id": {"kind": "order", "status": "status"}})
    async def get_order() -> dict[str, str]:
        return dict(result)

    if not recall:
        guarded = get_order.__guardrail_tool__  # type: ignore[attr-defined]
        guarded.recalled = (guarded.plans[guarded.name], None)
    ledger = guard.new_ledger("s")
    with guard.session("s", ledger=ledger):
        await get_order()
        guard.observe_user("next", ledger=ledger)
        await get_order()
        result["status"] = "refunded"
        await get_order()
    return ledger


def test_an_async_read_takes_the_same_path(settled_calls: list[bool]) -> None:
    ledgers = [asyncio.run(_three_async_reads(recall)) for recall in (True, False)]
    assert _saved(ledgers[0]) == _saved(ledgers[1])
    assert settled_calls == [True]
    assert ledgers[0].get("order", O1).status == "refunded"  # type: ignore[union-attr]


# -- Guard.record: what a runtime reports ------------------------------------------------------


def test_guard_record_of_a_settled_read_returns_nothing_added(settled_calls: list[bool]) -> None:
    pair = Pair(via="record")
    guard, ledger, _ = pair.sides[0]
    with guard.session("s", ledger=ledger):
        first = guard.record("get_order", {}, BASE, call_id="c1")
        again = guard.record("get_order", {}, dict(BASE), call_id="c2")
    assert [entry.key for entry in first] == [O1, C1]
    assert again == []
    assert settled_calls == [True]
    entry = ledger.get("order", O1)
    assert entry is not None and entry.source.call_id == "c1"


def test_a_kept_record_reported_untrusted_verifies_nothing(settled_calls: list[bool]) -> None:
    """A client's copy of a result (no seal) is not the tool's: a kept twin changes nothing."""
    pair = Pair(via="record")
    guard, _, _ = pair.sides[0]
    with guard.session("s", ledger=guard.new_ledger("other")):
        guard.record("get_order", {}, BASE)  # kept, in another session
    fresh = guard.new_ledger("t")
    guard.observe_user(f"where is {O1}?", ledger=fresh)
    with guard.session("t", ledger=fresh):
        guard.record("get_order", {}, dict(BASE), trusted=False)
        guard.record("get_order", {}, dict(BASE), error=True)
    entry = fresh.get("order", O1)
    assert entry is not None and not entry.verified
    assert fresh.get("customer", C1) is not None and not fresh.get("customer", C1).verified  # type: ignore[union-attr]
    assert settled_calls == []


def test_a_kept_record_of_a_call_observe_mode_would_refuse_records_nothing() -> None:
    guard = Guard(mode="observe", logger=_quiet_logger())
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    guard.add_kind("customer", pattern=r"cus_[A-Za-z0-9]{6}")
    guard.declare("get_order", produces={"order_id": "order", "customer_id": "customer"})
    guard.declare("refund_lookup", ids={"order_id": "order"}, produces={"customer_id": "customer"})
    with guard.session("s"):
        guard.record("get_order", {}, BASE)
        guard.record("refund_lookup", {"order_id": O1}, {"customer_id": C1})  # kept
    ledger = guard.new_ledger("t")
    with guard.session("t", ledger=ledger):
        guard.record("get_order", {}, {"order_id": O2, "customer_id": C1})  # C1 held, not O1
        guard.observe_user("and the other order?")
        # O1 appears in no result of this session: observe lets the call run, records nothing,
        # not even a use of C1, which the kept record would settle were the call allowed
        assert guard.record("refund_lookup", {"order_id": O1}, {"customer_id": C1}) == []
        guard.record("refund_lookup", {"order_id": O2}, {"customer_id": C1})  # allowed: a use
    entry = ledger.get("customer", C1)
    assert entry is not None and entry.last_used == 1
    with guard.session("t", ledger=ledger):
        guard.observe_user("next")
        guard.record("refund_lookup", {"order_id": O1}, {"customer_id": C1})
    assert entry.last_used == 1


def test_guard_record_of_a_json_text_finds_the_record_its_object_left(
    settled_calls: list[bool],
) -> None:
    """A runtime reporting results as JSON text reads as one reporting the dict."""
    pair = Pair(via="record")
    pair.read("get_order", json.dumps(BASE))
    pair.read("get_order", BASE)
    pair.read("get_order", json.dumps(BASE, indent=2))
    pair.read("get_order", str(BASE))  # a Python literal: read, not recalled
    pair.read("get_order", json.dumps({**BASE, "pad": "x" * 20_000}))  # too long to recall
    pair.assert_same()
    assert settled_calls == [True, True]


def test_a_decorated_read_returning_json_text_finds_its_kept_record(
    settled_calls: list[bool],
) -> None:
    """A tool that returns its record as JSON text is recalled as one returning the dict."""
    pair = Pair()
    pair.read("get_order", json.dumps(BASE))
    pair.read("get_order", json.dumps(BASE))
    pair.read("get_order", BASE)
    pair.read("get_order", json.dumps({**BASE, "status": "refunded"}))  # another status: in full
    pair.assert_same()
    assert settled_calls == [True, True]
    assert pair.sides[0][1].get("order", O1).status == "refunded"  # type: ignore[union-attr]
