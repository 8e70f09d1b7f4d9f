"""The guard: the decorator, its modes, and sessions isolated per conversation."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from structlog.testing import capture_logs

from guardrail import (
    Guard,
    GuardrailError,
    GuardrailUsageError,
    Id,
    IdentifierViolation,
    Ledger,
    MemoryStore,
    Rejection,
    RepromptLimitExceeded,
    Source,
    StoreError,
)
from guardrail._data.batch import Batch
from guardrail.ledger._ledger import state_of
from guardrail.stores.protocol import Snapshot

from .conftest import ORDERS, shop_guard, stored_ids

Order = Annotated[str, Id("order")]


class Refund(BaseModel):
    refund_id: Annotated[str, Id("item")]
    order_id: Annotated[str, Id("order")]


def kinds_only(mode: str = "raise", **options: Any) -> Guard:
    """A guard with the shop's kinds and none of its tools, for tests that decorate them."""
    guard = Guard(mode=mode, **options)  # type: ignore[arg-type]
    for kind in shop_guard().kinds.values():
        guard.add_kind(
            kind.name, pattern=kind.pattern, normalize=kind.normalize, examples=kind.examples
        )
    return guard


def build(mode: str = "raise", **options: Any) -> tuple[Guard, dict[str, Any]]:
    """A guard with decorated sync and async tools, and a log of what really ran."""
    guard = kinds_only(mode, **options)
    ran: dict[str, Any] = {"refunds": []}

    @guard.tool(produces={"orders[*].order_id": "order"}, effect="read")
    def search_orders(customer_id: Annotated[str, Id("customer")]) -> dict[str, Any]:
        """Find a customer's orders."""
        return ORDERS

    @guard.tool
    def issue_refund(order_id: Order, amount: int = 0) -> Refund:
        """Refund an order."""
        ran["refunds"].append(order_id)
        return Refund(refund_id="it_r001", order_id=order_id)

    @guard.tool(effect="write")
    async def issue_refund_async(order_id: Order, *, amount: int = 0) -> str:
        """Refund an order, asynchronously."""
        await asyncio.sleep(0)
        ran["refunds"].append(order_id)
        return "ok"

    ran.update(search=search_orders, refund=issue_refund, refund_async=issue_refund_async)
    return guard, ran


def test_decorated_tools_keep_signature_name_doc_and_coroutine_nature() -> None:
    """wrapt keeps everything a framework reads from a tool function."""
    _, tools = build()
    refund, refund_async = tools["refund"], tools["refund_async"]
    assert refund.__name__ == "issue_refund"
    assert refund.__doc__ == "Refund an order."
    assert list(inspect.signature(refund).parameters) == ["order_id", "amount"]
    assert inspect.iscoroutinefunction(refund_async)
    assert not inspect.iscoroutinefunction(refund)


def test_allowed_calls_run_and_results_are_harvested() -> None:
    """A call with ledger ids runs; the ids it returns enter the ledger, verified."""
    guard, tools = build()
    with guard.session("s") as ledger:
        guard.observe_user("I am cus_41ZpA9")
        tools["search"]("cus_41ZpA9")
        refund = tools["refund"]("#W8855135", amount=5)
        assert isinstance(refund, Refund)
        assert tools["refunds"] == ["#W8855135"]
        assert ledger.get("item", "it_r001") is not None
        assert ledger["order"].verified
        # The search succeeded but its result does not name the customer: not confirmed.
        assert not ledger["customer"].verified


def test_sync_and_async_calls_are_refused_alike_in_raise_mode() -> None:
    """raise mode raises IdentifierViolation carrying the verdict; the tool never runs."""
    guard, tools = build()

    async def both() -> None:
        async with guard.session("s"):
            with pytest.raises(IdentifierViolation) as info:
                await tools["refund_async"]("#W8855136")
            assert info.value.verdict.findings[0].problem == "mutated"
            await tools["refund_async"](order_id="#W8855135")

    with guard.session("s"):
        guard.observe_user("I am cus_41ZpA9")
        tools["search"]("cus_41ZpA9")
        with pytest.raises(IdentifierViolation, match="close to, but not the same as"):
            tools["refund"]("#W8855136")
    asyncio.run(both())
    assert tools["refunds"] == ["#W8855135"]


def test_reprompt_mode_returns_a_rejection_and_bounds_retries() -> None:
    """reprompt mode returns the message instead of running, and raises after N refusals."""
    guard, tools = build("reprompt", max_reprompts=2)
    with guard.session("s"):
        guard.observe_user("I am cus_41ZpA9")
        tools["search"]("cus_41ZpA9")
        first = tools["refund"]("#W8855136")
        assert isinstance(first, Rejection)
        assert first  # a Rejection is truthy: `result or default` keeps it
        assert str(first) == first.verdict.message
        assert first.to_dict()["findings"][0]["problem"] == "mutated"
        assert isinstance(tools["refund"]("#W8855137"), Rejection)
        with pytest.raises(RepromptLimitExceeded, match="2 refusals of issue_refund"):
            tools["refund"]("#W8855138")
        tools["refund"]("#W8855135")  # an allowed call runs, and does not reset the count
        with pytest.raises(RepromptLimitExceeded):
            tools["refund"]("#W8855136")
        guard.observe_user("Try again please.")  # a new user turn starts the count again
        assert isinstance(tools["refund"]("#W8855136"), Rejection)
    assert tools["refunds"] == ["#W8855135"]


