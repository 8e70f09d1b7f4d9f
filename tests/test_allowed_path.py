"""The allowed path against the full check: the same verdicts, events and ledgers.

A decorated tool whose ids are all held runs the allowed path compiled for it
(:mod:`guardrail._check.allowed`) and skips recording a result that brings
nothing in; every other call goes through the full check and the full record.
Each scenario here runs twice on twin guards, once as declared and once with
the allowed path and the quiet results taken out of every plan, and must leave
the same results, refusals, audit events and ledger.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import pytest
from structlog.testing import capture_logs

from guardrail import Guard, Id, Ledger
from guardrail._check.allowed import (
    NO_DEFAULT,
    FastParams,
    OtherKind,
    allowed_entries,
    compile_allowed,
    refer,
)
from guardrail._data.batch import Batch
from guardrail.errors import GuardrailError
from guardrail.ledger import Source
from guardrail.ledger._ledger import state_of

Tools = dict[str, Callable[..., Any]]


def build(mode: str, *, mentions: bool = False) -> tuple[Guard, Tools]:
    """A guard with tools of one to three ids, reads, results of every shape."""
    guard = Guard(mode=mode)  # type: ignore[arg-type]
    guard.add_kind("customer", pattern=r"cus_[a-z0-9]{4}")
    guard.add_kind("order", pattern=r"ord_[a-z0-9]{4}", normalize="lower")
    if mentions:
        guard.add_kind("iban", pattern=r"DE[0-9]{6}", mentions="ask")
    results: dict[str, Any] = {}

    @guard.tool(effect="read", produces={"orders[*].id": "order", "customer.id": "customer"})
    def lookup(customer_id: Annotated[str, Id("customer")] | None = None) -> Any:
        return results.get("lookup")

    @guard.tool(effect="write")
    def one(customer_id: Annotated[str, Id("customer")]) -> Any:
        return results.get("one", "ok")

    @guard.tool(effect="write")
    def two(
        customer_id: Annotated[str, Id("customer")], order_id: Annotated[str, Id("order")]
    ) -> Any:
        return results.get("two", "ok")

    @guard.tool(effect="write")
    def three(
        customer_id: Annotated[str, Id("customer")],
        order_id: Annotated[str, Id("order")],
        other: Annotated[str | None, Id("order")] = None,
    ) -> Any:
        return results.get("three", "ok")

    @guard.tool(effect="read", produces={"orders[*].id": "order"})
    def peek(order_id: Annotated[str, Id("order")]) -> Any:
        return results.get("peek", "nothing to report")

    @guard.tool(effect="write", ids={"target": ["customer", "order"]})
    def either(target: str) -> Any:
        return "ok"

    @guard.tool(effect="write")
    async def two_async(
        customer_id: Annotated[str, Id("customer")], order_id: Annotated[str, Id("order")]
    ) -> Any:
        return results.get("two", "ok")

    def set_result(name: str, value: Any) -> None:
        results[name] = value

    tools: Tools = {
        "lookup": lookup,
        "one": one,
        "two": two,
        "three": three,
        "peek": peek,
        "either": either,
        "two_async": two_async,
        "set": set_result,
    }
    return guard, tools


def full_path_only(guard: Guard) -> None:
    """Every plan of ``guard`` without its allowed path or quiet results."""
    plans = guard._registry.plans
    for name, plan in list(plans.items()):
        plans[name] = dataclasses.replace(plan, allowed=refer, quiet=frozenset())


Steps = list[tuple[str, tuple[Any, ...], dict[str, Any]]]


def run(guard: Guard, tools: Tools, steps: Steps) -> Any:
    """Run ``steps`` in one session; what each returned or raised, the events, the ledger."""
    outcomes: list[Any] = []
    loop = asyncio.new_event_loop()
    try:
        with capture_logs() as logs, guard.session("s") as ledger:
            for name, args, kwargs in steps:
                if name == "set":
                    tools["set"](*args)
                    continue
                if name == "user":
                    guard.observe_user(args[0])
                    continue
                try:
                    if name.endswith("_async"):
                        value = loop.run_until_complete(tools[name](*args, **kwargs))
                    else:
                        value = tools[name](*args, **kwargs)
                    outcomes.append(("returned", repr(value)))
                except GuardrailError as exc:
                    outcomes.append(("raised", type(exc).__name__, str(exc)))
    finally:
        loop.close()
    return outcomes, [dict(event) for event in logs], snapshot(ledger)


def snapshot(ledger: Ledger) -> Any:
    """What a ledger holds, less the random value each ledger draws for its approvals' life."""
    saved = json.loads(ledger.to_json())
    del saved["meta"]["instance"]
    return saved


