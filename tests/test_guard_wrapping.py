"""The decorator's wrapper: what it keeps of the tool function, and its allowed fast path."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import typing
from typing import Annotated, Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from guardrail import Guard, Id, IdentifierViolation, Ledger, Rejection
from guardrail._check.plan import check_arguments
from guardrail._declare.spec import ProducerDecl
from guardrail.errors import GuardrailUsageError
from guardrail.ledger._ledger import state_of

from .conftest import ORDERS, shop_guard

Order = Annotated[str, Id("order")]
Customer = Annotated[str, Id("customer")]
Either = Annotated[str, Id(["order", "customer"])]  # a customer id is the second kind tried


def _tools(guard: Guard) -> tuple[Any, Any]:
    @guard.tool(effect="read")
    def lookup(customer_id: Customer, order_id: Order, /, note: str = "", *, limit: int = 1) -> str:
        """Look an order up."""
        return f"{customer_id}/{order_id}"

    @guard.tool
    async def refund(order_id: Order, amount: int = 0) -> str:
        """Refund an order."""
        await asyncio.sleep(0)
        return f"refunded {order_id}"

    return lookup, refund


def test_wrapper_keeps_name_doc_module_and_the_wrapped_function() -> None:
    """Name, qualified name, docstring, module and __wrapped__ are the tool function's."""
    lookup, refund = _tools(shop_guard())
    assert lookup.__name__ == "lookup"
    assert lookup.__qualname__.endswith("_tools.<locals>.lookup")
    assert lookup.__doc__ == "Look an order up."
    assert lookup.__module__ == __name__
    assert refund.__name__ == "refund"
    assert inspect.unwrap(lookup) is lookup.__wrapped__
    assert inspect.unwrap(lookup).__name__ == "lookup"


def test_wrapper_keeps_signature_and_annotations() -> None:
    """inspect.signature and get_type_hints see the tool's own parameters, Id markers included."""
    lookup, refund = _tools(shop_guard())
    assert inspect.signature(lookup) == inspect.signature(lookup.__wrapped__)
    assert str(inspect.signature(lookup)).startswith("(customer_id: 'Customer', order_id")
    hints = typing.get_type_hints(lookup, include_extras=True)
    assert hints == typing.get_type_hints(lookup.__wrapped__, include_extras=True)
    assert typing.get_type_hints(refund, include_extras=True)["order_id"] == Order


def test_wrapper_keeps_coroutine_nature() -> None:
    """An async tool stays a coroutine function, a sync one does not become one."""
    lookup, refund = _tools(shop_guard())
    assert inspect.iscoroutinefunction(refund)
    assert not inspect.iscoroutinefunction(lookup)
    assert inspect.isfunction(lookup)
    assert inspect.isfunction(refund)


class _Desk:
    """Methods of every kind, in both decorator orders, sync and async."""

    guard = shop_guard()

    @guard.tool
    def refund(self, order_id: Order, amount: int = 0) -> str:
        return f"{type(self).__name__} refunded {order_id}"

    @guard.tool(name="refund_cls")
    @classmethod
    def refund_cls(cls, order_id: Order) -> str:
        return f"{cls.__name__} refunded {order_id}"

    @classmethod
    @guard.tool(name="refund_cls_outer")
    def refund_cls_outer(cls, order_id: Order) -> str:
        return f"{cls.__name__} refunded {order_id}"

    @guard.tool(name="refund_static")
    @staticmethod
    def refund_static(order_id: Order) -> str:
        return f"refunded {order_id}"

    @staticmethod
    @guard.tool(name="refund_static_outer")
    def refund_static_outer(order_id: Order) -> str:
        return f"refunded {order_id}"

    @guard.tool(name="refund_async")
    async def refund_async(self, order_id: Order) -> str:
        return f"async refunded {order_id}"