def _parallel_steps(step: Any, *, steps: int = 10) -> tuple[int, BaseException | None]:
    """Run model steps until one raises: each step is one good and one bad call of a tool."""
    for number in range(1, steps + 1):
        try:
            step(number)
        except RepromptLimitExceeded as stop:
            return number, stop
    return steps, None


@pytest.mark.parametrize("order", ["good_first", "bad_first"])
def test_parallel_good_and_bad_calls_of_a_tool_meet_the_limit(order: str) -> None:
    """A good and a bad call of one tool per step: at most max_reprompts re-prompts, then raise."""
    guard, tools = build("reprompt", max_reprompts=2)
    refusals: list[Rejection] = []

    def step(number: int) -> None:
        calls = ["#W8855135", f"#W885513{5 + number}"]
        for order_id in calls if order == "good_first" else calls[::-1]:
            result = tools["refund"](order_id)
            if isinstance(result, Rejection):
                refusals.append(result)

    with guard.session("s"):
        guard.observe_user("I am cus_41ZpA9")
        tools["search"]("cus_41ZpA9")
        stopped_at, stop = _parallel_steps(step)
    assert isinstance(stop, RepromptLimitExceeded) and stop.limit == 2
    assert (stopped_at, len(refusals)) == (3, 2)


def test_parallel_async_calls_meet_the_limit_and_a_new_turn_resets_it() -> None:
    """The same with async tools gathered per step; observe_user starts a fresh count."""
    guard, tools = build("reprompt", max_reprompts=1)

    async def step(number: int) -> list[Any]:
        both = await asyncio.gather(
            tools["refund_async"]("#W8855135"),
            tools["refund_async"](f"#W885513{5 + number}"),
            return_exceptions=True,
        )
        return list(both)

    async def conversation() -> list[list[Any]]:
        steps = []
        async with guard.session("s"):
            guard.observe_user("I am cus_41ZpA9")
            tools["search"]("cus_41ZpA9")
            steps.append(await step(1))
            steps.append(await step(2))
            guard.observe_user("That was wrong, try again.")
            steps.append(await step(3))
        return steps

    first, second, after_new_turn = asyncio.run(conversation())
    assert first[0] == "ok" and isinstance(first[1], Rejection)
    assert second[0] == "ok" and isinstance(second[1], RepromptLimitExceeded)
    assert after_new_turn[0] == "ok" and isinstance(after_new_turn[1], Rejection)


def test_refusals_are_counted_per_tool_and_through_enforce() -> None:
    """guard.enforce (what runtimes call) counts per tool: one tool's refusals spare another."""
    guard = shop_guard("reprompt", max_reprompts=1)
    with guard.session("s"):
        guard.record("search_orders", {"customer_id": "cus_41ZpA9"}, ORDERS)
        assert not guard.enforce("issue_refund", {"order_id": "#W1111111"}).allowed
        assert guard.enforce("issue_refund", {"order_id": "#W8855135"}).allowed
        assert not guard.enforce("get_order", {"order_id": "#W1111111"}).allowed
        with pytest.raises(RepromptLimitExceeded, match="issue_refund"):
            guard.enforce("issue_refund", {"order_id": "#W1111111"})
        guard.observe_user("again")
        assert not guard.enforce("issue_refund", {"order_id": "#W1111111"}).allowed


def test_observe_mode_runs_the_tool_and_logs() -> None:
    """observe mode never blocks; the refusal is only logged."""
    guard, tools = build("observe")
    with guard.session("s"):
        tools["refund"]("#W1234567")
    assert tools["refunds"] == ["#W1234567"]


def test_tool_exceptions_propagate_unchanged() -> None:
    """An exception raised by the tool reaches the caller as it was raised."""
    guard = kinds_only()
    boom = ValueError("no such order")

    @guard.tool(effect="read")
    def get_order(order_id: Order) -> None:
        raise boom

    with guard.session("s"):
        guard.observe_user("order #W1234567")
        with pytest.raises(ValueError, match="no such order") as info:
            get_order("#W1234567")
        assert info.value is boom
        assert not guard.ledger["order"].verified


def test_methods_of_every_kind_are_guarded() -> None:
    """Instance, class and static methods read their id arguments at the right position."""
    guard = shop_guard()

    class Desk:
        @guard.tool
        def refund(self, order_id: Order) -> str:
            return f"refunded {order_id}"

        @guard.tool(name="refund_cls")
        @classmethod
        def refund_cls(cls, order_id: Order) -> str:
            return f"refunded {order_id}"

        @guard.tool(name="refund_static")
        @staticmethod
        def refund_static(order_id: Order) -> str:
            return f"refunded {order_id}"

    desk = Desk()
    with guard.session("s"):
        guard.record("search_orders", {}, ORDERS)
        for call in (desk.refund, Desk.refund_cls, desk.refund_cls, Desk.refund_static):
            assert call("W8855135") == "refunded W8855135"  # as the model wrote it
            with pytest.raises(IdentifierViolation):
                call("W8855136")
        assert Desk.refund(desk, "W8855135") == "refunded W8855135"
        with pytest.raises(IdentifierViolation):
            Desk.refund(desk, order_id="W8855136")


