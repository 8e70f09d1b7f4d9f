"""Manifests bound to code: a declaration made once, applied to the callables that run the tools."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Annotated, Any

import pytest

from guardrail import Guard, GuardrailUsageError, Id, IdentifierViolation
from guardrail._declare.definitions import read_definitions
from guardrail._guard.binding import snake_case

MANIFEST: dict[str, Any] = {
    "kinds": {"order": {"pattern": "#?W\\d{7}", "normalize": ["strip", "prefix:#"]}},
    "tools": {
        "find_orders": {"effect": "read", "produces": {"orders[*].id": "order"}},
        "cancel_order": {"ids": {"order_id": "order"}},
    },
}
FOUND = {"orders": [{"id": "#W1000001"}]}


def _guard(mode: str = "raise") -> Guard:
    return Guard.from_manifest(MANIFEST, mode=mode)


def test_a_bare_decorator_takes_the_manifests_declaration() -> None:
    """@guard.tool on a manifest tool is no second declaration: the manifest's ids are checked."""
    guard = _guard()
    ran: list[str] = []

    @guard.tool
    def cancel_order(order_id: str) -> str:
        ran.append(order_id)
        return "cancelled"

    with guard.session("s"):
        guard.record("find_orders", {}, FOUND)
        with pytest.raises(IdentifierViolation):
            cancel_order("#W1000002")  # positional: still checked
        with pytest.raises(IdentifierViolation):
            cancel_order(order_id="#W1000002")
        assert cancel_order("#W1000001") == "cancelled"
    assert ran == ["#W1000001"]
    assert guard.specs["cancel_order"].effect == "write"


def test_a_function_declaring_ids_of_its_own_is_a_real_double_declaration() -> None:
    """Id marks or ids= on a manifest tool: refused, saying to declare it in one place."""
    guard = _guard()
    with pytest.raises(GuardrailUsageError, match=r"declared twice.*manifest.*in one place"):

        @guard.tool
        def cancel_order(order_id: Annotated[str, Id("order")]) -> str:
            return order_id

    with pytest.raises(GuardrailUsageError, match=r"ids.*in one place"):
        guard.tool(name="cancel_order", ids={"order_id": "order"})(lambda order_id: order_id)
    assert guard.specs["cancel_order"].params[0].kinds == ("order",)


def test_a_lax_second_function_cannot_take_a_bound_tools_name() -> None:
    """Once bound, a manifest tool refuses another function: its calls would go another way."""
    guard = _guard()

    @guard.tool
    def cancel_order(order_id: str) -> str:
        return order_id

    with pytest.raises(GuardrailUsageError, match="already bound"):
        guard.tool(name="cancel_order")(lambda order_id: order_id)


def test_a_function_without_the_declared_parameter_is_refused() -> None:
    """A manifest id parameter the function does not take would never be checked."""
    guard = _guard()
    with pytest.raises(GuardrailUsageError, match="no parameter of that name"):

        @guard.tool
        def cancel_order(order: str) -> str:
            return order


def test_a_manifest_after_a_guarded_function_says_to_load_it_first() -> None:
    """The reverse order is refused with the order that works."""
    guard = Guard()
    guard.add_kind("order")

    @guard.tool(ids={"order_id": "order"})
    def cancel_order(order_id: str) -> str:
        return order_id

    with pytest.raises(GuardrailUsageError, match="load the manifest .*before guarding"):
        guard.load_manifest({"tools": {"cancel_order": {"effect": "read"}}})


class FindOrders:
    """A tool class, as class-per-tool sets write them."""

    @staticmethod
    def invoke(data: dict[str, Any], query: str) -> dict[str, Any]:
        return {**FOUND, **data} if query else {}


class Shop:
    def cancel_order(self, order_id: str) -> str:
        return f"cancelled {order_id}"


def test_bind_takes_a_mapping_of_functions_methods_and_static_methods() -> None:
    """Every callable is guarded under its tool name with the manifest's declaration."""
    guard = _guard()
    given: dict[str, Any] = {"find_orders": FindOrders.invoke, "cancel_order": Shop().cancel_order}
    tools = guard.bind(given)
    with guard.session("s"):
        assert tools["find_orders"]({}, query="all") == FOUND
        assert tools["cancel_order"](order_id="#W1000001") == "cancelled #W1000001"
        with pytest.raises(IdentifierViolation):
            tools["cancel_order"]("#W1000009")