def test_methods_keep_their_descriptor_kind_and_bound_signature() -> None:
    """Class and static methods stay what they were; bound signatures drop self and cls."""
    assert isinstance(_Desk.__dict__["refund_cls"], classmethod)
    assert isinstance(_Desk.__dict__["refund_static"], staticmethod)
    desk = _Desk()
    assert list(inspect.signature(desk.refund).parameters) == ["order_id", "amount"]
    assert list(inspect.signature(_Desk.refund).parameters) == ["self", "order_id", "amount"]
    assert list(inspect.signature(_Desk.refund_cls).parameters) == ["order_id"]
    assert list(inspect.signature(_Desk.refund_static).parameters) == ["order_id"]
    assert inspect.iscoroutinefunction(desk.refund_async)
    assert inspect.ismethod(desk.refund)


def test_methods_of_every_kind_read_ids_at_the_right_position() -> None:
    """Every way of calling a method finds the id argument, by position or keyword."""
    desk = _Desk()
    guard = _Desk.guard
    calls = [
        desk.refund,
        _Desk.refund_cls,
        desk.refund_cls,
        _Desk.refund_cls_outer,
        _Desk.refund_static,
        desk.refund_static,
        _Desk.refund_static_outer,
    ]
    with guard.session("desk"):
        guard.record("search_orders", {}, ORDERS)
        for call in calls:
            # The tool runs with the order as the caller wrote it, whichever spelling.
            assert call("W8855135").endswith("refunded W8855135")
            assert call(order_id="#W8855135").endswith("refunded #W8855135")
            with pytest.raises(IdentifierViolation):
                call("W8855136")
            with pytest.raises(IdentifierViolation):
                call(order_id="W8855136")
        assert _Desk.refund(desk, "W8855135") == "_Desk refunded W8855135"
        with pytest.raises(IdentifierViolation):
            _Desk.refund(desk, "W8855136", 3)
        assert asyncio.run(desk.refund_async("W8855135")) == "async refunded W8855135"
        with pytest.raises(IdentifierViolation):
            asyncio.run(desk.refund_async(order_id="W8855136"))


def test_positional_only_and_keyword_only_parameters_are_read() -> None:
    """Ids are found in positional-only parameters; other arguments pass through untouched."""
    guard = shop_guard("reprompt")
    lookup, _ = _tools(guard)
    with guard.session("s"):
        guard.record("search_orders", {"customer_id": "cus_ABC123"}, ORDERS)
        guard.observe_user("I am cus_ABC123")
        assert lookup("cus_ABC123", "W8855135", "n", limit=2) == "cus_ABC123/W8855135"
        refused = lookup("cus_ABC123", "W8855999")
        assert isinstance(refused, Rejection)
        assert refused.verdict.findings[0].param == "order_id"


def test_async_tool_in_reprompt_mode_returns_a_rejection_without_running() -> None:
    """A refused async call is not awaited and returns the rejection."""
    guard = shop_guard("reprompt")
    ran: list[str] = []

    @guard.tool
    async def refund(order_id: Order) -> str:
        ran.append(order_id)
        return "ok"

    async def conversation() -> tuple[Any, Any]:
        async with guard.session("s"):
            guard.record("search_orders", {}, ORDERS)
            return await refund("W8855135"), await refund("W8855136")

    allowed, refused = asyncio.run(conversation())
    assert allowed == "ok"
    assert isinstance(refused, Rejection)
    assert ran == ["W8855135"]  # as the caller wrote it


def test_tool_taking_only_keyword_arguments_is_checked() -> None:
    """ids= on a **kwargs tool checks the keyword argument of that name."""
    guard = shop_guard()

    @guard.tool(ids={"order_id": "order"})
    def generic(**kwargs: Any) -> str:
        return str(kwargs["order_id"])

    with guard.session("s"):
        guard.record("search_orders", {}, ORDERS)
        assert generic(order_id="W8855135") == "W8855135"
        with pytest.raises(IdentifierViolation):
            generic(order_id="W8855136")


def test_decorated_call_outside_a_session_is_a_usage_error() -> None:
    """The fast path still says what to do when no session is open."""
    lookup, _ = _tools(shop_guard())
    with pytest.raises(GuardrailUsageError, match="outside any session"):
        lookup("cus_ABC123", "W8855135")