def test_the_per_call_path_does_not_inspect(monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything is compiled at decoration; calls never reach inspect."""
    guard, tools = build()

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("inspect called on the per-call path")

    monkeypatch.setattr(inspect, "signature", forbidden)
    monkeypatch.setattr(inspect, "getdoc", forbidden)
    with guard.session("s"):
        guard.record("search_orders", {}, ORDERS)
        tools["refund"]("W8855135", 3)


def test_mints_enter_the_ledger_after_a_successful_write() -> None:
    """A write that brings an id into existence makes it usable afterwards."""
    guard = shop_guard()
    guard.declare("invite", ids={}, mints={"email": "email"})
    guard.declare("send_mail", ids={"to": "email"})
    with guard.session("s"):
        assert not guard.check("send_mail", {"to": "new@example.com"}).allowed
        guard.record("invite", {"email": "new@example.com"}, {"ok": True}, error=True)
        assert not guard.check("send_mail", {"to": "new@example.com"}).allowed
        guard.record("invite", {"email": "New@Example.com"}, {"ok": True})
        assert guard.check("send_mail", {"to": "new@example.com"}).allowed


def test_calls_outside_a_session_are_usage_errors_unless_a_default_is_given() -> None:
    """A guarded call with no session says how to open one; a default session avoids it."""
    _guard, tools = build()
    with pytest.raises(GuardrailUsageError, match=r"with guard.session\(conversation_id\)"):
        tools["refund"]("W8855135")
    single, single_tools = build(default_session="default")
    single.record("search_orders", {}, ORDERS)
    assert isinstance(single_tools["refund"]("W8855135"), Refund)
    with single.session("other"), pytest.raises(IdentifierViolation):
        single_tools["refund"]("W8855135")


def test_same_session_id_gives_the_same_ledger_and_saved_ledgers_resume() -> None:
    """guard.session(id) twice shares one ledger; ledger= resumes a saved one."""
    guard = shop_guard()
    with guard.session("a") as first:
        guard.record("search_orders", {}, ORDERS)
    with guard.session("a") as again:
        assert again is first
    saved = first.to_json()
    other = shop_guard()
    with other.session("b", ledger=Ledger.from_json(saved)) as resumed:
        assert other.check("issue_refund", {"order_id": "W8855135"}).allowed
        assert resumed.session_id == "b"


def test_nested_sessions_restore_the_outer_one() -> None:
    """Leaving an inner session makes the outer one current again."""
    guard = shop_guard()
    with guard.session("outer") as outer:
        with guard.session("inner") as inner:
            assert guard.ledger is inner
        assert guard.ledger is outer


def test_each_guard_has_its_own_session_variable() -> None:
    """Two guards never see each other's current session."""
    one, two = shop_guard(), shop_guard()
    with one.session("x"), pytest.raises(GuardrailUsageError):
        two.check("issue_refund", {"order_id": "W1"})


def test_a_silenced_copy_checks_tools_declared_on_the_original_after_it() -> None:
    """A tool (and kind) declared on the guard after silenced() is known and checked by the copy."""
    guard = shop_guard()
    quiet = guard.silenced()
    guard.add_kind("ticket", pattern=r"T-\d{4}")
    guard.declare("cancel", ids={"order_id": "order"})
    guard.declare("list_tickets", produces={"[*]": "ticket"}, effect="read")
    assert quiet.specs["cancel"] is guard.specs["cancel"] and "ticket" in quiet.kinds
    ledger = guard.new_ledger("s")
    quiet.record("search_orders", {}, ORDERS, ledger=ledger)
    quiet.record("list_tickets", {}, ["T-0001"], ledger=ledger)
    refused = quiet.check("cancel", {"order_id": "W1234567"}, ledger=ledger)
    assert not refused.allowed and [f.problem for f in refused.findings] == ["unknown"]
    assert quiet.check("cancel", {"order_id": "W8855135"}, ledger=ledger).allowed
    assert ledger.get("ticket", "T-0001") is not None


def test_a_guard_checks_tools_declared_on_its_silenced_copy() -> None:
    """A tool declared (or decorated) on the silenced copy is checked by the original too."""
    guard = shop_guard()
    quiet = guard.silenced()
    quiet.declare("cancel", ids={"order_id": "order"})
    ran: list[str] = []

    @quiet.tool
    def close(order_id: Order) -> str:
        ran.append(order_id)
        return "closed"

    with guard.session("s") as ledger:
        guard.record("search_orders", {}, ORDERS)
        assert not guard.check("cancel", {"order_id": "W1234567"}).allowed
        assert guard.check("cancel", {"order_id": "W8855135"}, ledger=ledger).allowed
        with pytest.raises(IdentifierViolation):
            guard.enforce("close", {"order_id": "W1234567"})
        with pytest.raises(IdentifierViolation):
            close("W1234567")
        assert close("W8855135") == "closed"
    assert ran == ["W8855135"]  # as the model wrote it
    with pytest.raises(GuardrailUsageError, match="declared twice"):
        guard.declare("cancel", ids={"order_id": "item"})  # the copy's name is taken here too


def test_a_silenced_copy_shares_the_sessions_and_the_options() -> None:
    """The copy sees the original's current session, default session and store; same mode."""
    store = MemoryStore()
    guard = shop_guard("reprompt", store=store, default_session="d", max_reprompts=5)
    quiet = guard.silenced()
    assert quiet.ledger is guard.ledger  # the default session, opened by the copy first
    with guard.session("s") as ledger:
        assert quiet.ledger is ledger
        quiet.record("search_orders", {}, ORDERS)
    assert stored_ids(store, "s") == {entry.value for entry in ledger} and len(ledger) == 2
    assert (quiet.mode, quiet.max_reprompts, quiet.store) == ("reprompt", 5, store)
    assert (quiet.capacity, quiet.default_session) == (guard.capacity, "d")


def test_the_guard_options_read_back_and_are_not_reassigned() -> None:
    """The options are read as attributes; assigning one is refused, but for a valid mode."""
    store = MemoryStore()
    guard = Guard(
        "observe",
        50,
        store=store,
        default_session="d",
        refuse_undeclared=True,
        max_reprompts=1,
        tombstones=7,
        max_ids_per_call=9,
    )
    assert (guard.mode, guard.capacity, guard.store, guard.default_session) == (
        "observe",
        50,
        store,
        "d",
    )
    assert (guard.refuse_undeclared, guard.max_reprompts, guard.tombstones) == (True, 1, 7)
    assert (guard.max_ids_per_call, Guard(capacity=50).max_ids_per_call) == (9, 5)
    assert guard.kinds == {} and guard.specs == {}
    with pytest.raises(AttributeError):
        guard.capacity = 10  # type: ignore[misc]
    with pytest.raises(GuardrailUsageError, match="mode must be one of"):
        guard.mode = "loud"  # type: ignore[assignment]
    assert guard.mode == "observe"


def test_labels_and_the_labelling_tool() -> None:
    """Entries get meaningful roles from the program or from the agent's small tool."""
    guard = shop_guard()
    label = guard.labeling_tool()
    with guard.session("s") as ledger:
        guard.record("search_orders", {}, ORDERS)
        guard.label("order_2", "pending_order")
        assert label("order", "damaged_order").startswith("[damaged_order] now names")
        assert label("nope", "x").startswith("not labelled")
        assert ledger["damaged_order"].value == "#W8855135"
        assert ledger["order"] is ledger["damaged_order"]


def test_guard_options_are_validated() -> None:
    """Bad guard options say what is allowed."""
    with pytest.raises(GuardrailUsageError, match="mode must be one of"):
        Guard(mode="strict")  # type: ignore[arg-type]
    with pytest.raises(GuardrailUsageError, match="capacity"):
        Guard(capacity=0)
    with pytest.raises(GuardrailUsageError, match="session id"):
        Guard().session("")
    with pytest.raises(GuardrailUsageError, match="observe_user takes the user's text"):
        Guard(default_session="d").observe_user(None)  # type: ignore[arg-type]


session_ids = st.lists(
    st.integers(min_value=1, max_value=10**6), min_size=2, max_size=12, unique=True
)


@settings(max_examples=25, deadline=None)
@given(session_ids)
def test_sessions_stay_isolated_under_asyncio_gather(numbers: list[int]) -> None:
    """Property: concurrent conversations in asyncio tasks never see each other's ids."""
    guard = shop_guard()
    seen: dict[int, list[bool]] = {}

    async def conversation(n: int) -> None:
        async with guard.session(f"c{n}"):
            mine = f"W{n:07d}"
            guard.record("get_order", {}, {"order_id": mine})
            await asyncio.sleep(0)
            others = [f"W{m:07d}" for m in numbers if m != n]
            seen[n] = [guard.check("issue_refund", {"order_id": mine}).allowed]
            seen[n] += [not guard.check("issue_refund", {"order_id": o}).allowed for o in others]

    async def everyone() -> None:
        await asyncio.gather(*(conversation(n) for n in numbers))

    asyncio.run(everyone())
    assert all(all(flags) for flags in seen.values())


@settings(max_examples=10, deadline=None)
@given(session_ids)
def test_sessions_stay_isolated_in_a_thread_pool(numbers: list[int]) -> None:
    """Property: conversations served by a thread pool never see each other's ids."""
    guard = shop_guard()

    def conversation(n: int) -> bool:
        with guard.session(f"t{n}"):
            mine = f"W{n:07d}"
            guard.record("get_order", {}, {"order_id": mine})
            others = [f"W{m:07d}" for m in numbers if m != n]
            ok = guard.check("issue_refund", {"order_id": mine}).allowed
            return ok and not any(
                guard.check("issue_refund", {"order_id": o}).allowed for o in others
            )

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert all(pool.map(conversation, numbers))


def test_a_failing_normaliser_never_loses_the_tools_result() -> None:
    """If recording fails after the tool ran, the result still returns and nothing is added."""
    guard = Guard()

    def explode(value: str) -> str:
        raise RuntimeError("bad normaliser")

    guard.add_kind("thing", normalize=explode)

    @guard.tool(produces={"id": "thing"}, effect="read")
    def make() -> dict[str, str]:
        return {"id": "t1"}

    with guard.session("s") as ledger:
        assert make() == {"id": "t1"}
        assert len(ledger) == 0


def test_concurrent_recording_and_checking_in_one_session() -> None:
    """Threads recording and checking in one conversation keep one consistent ledger."""
    guard = shop_guard(capacity=50)

    def worker(n: int) -> None:
        with guard.session("shared"):
            for m in range(40):
                value = f"W{n:03d}{m:04d}"
                guard.record("get_order", {}, {"order_id": value})
                guard.check("get_order", {"order_id": value})
                guard.check("issue_refund", {"order_id": value[:-1]})

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(worker, range(8)))
    with guard.session("shared") as ledger:
        assert len(ledger) == 50
        assert len(ledger.tombstones()) == 50
        assert Ledger.from_json(ledger.to_json()) == ledger