STEPS: Steps = [
    ("one", (), {"customer_id": "cus_aaaa"}),  # unknown: refused
    ("user", ("my order is ord_zz99 and I am cus_uuuu",), {}),
    ("peek", ("ord_zz99",), {}),  # a read may take what the user typed
    ("set", ("lookup", {"customer": {"id": "cus_aaaa"}, "orders": [{"id": "ORD_B111"}]}), {}),
    ("lookup", (), {}),
    ("one", ("cus_aaaa",), {}),
    ("one", (), {"customer_id": "cus_aaaa"}),
    ("two", ("cus_aaaa", "ord_b111"), {}),
    ("two", ("cus_aaaa",), {"order_id": " ORD_B111 "}),  # normalised: held
    ("three", ("cus_aaaa", "ord_b111"), {}),  # default None: not checked
    ("three", ("cus_aaaa", "ord_b111", "ord_b112"), {}),  # one edit away: refused
    ("two", ("cus_aaaa", 42), {}),  # not text
    ("two", ("cus_aaaa", None), {}),
    ("two", ("cus_uuuu", "ord_b111"), {}),  # typed by the user, on a write
    ("either", ("ord_b111",), {}),
    ("either", ("cus_aaaa",), {}),
    ("either", ("cus_zzzz",), {}),
    ("two_async", ("cus_aaaa", "ord_b111"), {}),
    ("two_async", ("cus_aaaa", "ord_c222"), {}),
    ("set", ("two", "Error: no such order"), {}),
    ("two", ("cus_aaaa", "ord_b111"), {}),
    ("set", ("two", '{"status": "done", "id": "ord_q000"}'), {}),
    ("two", ("cus_aaaa", "ord_b111"), {}),
    ("set", ("two", {"note": "refund sent to DE123456"}), {}),
    ("two", ("cus_aaaa", "ord_b111"), {}),
    ("set", ("two", "refund sent to DE654321"), {}),
    ("two_async", ("cus_aaaa", "ord_b111"), {}),
    ("set", ("peek", '{"orders": [{"id": "ord_b111"}, {"id": "ord_n333"}]}'), {}),
    ("peek", ("ord_b111",), {}),  # a JSON text result brings a new id in
    ("set", ("peek", "Error: ord_x444 not found"), {}),
    ("peek", ("ord_b111",), {}),
    ("set", ("peek", "7"), {}),
    ("peek", (), {"order_id": "ord_n333"}),
    ("set", ("peek", None), {}),
    ("peek", ("ord_n333",), {}),
    ("two", ("cus_aaaa", "ord_n333"), {}),
]


@pytest.mark.parametrize("mode", ["raise", "reprompt", "observe"])
@pytest.mark.parametrize("mentions", [False, True])
def test_the_allowed_path_gives_what_the_full_check_gives(mode: str, mentions: bool) -> None:
    fast, fast_tools = build(mode, mentions=mentions)
    full, full_tools = build(mode, mentions=mentions)
    full_path_only(full)
    assert run(fast, fast_tools, STEPS) == run(full, full_tools, STEPS)


def test_a_mention_in_a_plain_text_result_of_a_decorated_tool_is_taken() -> None:
    """Recorded as ``guard.record`` records it, though the call was allowed outright."""
    guard, tools = build("raise", mentions=True)
    tools["set"]("one", "refund sent to DE123456")
    with guard.session("s") as ledger:
        guard.record("lookup", {}, {"customer": {"id": "cus_aaaa"}})
        tools["one"]("cus_aaaa")
        assert [(entry.value, entry.tier) for entry in ledger.entries()][-1] == (
            "DE123456",
            "mentioned",
        )


# -- the compiled allowed path against the loop it writes out -------------------------------


def _fails(value: str) -> str:  # a normaliser that fails on some values
    if value.startswith("!"):
        raise ValueError("cannot read it")
    return value.strip().lower()