VALUES = st.sampled_from(
    [
        "W8855135",
        "#W8855135",
        " W8855135 ",
        "W2378156",
        "W8855136",
        "W885513",
        "W0000000",
        "cus_ABC123",
        "cus_ABC124",
        "W7777777",
        None,
        8855135,
        ["W8855135"],
    ]
)


@settings(max_examples=60, deadline=None)
@given(
    customer=VALUES,
    order=VALUES,
    read=st.booleans(),
    keyword=st.booleans(),
    run_async=st.booleans(),
    result=st.sampled_from(["done", '{"order_id": "W1111111"}', None, {"a": 1}, b"x"]),
)
def test_allowed_fast_path_decides_and_records_as_the_full_check(
    customer: Any, order: Any, read: bool, keyword: bool, run_async: bool, result: Any
) -> None:
    """A decorated call leaves the same outcome, ledger and received values on either path."""
    outcomes = []
    for fast in (True, False):
        guard = shop_guard("reprompt")
        received: list[tuple[Any, Any]] = []
        effect: Literal["read", "write"] = "read" if read else "write"
        produces: dict[str, ProducerDecl] | None = (
            {"order_id": "order"} if read and isinstance(result, str) else None
        )

        @guard.tool(effect=effect, name="act", produces=produces)
        def act(customer_id: Either, order_id: Order) -> Any:
            received.append((customer_id, order_id))  # noqa: B023 - called this iteration
            return result

        @guard.tool(effect=effect, name="act_async", produces=produces)
        async def act_async(customer_id: Either, order_id: Order) -> Any:
            received.append((customer_id, order_id))  # noqa: B023 - called this iteration
            return result

        if not fast:  # the full check, which the fast path must agree with
            for name in ("act", "act_async"):
                guard._registry.plans[name] = dataclasses.replace(
                    guard._registry.plans[name], fast=None
                )
        with capture_logs() as logs, guard.session("s") as ledger:
            guard.observe_user("I am cus_ABC123, order #W7777777")
            guard.record("search_orders", {"customer_id": "cus_ABC123"}, ORDERS)
            arguments = {"customer_id": customer, "order_id": order}
            call = act_async if run_async else act
            got = call(**arguments) if keyword else call(customer, order)
            if run_async:
                got = asyncio.run(got)
            outcomes.append((isinstance(got, Rejection), _contents(ledger), logs, received))
    assert outcomes[0] == outcomes[1]


def _contents(ledger: Ledger) -> dict[str, Any]:
    """What a ledger holds (its seal key is never saved), less the random value of its life."""
    saved = ledger.to_dict()
    del saved["meta"]["instance"]
    return saved


# -- id parameters left at their defaults -----------------------------------------------------


def _defaults_tools(guard: Guard, ran: list[str]) -> dict[str, Any]:
    @guard.tool
    def refund(order_id: Order = "W0000001") -> str:
        ran.append(f"refund {order_id}")
        return order_id

    @guard.tool(name="refund_kw")
    async def refund_kw(*, order_id: Order = "W0000001", note: str = "") -> str:
        ran.append(f"refund_kw {order_id}")
        return order_id

    @guard.tool(name="refund_pos")
    def refund_pos(customer_id: Customer, order_id: Order = "W0000001", /) -> str:
        ran.append(f"refund_pos {order_id}")
        return order_id

    @guard.tool(name="refund_items", ids={"items[*]": "item"})
    def refund_items(items: list[str] = ["it_zzzz"]) -> str:  # noqa: B006 - never mutated
        ran.append(f"refund_items {items}")
        return ",".join(items)

    @guard.tool(name="refund_none")
    def refund_none(order_id: Order | None = None) -> str:
        ran.append("refund_none")
        return "none"

    @guard.tool(name="refund_ok")
    def refund_ok(order_id: Annotated[str, Id("order", default_ok=True)] = "W0000001") -> str:
        ran.append("refund_ok")
        return order_id

    @guard.tool(name="refund_ok_map", ids={"order_id": {"kind": "order", "default_ok": True}})
    def refund_ok_map(order_id: str = "W0000001") -> str:
        ran.append("refund_ok_map")
        return order_id

    return {
        "refund": refund,
        "refund_kw": lambda **kw: asyncio.run(refund_kw(**kw)),
        "refund_pos": lambda: refund_pos("cus_ABC123"),
        "refund_items": refund_items,
        "refund_none": refund_none,
        "refund_ok": refund_ok,
        "refund_ok_map": refund_ok_map,
    }