def test_a_ledger_given_for_an_open_session_is_merged_into_it() -> None:
    """session(id, ledger=) while id is open elsewhere keeps one live ledger, which takes it in."""
    guard = shop_guard()
    saved = Ledger.from_json(shop_guard().new_ledger().to_json())
    batch = Batch.one("order", "W2378156", "W2378156", "p")
    state_of(saved).admit([batch], source=Source("t", None, "p", 0))
    with guard.session("s") as live:
        guard.record("get_order", {}, {"order_id": "W8855135"})
        with guard.session("s", ledger=saved) as inner:
            assert inner is live
            assert guard.check("issue_refund", {"order_id": "W2378156"}).allowed
            assert guard.check("issue_refund", {"order_id": "W8855135"}).allowed


def test_an_id_forgotten_after_a_copy_was_saved_stays_evicted_when_the_copy_comes_back() -> None:
    """A forget at a later turn beats the saved copy's older use: the id is refused as evicted."""
    guard = shop_guard()
    with guard.session("s") as ledger:
        guard.record("get_order", {}, {"order_id": "#W1000001"})
        saved = Ledger.from_json(ledger.to_json())
        guard.observe_user("forget that order")
        guard.forget("order")
    for copy in (saved, Ledger.from_json(saved.to_json())):
        with guard.session("s", ledger=copy):
            verdict = guard.check("issue_refund", {"order_id": "#W1000001"})
            assert not verdict.allowed
            assert [f.problem for f in verdict.findings] == ["evicted"]
    # The other way round too: the saved copy merged with the later one, in either order.
    later = guard.ledger_for("s")
    for first, second in ((saved, later), (later, saved)):
        merged = Ledger.from_json(first.to_json(), kinds=guard.kinds)
        merged.merge(Ledger.from_json(second.to_json(), kinds=guard.kinds))
        assert merged.get("order", "W1000001") is None
        assert [t.value for t in merged.tombstones()] == ["#W1000001"]