def test_bind_names_a_tool_class_method_by_its_class() -> None:
    """In a list, FindOrders.invoke is the tool find_orders the manifest declares."""
    guard = _guard()
    tools = guard.bind([FindOrders.invoke])
    assert list(tools) == ["find_orders"]
    assert snake_case("GetUserDetails") == "get_user_details"
    assert snake_case("HTTPFetch") == "http_fetch"


def test_bind_refuses_a_callable_the_guard_declares_nothing_for() -> None:
    """A misspelt name is an error naming the declared tools, not an unchecked tool."""
    guard = _guard()
    with pytest.raises(GuardrailUsageError, match=r"no tool 'cancel_ordr'.*cancel_order"):
        guard.bind({"cancel_ordr": Shop().cancel_order})
    assert "cancel_ordr" not in guard.specs


def test_bind_definitions_teach_placeholders_and_check_parameter_names(tmp_path: Path) -> None:
    """An id quoted in a definition is refused as example; a missing id parameter is an error."""
    guard = _guard()
    definitions = [
        {
            "type": "function",
            "function": {
                "name": "cancel_order",
                "description": "Cancel an order.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "order_id": {"type": "string", "description": "such as '#W0000000'"}
                    },
                },
            },
        }
    ]
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(definitions), encoding="utf-8")
    tools = guard.bind({"cancel_order": Shop().cancel_order}, definitions=path)
    with guard.session("s"):
        guard.observe_user("cancel #W0000000 please")
        verdict = guard.check("cancel_order", {"order_id": "#W0000000"})
        assert [f.problem for f in verdict.findings] == ["example"]
        with pytest.raises(IdentifierViolation):
            tools["cancel_order"](order_id="#W0000000")
    wrong = [{"name": "cancel_order", "input_schema": {"properties": {"id": {}}}}]
    with pytest.raises(GuardrailUsageError, match=r"'order_id'.*it has: id"):
        _guard().bind({"cancel_order": Shop().cancel_order}, definitions=wrong)


def test_read_definitions_reads_every_shape() -> None:
    """OpenAI chat and Responses, Anthropic and an MCP listing read as one shape."""
    schema = {"type": "object", "properties": {"x": {"type": "string"}}}
    shapes: list[Any] = [
        [{"type": "function", "function": {"name": "a", "parameters": schema}}],
        [{"type": "function", "name": "a", "parameters": schema}],
        [{"name": "a", "input_schema": schema}],
        {"tools": [{"name": "a", "inputSchema": schema}]},
        {"a": {"parameters": schema}},
    ]
    for shape in shapes:
        (definition,) = read_definitions(shape)
        assert (definition.name, list(definition.properties)) == ("a", ["x"])
    with pytest.raises(GuardrailUsageError, match="defined twice"):
        read_definitions([{"name": "a"}, {"name": "a"}])


def test_a_patched_static_method_is_named_by_its_class() -> None:
    """Patching GetOrder.invoke and CancelOrder.invoke gives two tools, not two 'invoke'."""
    module = types.ModuleType("retail_tools_for_test")
    exec(
        "class GetOrder:\n    @staticmethod\n    def invoke(data, order_id):\n        return {}\n"
        "class CancelOrder:\n    @staticmethod\n    def invoke(data, order_id):\n"
        "        return 'cancelled ' + order_id\n",
        module.__dict__,
    )
    sys.modules[module.__name__] = module
    guard = Guard()
    guard.add_kind("order")
    try:
        first = guard.patch(f"{module.__name__}:GetOrder.invoke", effect="read")
        second = guard.patch(f"{module.__name__}:CancelOrder.invoke", ids={"order_id": "order"})
        assert {"get_order", "cancel_order"} <= set(guard.specs)
        assert "invoke" not in guard.specs
        with guard.session("s"), pytest.raises(IdentifierViolation):
            module.CancelOrder.invoke({}, order_id="o-1")
        first.undo()
        second.undo()
    finally:
        del sys.modules[module.__name__]


def test_the_mode_can_be_changed_after_construction() -> None:
    """observe while trying a tool set, then raise: the next call follows the new mode."""
    guard = _guard("observe")
    quiet = guard.silenced()
    ran: list[str] = []

    @guard.tool
    def cancel_order(order_id: str) -> str:
        ran.append(order_id)
        return "cancelled"

    with guard.session("s"):
        cancel_order("#W1000002")  # observed: runs
        guard.mode = "raise"
        assert guard.silenced().mode == "raise"
        assert quiet.mode == "observe"  # a copy made before keeps its own
        with pytest.raises(IdentifierViolation):
            cancel_order("#W1000003")
    assert ran == ["#W1000002"]