@pytest.mark.parametrize("fast", [True, False])
def test_an_id_parameter_left_at_its_default_is_checked(fast: bool) -> None:
    """refund() with order_id defaulting to an id no tool returned is refused, not run."""
    guard = shop_guard()
    ran: list[str] = []
    tools = _defaults_tools(guard, ran)
    if not fast:
        for name in list(guard._registry.plans):
            guard._registry.plans[name] = dataclasses.replace(
                guard._registry.plans[name], fast=None
            )
    guard.declare("whoami", produces={"id": "customer"}, effect="read")
    with guard.session("s"):
        guard.record("whoami", {}, {"id": "cus_ABC123"})
        guard.record("search_orders", {"customer_id": "cus_ABC123"}, ORDERS)
        for name in ("refund", "refund_kw", "refund_pos", "refund_items"):
            with pytest.raises(IdentifierViolation):
                tools[name]()
        assert not guard.check("refund", {}).allowed
        assert guard.check("refund", {"order_id": "W8855135"}).allowed
        assert tools["refund_none"]() == "none"
        assert tools["refund_ok"]() == "W0000001"
        assert tools["refund_ok_map"]() == "W0000001"
        guard.record("get_order", {}, {"order_id": "W0000001", "items": [{"item_id": "it_zzzz"}]})
        assert guard.check("refund", {}).allowed
        assert tools["refund"]() == "W0000001"
        assert tools["refund_kw"]() == "W0000001"
        assert tools["refund_pos"]() == "W0000001"
        assert tools["refund_items"]() == "it_zzzz"
    assert ran == [
        "refund_none",
        "refund_ok",
        "refund_ok_map",
        "refund W0000001",
        "refund_kw W0000001",
        "refund_pos W0000001",
        "refund_items ['it_zzzz']",
    ]


# -- the value the tool receives ----------------------------------------------------------------


def _shapes_guard(fast: bool) -> tuple[Guard, dict[str, Any], list[Any]]:
    """Tools of every argument shape that report what they received; the fast path on or off."""
    guard = shop_guard()
    guard.add_kind("flight", normalize=["strip", "upper"])
    guard.add_kind("amount", normalize="number")
    guard.add_kind("url", normalize="url")
    guard.add_kind("tag", normalize=["strip", "casefold"])
    guard.declare(
        "seed",
        produces={
            "flights[*]": "flight",
            "amounts[*]": "amount",
            "urls[*]": "url",
            "tags[*]": "tag",
            "orders[*]": "order",
        },
        effect="read",
    )
    got: list[Any] = []

    @guard.tool
    def refund(order_id: Order, note: str = "") -> str:
        got.append(order_id)
        return "ok"

    @guard.tool(name="refund_async")
    async def refund_async(customer_id: Either, order_id: Order) -> str:
        got.append((customer_id, order_id))
        return "ok"

    @guard.tool(name="pay")
    def pay(amount: Annotated[Any, Id("amount")], url: Annotated[str, Id("url")]) -> str:
        got.append((amount, url))
        return "ok"

    @guard.tool(name="book", ids={"flights[*].flight_number": "flight"})
    def book(flights: Any, passengers: int = 1) -> str:
        got.append(flights)
        return "ok"

    @guard.tool(name="tag_all", ids={"tags": {"kind": "tag", "sep": ","}, "order_ids[*]": "order"})
    def tag_all(tags: str, order_ids: Any = ()) -> str:
        got.append((tags, order_ids))
        return "ok"

    @guard.tool(name="cancel_default")
    def cancel_default(order_id: Order = "W0000001", /) -> str:
        got.append(order_id)
        return "ok"

    if not fast:
        for name in list(guard._registry.plans):
            guard._registry.plans[name] = dataclasses.replace(
                guard._registry.plans[name], fast=None
            )
    tools = {
        "refund": refund,
        "refund_async": lambda *a, **k: asyncio.run(refund_async(*a, **k)),
        "pay": pay,
        "book": book,
        "tag_all": tag_all,
        "cancel_default": cancel_default,
    }
    return guard, tools, got