def test_a_session_that_failed_to_open_can_be_opened_again() -> None:
    """A store failing on load leaves no half-open session behind."""

    class Flaky(MemoryStore):
        fail = True

        def load(self, session_id: str) -> Snapshot | None:
            if self.fail:
                raise StoreError("down", session_id=session_id)
            return super().load(session_id)

    store = Flaky()
    guard = shop_guard(store=store)
    with pytest.raises(StoreError), guard.session("s"):
        pass
    assert guard.cached_sessions() == []
    store.fail = False
    with guard.session("s") as ledger:
        assert len(ledger) == 0


def test_pin_and_forget_through_the_guard() -> None:
    """guard.pin and guard.forget work on the current session; forgetting is logged."""
    guard = shop_guard(capacity=1, max_ids_per_call=2)
    with capture_logs() as logs, guard.session("s") as ledger:
        guard.record("search_orders", {}, ORDERS)
        guard.record("get_order", {}, {"order_id": "W1234567"})
        assert guard.pin("order_3").pinned
        guard.forget("order_3")
        assert "order_3" not in ledger
    assert any(e["event"] == "guardrail.id_evicted" and e["role"] == "order_3" for e in logs)


def test_a_scope_saves_its_session_even_while_another_scope_holds_it() -> None:
    """Each scope's end saves: a thread's ids reach the store before the other thread ends."""
    store = MemoryStore()
    guard = shop_guard(store=store)
    with guard.session("s") as outer:
        with guard.session("s"):
            guard.record("search_orders", {}, ORDERS)
        assert stored_ids(store, "s") == {entry.value for entry in outer} != set()


# -- what a successful read confirms ----------------------------------------------------------


@pytest.mark.parametrize(
    "result",
    [
        {"error": "no such order"},
        {"items": []},
        [],
        {"order_id": "#W7654321", "items": []},
        "order found",
    ],
)
def test_a_read_that_does_not_return_the_id_confirms_nothing(result: Any) -> None:
    """A user-typed id is verified only when a declared result field returns it."""
    guard = shop_guard()
    with guard.session("s"):
        guard.observe_user("my order is #W5555555")
        assert guard.check("get_order", {"order_id": "W5555555"}).allowed
        guard.record("get_order", {"order_id": "W5555555"}, result)
        verdict = guard.check("issue_refund", {"order_id": "W5555555"})
        assert [f.problem for f in verdict.findings] == ["unverified"]
        guard.record("get_order", {"order_id": "W5555555"}, {"order_id": "W5555555"})
        assert guard.check("issue_refund", {"order_id": "W5555555"}).allowed