@pytest.mark.parametrize("read", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_path_returns_and_touches_what_the_loop_does(read: bool, seed: int) -> None:
    rng = random.Random(seed)
    guard = Guard()
    guard.add_kind("a", pattern=r"a_[0-9]")
    guard.add_kind("b", pattern=r"b_[0-9]")
    normalizers: list[Callable[[str], str]] = [str.strip, _fails]
    params: FastParams = tuple(
        (
            f"p{i}",
            rng.choice([-1, i, i + 1]),
            rng.choice(["a", "b"]),
            normalizers[rng.randrange(2)],
            (),
            rng.choice([NO_DEFAULT, None, "a_1", 5]),
        )
        for i in range(rng.randint(1, 4))
    )
    compiled = compile_allowed(params, read)
    values = ["a_1", "a_2", " a_1 ", "b_1", "b_3", "!x", None, 7, "A_1", "zz"]
    twins = []
    for _ in range(2):
        ledger = guard.new_ledger("s")
        state = state_of(ledger)
        state.admit(
            [Batch("a", "x", None, ["a_1", "a_2"], ["a_1", "a_2"], None)],
            source=Source("t", None, "x", 0),
        )
        state.admit(
            [Batch("b", "x", None, ["b_1"], ["b_1"], None)],
            source=Source("t", None, "x", 0),
            verified=False,
        )
        twins.append(state)
    for _ in range(40):
        args = tuple(rng.choice(values) for _ in range(rng.randint(0, 4)))
        kwargs = {f"p{i}": rng.choice(values) for i in range(4) if rng.random() < 0.3}
        loop_used = allowed_entries(params, read, args, kwargs, twins[0])
        compiled_used = compiled(args, kwargs, twins[1])
        assert _keys(loop_used) == _keys(compiled_used)
        assert _order(twins[0].tables) == _order(twins[1].tables)
        twins[0].epoch += 1
        twins[1].epoch += 1


def _keys(used: list[Any] | None) -> list[tuple[str, str]] | None:
    return None if used is None else [(entry.kind, entry.key) for entry in used]


def _order(tables: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, list[str], list[int]]]:
    return [
        (kind, list(table), [e.epoch for e in table.values()]) for kind, table in tables.items()
    ]


def test_several_kinds_keep_the_general_loop() -> None:
    params: FastParams = (("p", 0, "a", str.strip, (OtherKind("b", str.strip),), NO_DEFAULT),)
    assert compile_allowed(params, False).__name__ == "<lambda>"


# -- the guarded function written with the allowed path ---------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_random_calls_give_what_the_full_check_gives(seed: int) -> None:
    """Calls of held, normalised, unknown, absent and odd values, on twin guards."""
    rng = random.Random(seed)
    values: list[Any] = ["cus_aaaa", " cus_aaaa ", "cus_aaab", "ord_b111", "ORD_B111", "ord_zz99"]
    values += ["cus_uuuu", None, 42, ""]
    steps: Steps = [
        ("user", ("my order is ord_zz99 and I am cus_uuuu",), {}),
        ("set", ("lookup", {"customer": {"id": "cus_aaaa"}, "orders": [{"id": "ORD_B111"}]}), {}),
        ("lookup", (), {}),
    ]
    arity = {"one": 1, "two": 2, "three": 3, "peek": 1, "two_async": 2}
    names = {"one": ["customer_id"], "peek": ["order_id"], "three": ["customer_id", "order_id"]}
    for _ in range(60):
        tool = rng.choice(list(arity))
        params = names.get(tool, ["customer_id", "order_id", "other"])[: arity[tool]]
        given = [rng.choice(values) for _ in range(arity[tool])]
        split = rng.randint(0, len(given))
        kwargs = dict(zip(params[split:], given[split:], strict=False))
        steps.append((tool, tuple(given[:split]), kwargs))
    for mode in ("raise", "reprompt"):
        fast, fast_tools = build(mode)
        full, full_tools = build(mode)
        full_path_only(full)
        assert run(fast, fast_tools, steps) == run(full, full_tools, steps)


def test_a_later_declaration_keeps_the_allowed_path_a_guarded_function_was_written_with() -> None:
    guard, tools = build("raise")
    allowed = guard._registry.plans["two"].allowed

    @guard.tool(effect="write")
    def later(customer_id: Annotated[str, Id("customer")]) -> str:
        return "ok"

    guard.add_kind("ticket", pattern=r"tkt_[0-9]{3}")
    assert guard._registry.plans["two"].allowed is allowed
    assert tools["two"].__code__.co_filename.startswith("<guardrail guarded tool")
    assert tools["either"].__code__.co_filename.endswith("decorator.py")  # two kinds: the loop


def test_a_result_starting_with_a_plain_head_is_plain_text() -> None:
    from guardrail._guard.decorator import PLAIN_HEADS
    from guardrail._provenance.harvest import plain_text

    assert plain_text("")
    for head in PLAIN_HEADS - {""}:
        for rest in ("", "rue", "ull", " 1", '{"a": 1}', "alse"):
            assert plain_text(head + rest), repr(head + rest)
    assert not {"{", "[", '"', "-", "t", "f", "n", "0", " ", "\n"} & PLAIN_HEADS


def test_an_id_held_by_another_session_or_kind_is_refused_by_the_written_function() -> None:
    guard, tools = build("raise")
    with guard.session("a"):
        guard.record("lookup", {}, {"customer": {"id": "cus_aaaa"}, "orders": [{"id": "ord_b111"}]})
        assert tools["two"]("cus_aaaa", "ord_b111") == "ok"
        with pytest.raises(GuardrailError):
            tools["two"]("cus_aaaa", "cus_aaaa")  # a customer id where an order id goes
    with guard.session("b"), pytest.raises(GuardrailError):
        tools["two"]("cus_aaaa", "ord_b111")  # held in session a only