SEED = {
    "orders": ["#W2378156", "#W0000001"],
    "flights": ["HAT136", "HAT039"],
    "amounts": ["1000"],
    "urls": ["https://pay.example/inv/1"],
    "tags": ["urgent", "vip"],
}


@pytest.mark.parametrize("fast", [True, False])
def test_the_tool_receives_each_argument_exactly_as_given(fast: bool) -> None:
    """Whatever spelling the check accepted, the tool runs with the model's own argument."""
    guard, tools, got = _shapes_guard(fast)
    with guard.session("s"):
        guard.record("seed", {}, SEED)
        guard.record("search_orders", {"customer_id": "x"}, ORDERS)
        tools["refund"]("W2378156")
        tools["refund"](order_id=" #W2378156\n", note="n")
        tools["refund_async"]("#W8855135", order_id="W2378156")
        tools["pay"]("１０００", url="HTTPS://PAY.EXAMPLE:443/inv/1/")
        tools["pay"](1000, "https://pay.example/inv/1/")
        tools["cancel_default"]()
    assert got == [
        "W2378156",
        " #W2378156\n",
        ("#W8855135", "W2378156"),
        ("１０００", "HTTPS://PAY.EXAMPLE:443/inv/1/"),
        (1000, "https://pay.example/inv/1/"),
        "W0000001",  # the function's own default, checked and left to the function
    ]


@pytest.mark.parametrize("fast", [True, False])
def test_nested_packed_and_json_text_arguments_reach_the_tool_as_the_objects_given(
    fast: bool,
) -> None:
    """Lists of objects, packed strings and JSON text: the tool gets the very objects passed."""
    guard, tools, got = _shapes_guard(fast)
    flights = [{"flight_number": " hat136", "date": "2024-05-20"}, {"flight_number": "HAT039"}]
    before = json.dumps(flights)
    order_ids = ("W0000001",)
    with guard.session("s"):
        guard.record("seed", {}, SEED)
        tools["book"](flights, passengers=2)
        tools["book"](json.dumps([{"flight_number": "hat039"}]))
        tools["tag_all"]("URGENT , vip,Vip", order_ids='["W2378156", "#W0000001"]')
        tools["tag_all"](tags="urgent", order_ids=order_ids)
    assert json.dumps(flights) == before  # the caller's objects are untouched
    assert got[0] is flights
    assert got[1] == json.dumps([{"flight_number": "hat039"}])
    assert got[2] == ("URGENT , vip,Vip", '["W2378156", "#W0000001"]')
    assert got[3] == ("urgent", order_ids) and got[3][1] is order_ids


def test_verdict_arguments_are_the_arguments_as_given() -> None:
    """check() and enforce() give the mapping given itself, or the one JSON text reads as."""
    guard, _, _ = _shapes_guard(True)
    with guard.session("s"):
        guard.record("seed", {}, SEED)
        given = {"order_id": "W2378156", "note": "keep me"}
        verdict = guard.enforce("refund", given)
        assert verdict.allowed and verdict.arguments is given
        assert given == {"order_id": "W2378156", "note": "keep me"}
        nested = {"flights": [{"flight_number": "hat136"}], "passengers": 1}
        verdict = guard.check("book", json.dumps(nested))
        assert verdict.allowed and verdict.arguments == nested
        assert guard.check("cancel_default", {}).arguments == {}  # the default is the tool's
        refused = guard.check("refund", {"order_id": "W9999999"})
        assert refused.arguments == {"order_id": "W9999999"}
        assert guard.check("not_declared", '{"a": 1}').arguments == {"a": 1}
        assert guard.check("refund", "not json").arguments is None