def test_a_word_the_user_typed_is_not_verified_by_a_read_that_succeeds() -> None:
    """For a kind with no pattern, a read that returns nothing leaves the word unverified."""
    guard = kinds_only()
    guard.add_kind("hotel")
    ran: list[str] = []

    @guard.tool(effect="read")
    def find_hotel(name: Annotated[str, Id("hotel")]) -> list[str]:
        return []

    @guard.tool
    def book_hotel(name: Annotated[str, Id("hotel")]) -> str:
        ran.append(name)
        return "booked"

    with guard.session("s"):
        guard.observe_user("book me the Grand Hyatt")
        assert find_hotel("Grand Hyatt") == []
        with pytest.raises(IdentifierViolation, match="typed by the user"):
            book_hotel("Grand Hyatt")
    assert ran == []


@pytest.mark.parametrize("how", ["decorator", "declare", "manifest"])
def test_verifies_on_success_confirms_what_a_successful_read_took(how: str) -> None:
    """verifies="on_success", for tools that fail on unknown ids, keeps the old confirmation."""
    guard = kinds_only()
    if how == "manifest":
        guard.load_manifest(
            {
                "tools": {
                    "get_status": {
                        "effect": "read",
                        "ids": {"order_id": "order"},
                        "verifies": "on_success",
                    }
                }
            }
        )
    elif how == "declare":
        guard.declare("get_status", ids={"order_id": "order"}, effect="read", verifies="on_success")
    else:

        @guard.tool(effect="read", verifies="on_success")
        def get_status(order_id: Order) -> str:
            return "shipped"

    guard.declare("refund", ids={"order_id": "order"})
    assert guard.specs["get_status"].verifies == "on_success"
    with guard.session("s"):
        guard.observe_user("order #W5555555")
        guard.record("get_status", {"order_id": "W5555555"}, "Error: no such order", error=True)
        assert not guard.check("refund", {"order_id": "W5555555"}).allowed
        guard.record("get_status", {"order_id": "W5555555"}, "shipped")
        assert guard.check("refund", {"order_id": "W5555555"}).allowed


def test_verifies_false_means_the_default() -> None:
    """verifies=False is still accepted and confirms only what the result returns."""
    guard = shop_guard()
    guard.declare(
        "find", ids={"order_id": "order"}, produces={"id": "order"}, effect="read", verifies=False
    )
    with guard.session("s"):
        guard.observe_user("order #W5555555 and #W6666666")
        guard.record("find", {"order_id": "W5555555"}, {"ok": True})
        assert not guard.check("issue_refund", {"order_id": "W5555555"}).allowed
        guard.record("find", {"order_id": "W6666666"}, {"id": "#W6666666"})
        assert guard.check("issue_refund", {"order_id": "W6666666"}).allowed


def test_verifies_takes_a_boolean_or_on_success() -> None:
    """Any other value of verifies, or on_success on a write tool, is a usage error."""
    guard = kinds_only()
    with pytest.raises(GuardrailUsageError, match="verifies"):
        guard.declare("a", effect="read", verifies="always")  # type: ignore[arg-type]
    with pytest.raises(GuardrailUsageError, match="verifies"):
        guard.declare("b", effect="write", verifies="on_success")
    with pytest.raises(GuardrailUsageError, match="verifies"):
        guard.load_manifest({"tools": {"c": {"effect": "read", "verifies": "yes"}}})


# -- observe mode -----------------------------------------------------------------------------


def test_observe_mode_runs_a_call_it_would_refuse_but_learns_nothing_from_it() -> None:
    """A would-be refusal runs, but confirms, mints and harvests nothing, and says so."""
    guard = kinds_only("observe")
    ran: list[str] = []

    @guard.tool(
        effect="read",
        verifies="on_success",
        produces={"order_id": "order", "items[*].item_id": "item"},
    )
    def lookup(order_id: Order) -> dict[str, Any]:
        ran.append(f"lookup {order_id}")
        return {"order_id": order_id, "items": [{"item_id": "it_abcd"}]}

    @guard.tool(mints={"email": "email"})
    def invite(order_id: Order, email: str) -> str:
        ran.append(f"invite {order_id}")
        return "sent"

    with capture_logs() as logs, guard.session("s") as ledger:
        assert lookup("W1111111")["order_id"] == "W1111111"
        assert invite("W1111111", "eve@example.com") == "sent"
        assert len(ledger) == 0
        guard.observe_user("my order is #W2222222")
        lookup("W2222222")  # allowed (a typed id, to a read): harvested and confirmed
        assert ledger.get("item", "it_abcd") is not None
        assert ledger["order"].verified
        assert ledger["order"].value == "W2222222"  # the spelling the lookup's result wrote
    # Every call runs with the arguments as the model wrote them.
    assert ran == ["lookup W1111111", "invite W1111111", "lookup W2222222"]
    checked = [e for e in logs if e["event"] == "guardrail.call_checked"]
    assert [(e["outcome"], e["log_level"]) for e in checked] == [
        ("would_refuse", "warning"),
        ("would_refuse", "warning"),
        ("allowed", "debug"),
    ]


