"""A guarded plain function takes the tool's own parameters: calls bind as the tool's would.

The guarded function of a plain Python tool is written with the tool's own
parameter list (:func:`guardrail._guard.decorator._own_parameters`), so a
call passes no ``*args`` tuple or ``**kwargs`` dict through it. These tests
pin down when it does (and when it keeps ``*args, **kwargs``), and that
either way the tool receives the same values, the same refusals happen and
a wrong call fails as the tool itself would fail.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import traceback
from collections.abc import Callable
from typing import Annotated, Any

import pytest

from guardrail import Guard, Id
from guardrail.errors import IdentifierViolation

Customer = Annotated[str, Id("customer")]
Order = Annotated[str, Id("order")]
SENTINEL: list[str] = []


def shop() -> Guard:
    guard = Guard()
    guard.add_kind("customer", pattern=r"cus_[a-z0-9]{4}")
    guard.add_kind("order", pattern=r"ord_[a-z0-9]{4}", normalize="lower")
    guard.declare("lookup", produces={"customer": "customer", "orders[*]": "order"}, effect="read")
    return guard


def hold(guard: Guard) -> None:
    guard.record("lookup", {}, {"customer": "cus_aaaa", "orders": ["ord_bbbb", "ord_cccc"]})


def own_form(function: Callable[..., Any]) -> bool:
    """Whether the guarded function takes named parameters rather than ``*args, **kwargs``."""
    code = function.__code__
    return bool(code.co_argcount or code.co_kwonlyargcount) and not code.co_flags & 0x0C


def test_a_plain_function_is_guarded_with_its_own_parameters() -> None:
    guard = shop()
    seen: list[tuple[Any, ...]] = []

    @guard.tool(effect="write")
    def refund(customer_id: Customer, order_id: Order, *, amount: int = 5) -> str:
        seen.append((customer_id, order_id, amount))
        return "ok"

    assert own_form(refund)
    with guard.session("s"):
        hold(guard)
        assert refund("cus_aaaa", "ord_bbbb") == "ok"
        assert refund(order_id="ord_cccc", customer_id="cus_aaaa", amount=7) == "ok"
        arguments: dict[str, Any] = {"order_id": "ORD_BBBB"}
        assert refund(*["cus_aaaa"], **arguments) == "ok"
        with pytest.raises(IdentifierViolation):
            refund("cus_aaaa", "ord_zzzz")
        with pytest.raises(IdentifierViolation):
            refund(customer_id="cus_zzzz", order_id="ord_bbbb")
    assert seen == [
        ("cus_aaaa", "ord_bbbb", 5),
        ("cus_aaaa", "ord_cccc", 7),
        ("cus_aaaa", "ORD_BBBB", 5),
    ]


def test_an_async_tool_takes_its_own_parameters_too() -> None:
    guard = shop()

    @guard.tool(effect="write")
    async def cancel(order_id: Order) -> str:
        return f"cancelled {order_id}"

    assert own_form(cancel)

    async def main() -> list[str]:
        with guard.session("s"):
            hold(guard)
            done = [await cancel("ord_bbbb"), await cancel(order_id="ord_cccc")]
            with pytest.raises(IdentifierViolation):
                await cancel(order_id="ord_zzzz")
            return done

    assert asyncio.run(main()) == ["cancelled ord_bbbb", "cancelled ord_cccc"]


def test_a_default_reaches_the_tool_as_the_same_object() -> None:
    guard = shop()
    received: list[Any] = []

    @guard.tool(effect="write")
    def tag(order_id: Order, labels: list[str] = SENTINEL) -> str:
        received.append(labels)
        return "ok"

    assert own_form(tag)
    with guard.session("s"):
        hold(guard)
        tag("ord_bbbb")
    assert received[0] is SENTINEL


def test_a_wrong_call_fails_as_the_tool_would_and_nothing_runs() -> None:
    guard = shop()
    ran: list[str] = []

    @guard.tool(effect="write")
    def refund(customer_id: Customer, order_id: Order) -> str:
        ran.append(order_id)
        return "ok"

    call: Any = refund  # wrong calls on purpose
    with guard.session("s"):
        hold(guard)
        with pytest.raises(TypeError, match=r"refund\(\) missing 1 required positional"):
            call("cus_aaaa")
        with pytest.raises(TypeError, match=r"refund\(\) got an unexpected keyword argument"):
            call("cus_aaaa", "ord_bbbb", memo="x")
        with pytest.raises(TypeError, match="multiple values"):
            call("cus_aaaa", customer_id="cus_aaaa", order_id="ord_bbbb")
    assert ran == []


@pytest.mark.parametrize(
    "parameter",
    [
        *("name", "state", "plan", "result", "value", "args", "kwargs", "type", "str", "len"),
        *("entry0", "tables", "epoch", "session", "target", "call", "guarded", "Exception"),
    ],
)
def test_a_parameter_named_as_a_name_of_the_guard_s_code_is_taken_as_the_tool_s_own(
    parameter: str,
) -> None:
    """``state``, ``type`` or ``value`` hide none of the written function's names: all start _."""
    guard = shop()
    tool = guard.tool(effect="write")(_tool_with(parameter))
    assert own_form(tool)
    with guard.session("s"):
        hold(guard)
        assert tool("x", "ord_bbbb") == "x ord_bbbb"
        assert tool(**{parameter: "y", "order_id": "ord_cccc"}) == "y ord_cccc"
        with pytest.raises(IdentifierViolation):
            tool("x", order_id="ord_zzzz")
        with pytest.raises(IdentifierViolation):
            tool("x", order_id=7)