# -- differential: the fast path and the full check agree ---------------------------------------

_SPELLINGS = st.sampled_from(
    [
        "#W2378156",
        "W2378156",
        " W2378156\n",
        "W2378157",
        "#W0000001",
        "W0000001",
        "W7777777",
        "cus_ABC123",
        "cus_ABC124",
        "1000",
        "1e3",
        "１０００",
        "1000.5",
        "https://pay.example/inv/1",
        "HTTPS://pay.example:443/inv/1/",
        "http://[::1",
        "x!",
        "y?",
        "",
    ]
)
_ARGUMENT = st.one_of(_SPELLINGS, st.none(), st.integers(999, 1001), st.just(["W2378156"]))


def _differential_guard(read: bool) -> Guard:
    guard = shop_guard()
    guard.add_kind("amount", normalize="number")
    guard.add_kind("url", normalize="url")
    guard.add_kind("picky", normalize=_picky_normaliser)
    guard.declare(
        "seed",
        effect="read",
        produces={
            "orders[*]": "order",
            "customers[*]": "customer",
            "amounts[*]": "amount",
            "urls[*]": "url",
            "tags[*]": "picky",
        },
    )

    @guard.tool(name="act", effect="read" if read else "write")
    def act(
        order_id: Order,
        who: Either = "cus_ABC123",
        amount: Annotated[Any, Id("amount")] = None,
        link: Annotated[str | None, Id("url")] = None,
        tag: Annotated[str | None, Id(["picky", "order"])] = None,
    ) -> str:
        return "ok"

    return guard


def _picky_normaliser(value: str) -> str:
    if "!" in value:
        raise ValueError("cannot read this one")
    return None if "?" in value else value.strip().upper()  # type: ignore[return-value]


_ORDERS = ["#W2378156", "W2378156", " W2378156\n", "#W0000001", "W0000001", "W7777777"]
_GOOD = {
    "order_id": st.sampled_from(_ORDERS),
    "who": st.sampled_from(["cus_ABC123", "cus_ABC124", " cus_ABC123", *_ORDERS]),
    "amount": st.sampled_from(["1000", "1e3", "１０００", "1000.0", 1000]),
    "link": st.sampled_from(["https://pay.example/inv/1", "HTTPS://PAY.example:443/inv/1/"]),
    "tag": st.sampled_from(["abc", " ABC ", "aBc", *_ORDERS]),
}
#: Mostly values some entry accepts (in some spelling), sometimes anything.
_ARGUMENTS = st.fixed_dictionaries(
    {},
    optional={name: st.one_of(good, good, good, _ARGUMENT) for name, good in _GOOD.items()},
)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(arguments=_ARGUMENTS, read=st.booleans())
def test_fast_path_and_full_check_agree(arguments: dict[str, Any], read: bool) -> None:
    """Allowed or not, the same entries and the arguments as given, on either path."""
    outcomes = []
    for fast in (True, False):
        guard = _differential_guard(read)
        plan = guard._registry.plans["act"]
        if not fast:
            plan = dataclasses.replace(plan, fast=None)
        with guard.session("s") as ledger:
            guard.observe_user("it is order #W7777777, I am cus_ABC124")
            guard.record(
                "seed",
                {},
                {
                    "orders": ["#W2378156", "W0000001"],
                    "customers": ["cus_ABC123"],
                    "amounts": ["1000"],
                    "urls": ["https://pay.example/inv/1"],
                    "tags": ["abc"],
                },
            )
            given_arguments = json.loads(json.dumps(arguments))
            verdict = check_arguments(plan, given_arguments, state_of(ledger))
            assert given_arguments == arguments  # never changed
            assert verdict.arguments is given_arguments  # and given back as it is
            outcomes.append(
                (
                    verdict.allowed,
                    [(entry.kind, entry.key, entry.value) for entry in verdict.used],
                    verdict.arguments,
                    verdict.arguments is given_arguments,
                )
            )
    assert outcomes[0] == outcomes[1]