def test_observe_mode_record_after_enforce_learns_nothing_from_a_would_be_refusal() -> None:
    """A runtime's enforce() then record() of a call observe mode let run records nothing."""
    guard = shop_guard("observe")
    guard.declare("invite", ids={"order_id": "order"}, mints={"email": "email"})
    result = {"order_id": "W1111111", "items": [{"item_id": "it_abcd"}]}
    with guard.session("s") as ledger:
        assert not guard.enforce("get_order", {"order_id": "W1111111"}).allowed
        assert guard.record("get_order", {"order_id": "W1111111"}, result) == []
        arguments = {"order_id": "W1111111", "email": "eve@example.com"}
        assert not guard.enforce("invite", arguments).allowed
        assert guard.record("invite", arguments, "sent") == []
        assert len(ledger) == 0
        guard.record("search_orders", {}, ORDERS)  # a call observe mode would allow
        assert len(ledger) == 2


# -- error-shaped results ---------------------------------------------------------------------


ERROR_SHAPED = [
    {"error": "not found", "order_id": "W1111111", "items": [{"item_id": "it_abcd"}]},
    '{"isError": true, "order_id": "W1111111", "items": [{"item_id": "it_abcd"}]}',
    "guardrail refused the call to get_order; the tool did not run. W1111111 it_abcd",
]


@pytest.mark.parametrize("result", ERROR_SHAPED)
def test_record_learns_nothing_from_an_error_shaped_result(result: Any) -> None:
    """record() harvests, confirms and mints nothing from a result that is an error."""
    guard = shop_guard()
    guard.declare("create_item", produces={"$": "item", "re:(W\\d{7})": "order"}, effect="read")
    guard.declare("get_status", ids={"order_id": "order"}, effect="read", verifies="on_success")
    guard.declare("invite", mints={"email": "email"})
    with capture_logs() as logs, guard.session("s") as ledger:
        guard.observe_user("order #W1111111")
        for tool in ("get_order", "create_item", "get_status"):
            assert guard.record(tool, {"order_id": "W1111111"}, result) == []
        assert guard.record("invite", {"email": "eve@example.com"}, result) == []
        assert [entry.role for entry in ledger] == ["order"]
        assert not ledger["order"].verified
    recorded = [e for e in logs if e["event"] == "guardrail.ids_recorded"]
    assert [e["error"] for e in recorded] == [True] * 4


@pytest.mark.parametrize("result", [*ERROR_SHAPED, "rejection"])
def test_decorated_tools_learn_nothing_from_an_error_shaped_result(result: Any) -> None:
    """A decorated tool returning an error mapping, a refusal or a Rejection records nothing."""
    guard = kinds_only("reprompt")

    @guard.tool(effect="read", name="nested_refund")
    def nested_refund(order_id: Order) -> str:
        return "done"

    @guard.tool(mints={"email": "email"})
    def invite(email: str) -> Any:
        if result == "rejection":
            return nested_refund("W0000001")  # a guarded tool refusing inside
        return result

    @guard.tool(
        effect="read",
        verifies="on_success",
        produces={"order_id": "order", "items[*].item_id": "item"},
    )
    def get_order(order_id: Order) -> Any:
        return invite("eve@example.com")

    with guard.session("s") as ledger:
        guard.observe_user("order #W1111111")
        get_order("W1111111")
        assert [entry.role for entry in ledger] == ["order"]
        assert not ledger["order"].verified


# -- normalisers that fail ----------------------------------------------------------------------


def _picky(value: str) -> str:
    """A user normaliser that fails on some values and returns no text for others."""
    if "!" in value:
        raise ValueError("cannot read this one")
    if "?" in value:
        return None  # type: ignore[return-value]
    return value.strip().upper()


@pytest.mark.parametrize("fast", [True, False])
def test_a_failing_normaliser_never_crashes_a_call(fast: bool) -> None:
    """A value no normaliser can read is refused as malformed, on every path."""
    guard = Guard(mode="reprompt")
    guard.add_kind("ticket", normalize=_picky)
    guard.declare("list_tickets", produces={"[*]": "ticket"}, effect="read")
    ran: list[str] = []

    @guard.tool
    def close(ticket: Annotated[str, Id("ticket")]) -> str:
        ran.append(ticket)
        return "closed"

    if not fast:
        guard._registry.plans["close"] = dataclasses.replace(
            guard._registry.plans["close"], fast=None
        )
    with guard.session("s"):
        guard.record("list_tickets", {}, ["t1"])
        for bad in ("bad!", "what?"):
            verdict = guard.check("close", {"ticket": bad})
            assert [f.problem for f in verdict.findings] == ["malformed"]
            assert isinstance(close(bad), Rejection)
        assert close("t1") == "closed"
    assert ran == ["t1"]


def test_record_keeps_the_ids_a_failing_normaliser_can_read() -> None:
    """A result with one unreadable value still records the rest, and says what it skipped."""
    guard = Guard()
    guard.add_kind("ticket", normalize=_picky)
    guard.declare("list_tickets", produces={"[*]": "ticket"}, effect="read")
    guard.declare("find", ids={"ids[*]": "ticket"}, effect="read", verifies="on_success")
    guard.declare("open_all", mints={"ids[*]": "ticket"})
    with capture_logs() as logs, guard.session("s") as ledger:
        added = guard.record("list_tickets", {}, ["t1", "bad!", "t2"])
        assert [entry.key for entry in added] == ["T1", "T2"]
        assert [
            e.key for e in guard.record("open_all", {"ids": ["t3", "x!", "y?", "t4"]}, "ok")
        ] == [
            "T3",
            "T4",
        ]
        guard.record("find", {"ids": ["t5", "bad!"]}, "found")
        assert [entry.key for entry in ledger] == ["T1", "T2", "T3", "T4", "T5"]
    unreadable = [e for e in logs if e["event"] == "guardrail.result_unreadable"]
    assert [(e["tool"], len(e["problems"])) for e in unreadable] == [
        ("list_tickets", 1),
        ("open_all", 1),
        ("find", 1),
    ]