@pytest.mark.parametrize("parameter", ["_value", "_state", "_private"])
def test_a_parameter_named_with_a_leading_underscore_keeps_the_general_form(
    parameter: str,
) -> None:
    guard = shop()
    tool = guard.tool(effect="write")(_tool_with(parameter))
    assert not own_form(tool)
    with guard.session("s"):
        hold(guard)
        assert tool(**{parameter: "y", "order_id": "ord_cccc"}) == "y ord_cccc"
        with pytest.raises(IdentifierViolation):
            tool("x", order_id="ord_zzzz")


def _tool_with(parameter: str) -> Callable[..., Any]:
    """``lookup_one(<parameter>, order_id)``, returning both: a name chosen by the test."""
    namespace: dict[str, Any] = {"Order": Order}
    exec(
        f"def lookup_one({parameter}: 'object', order_id: Order) -> str:\n"
        f"    return f'{{{parameter}}} {{order_id}}'\n",
        namespace,
    )
    function: Callable[..., Any] = namespace["lookup_one"]
    return function


def test_a_wrapped_function_or_a_variadic_one_keeps_the_general_form() -> None:
    """A wrapper's real parameters are ``*args, **kwargs``, whatever signature it shows."""
    guard = shop()
    received: list[Any] = []

    def logged(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def inner(*args: Any, **kwargs: Any) -> Any:
            received.append((args, kwargs))
            return function(*args, **kwargs)

        return inner

    @guard.tool(effect="write")
    @logged
    def refund(customer_id: Customer, order_id: Order) -> str:
        return "ok"

    @guard.tool(effect="write")
    def notify(order_id: Order, *extra: str, **options: str) -> str:
        return f"{order_id} {extra} {options}"

    @guard.tool(effect="write")
    def only(order_id: Order, /) -> str:
        return order_id

    def raw(*args: Any, **kwargs: Any) -> str:
        received.append((args, kwargs))
        return "ok"

    raw.__signature__ = inspect.signature(refund)  # type: ignore[attr-defined]
    shown = guard.tool(effect="write", name="shown")(raw)

    assert not own_form(refund)
    assert not own_form(shown)
    assert not own_form(notify)
    assert not own_form(only)
    with guard.session("s"):
        hold(guard)
        refund("cus_aaaa", order_id="ord_bbbb")
        shown(customer_id="cus_aaaa", order_id="ord_cccc")
        assert notify("ord_bbbb", "a", b="c") == "ord_bbbb ('a',) {'b': 'c'}"
        assert only("ord_cccc") == "ord_cccc"
        with pytest.raises(IdentifierViolation):
            notify("ord_zzzz")
    # the arguments as given, positional and keyword, reach the wrapper underneath
    assert received == [
        (("cus_aaaa",), {"order_id": "ord_bbbb"}),
        ((), {"customer_id": "cus_aaaa", "order_id": "ord_cccc"}),
    ]


def test_an_id_default_left_unchecked_keeps_the_general_form() -> None:
    """An omitted id with ``default_ok`` is not checked, a passed one is.

    Only ``**kwargs`` tells the two apart.
    """
    guard = shop()

    @guard.tool(effect="write")
    def refund(order_id: Annotated[str, Id("order", default_ok=True)] = "ord_dflt") -> str:
        return order_id

    assert not own_form(refund)
    with guard.session("s"):
        hold(guard)
        assert refund() == "ord_dflt"
        with pytest.raises(IdentifierViolation):
            refund("ord_dflt")


def test_a_method_takes_its_own_parameters_with_self() -> None:
    guard = shop()

    class Desk:
        prefix = "desk"

        @guard.tool(effect="write")
        def refund(self, order_id: Order) -> str:
            return f"{self.prefix} {order_id}"

    assert own_form(Desk.refund)
    with guard.session("s"):
        hold(guard)
        assert Desk().refund("ord_bbbb") == "desk ord_bbbb"
        assert Desk().refund(order_id="ord_cccc") == "desk ord_cccc"
        with pytest.raises(IdentifierViolation):
            Desk().refund("ord_zzzz")


def test_a_traceback_through_the_written_function_shows_its_lines() -> None:
    guard = shop()

    @guard.tool(effect="write")
    def refund(order_id: Order) -> str:
        raise RuntimeError("the payment service is down")

    with guard.session("s"):
        hold(guard)
        with pytest.raises(RuntimeError) as caught:
            refund("ord_bbbb")
    text = "".join(traceback.format_exception(caught.value))
    assert "<guardrail guarded tool 'refund' #" in text
    assert "_result = _target(order_id)" in text