def test_a_value_another_kinds_normaliser_chokes_on_is_refused_not_a_crash() -> None:
    """A refused value is read by the ledger's other kinds too; one failing is no crash.

    The order kind reads it fine, so it is simply unknown; the url kind's failure to read it
    (looking for a wrong-kind match) changes nothing.
    """
    guard = Guard()
    guard.add_kind("order")
    guard.add_kind("url", normalize="url")
    guard.declare("list_links", produces={"[*]": "url"}, effect="read")
    guard.declare("refund", ids={"order_id": "order"})
    with guard.session("s"):
        guard.record("list_links", {}, ["https://a.example/x"])
        verdict = guard.check("refund", {"order_id": "http://[::1"})
    assert [f.problem for f in verdict.findings] == ["unknown"]


# -- fuzz: any call, any result, only the library's own errors --------------------------------


def _fuzz_guard(mode: str) -> Guard:
    """Tools with every parameter and result shape, kinds with every normaliser."""
    guard = shop_guard(mode, max_reprompts=1000)
    guard.add_kind("amount", normalize="number")
    guard.add_kind("link", normalize="url")
    guard.add_kind("picky", normalize=_picky)
    guard.declare(
        "get",
        effect="read",
        ids={"id": "order"},
        produces={"rows[*].id": {"kind": "order", "status": "state"}, "id": "order", "~": "link"},
    )
    guard.declare(
        "find",
        effect="read",
        verifies="on_success",
        ids={"who": ["customer", "email"], "tags": {"kind": "picky", "sep": ","}},
        produces={"items[*]": "picky", "*.n": "amount"},
    )
    guard.declare(
        "put",
        ids={"flights[*].n": "amount", "link": "link", "id": ["order", "picky"]},
        mints={"new": "email"},
        produces={"re:(W\\d{3,7})": "order", "a.~": "picky"},
    )
    guard.declare("odd", ids={"a.~": "picky", "b.*.c": "order", "c[0]": "customer"})
    guard.declare("plain", ids={"id": "picky", "link": ["customer", "link"]})  # the fast path
    return guard


_FUZZ_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=10),
        st.sampled_from(
            ["W1234567", "#W8855135", "W8855136", "cus_ABC123", "a@b.c", "x!", "y?", "1e3"]
        ),
        st.sampled_from(["http://[::1", "https://a.example/x", "１０００", "it_abcd", "W0000000"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(["rows", "id", "n", "c", "state", "error", "items", "a"]),
            inner,
            max_size=3,
        ),
        st.lists(inner, max_size=3).map(json.dumps),
    ),
    max_leaves=12,
)
_FUZZ_ARGUMENTS = st.one_of(
    st.dictionaries(
        st.sampled_from(["id", "who", "tags", "flights", "link", "new", "a", "b", "c", "x"]),
        _FUZZ_VALUES,
        max_size=4,
    ),
    st.dictionaries(st.sampled_from(["id", "flights", "tags"]), _FUZZ_VALUES).map(json.dumps),
    st.text(max_size=12),
    st.binary(max_size=12),
    st.none(),
)
_FUZZ_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["check", "enforce", "record", "record", "observe"]),
        st.sampled_from(["get", "find", "put", "odd", "plain", "search_orders", "nope"]),
        _FUZZ_ARGUMENTS,
        st.one_of(_FUZZ_VALUES, _FUZZ_VALUES.map(json.dumps), st.text(max_size=30)),
        st.booleans(),
    ),
    max_size=8,
)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None, derandomize=True)
@given(mode=st.sampled_from(["raise", "reprompt", "observe"]), steps=_FUZZ_STEPS)
def test_fuzz_check_and_record_raise_only_the_librarys_errors(
    mode: str, steps: list[tuple[str, str, Any, Any, bool]]
) -> None:
    """Random calls and results: check, enforce and record raise nothing but GuardrailError."""
    guard = _fuzz_guard(mode)
    with guard.session("fuzz") as ledger:
        guard.record("search_orders", {}, ORDERS)
        for action, tool, arguments, result, error in steps:
            try:
                if action == "check":
                    guard.check(tool, arguments)
                elif action == "enforce":
                    guard.enforce(tool, arguments)
                elif action == "record":
                    guard.record(tool, arguments, result, error=error)
                else:
                    guard.observe_user(str(result))
            except GuardrailError:
                pass
        assert Ledger.from_json(ledger.to_json()) == ledger


def test_a_reprompt_names_each_lookup_tool_once() -> None:
    """A read tool declaring two paths of one kind is cited once in "look it up with"."""
    guard = Guard(mode="reprompt")
    guard.add_kind("card")
    guard.declare("get_user", effect="read", produces={"cards.~": "card", "cards.*.id": "card"})
    guard.declare("pay", ids={"card_id": "card"})
    with guard.session("s"):
        message = guard.check("pay", {"card_id": "c-1"}).message
    assert "look it up with get_user," in message or "look it up with get_user or" in message
    assert message.count("get_user") == 1
