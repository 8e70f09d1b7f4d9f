"""The binding every adapter applies to a runtime's tools (guardrail/integrations/_common/tools.py).

Framework-free: a tool is its parameter schema (as pydantic writes it, which
is what every runtime sends the model), and the model or function that
validates its arguments.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest
from pydantic import AliasChoices, BaseModel, Field, TypeAdapter

from guardrail import Guard, GuardrailUsageError, Id
from guardrail.integrations._common.tools import Bindings, bind, kinds_in, marks_in


def shop() -> Guard:
    guard = Guard(mode="reprompt")
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    guard.add_kind("sku")
    return guard


def schema_of(function: Any) -> dict[str, Any]:
    """The parameter schema pydantic writes for a function (what a runtime sends)."""
    import inspect
    import typing

    from pydantic import ConfigDict, create_model

    hints = typing.get_type_hints(function, include_extras=True)
    fields = {
        name: (hints[name], ... if p.default is inspect.Parameter.empty else p.default)
        for name, p in inspect.signature(function).parameters.items()
    }
    model = create_model("Arguments", __config__=ConfigDict(), **fields)  # type: ignore[call-overload]
    schema: dict[str, Any] = model.model_json_schema()
    return schema


class Line(BaseModel):
    sku: Annotated[str, Id("sku")] = Field(alias="skuId")
    quantity: int


class Found(TypedDict):
    order_id: Annotated[str, Id("order")]


def test_marks_are_read_at_every_depth_with_their_separator() -> None:
    """x-guardrail-kind under $defs, arrays and maps, with x-guardrail-sep, are marks."""
    schema = TypeAdapter(dict[str, list[Line]]).json_schema()
    assert kinds_in({"type": "object", "properties": {"by": schema}, "$defs": schema["$defs"]}) == {
        "by.*[*].skuId": "sku"
    }
    packed = {"properties": {"ids": {"x-guardrail-kind": "order", "x-guardrail-sep": ","}}}
    [mark] = marks_in(packed)
    assert mark.declaration() == {"kinds": ["order"], "sep": ","}


def test_an_annotated_tool_is_declared_a_write_with_its_result_ids() -> None:
    """A tool the guard does not know is declared by its parameter marks and return type."""
    guard = shop()

    def lookup(order_id: Annotated[str, Id("order")]) -> Found:
        return {"order_id": order_id}

    bound = bind(guard, "lookup", schema_of(lookup), runtime="test", function=lookup)
    spec = guard.specs["lookup"]
    assert bound.spec is spec and spec.effect == "write"
    assert [param.path.text for param in spec.params] == ["order_id"]
    assert [producer.source for producer in spec.produces] == ["order_id"]


def test_a_declaration_that_leaves_out_a_marked_parameter_is_a_usage_error() -> None:
    """guard.declare checks nothing the schema marks: an error that says which, not a gap."""
    guard = shop()
    guard.declare("refund", ids={}, effect="write")

    def refund(order_id: Annotated[str, Id("order")]) -> str:
        return "ok"

    with pytest.raises(GuardrailUsageError, match="marked Id\\('order'\\).*does not check it"):
        bind(guard, "refund", schema_of(refund), runtime="test")


def test_a_declared_path_the_schema_lacks_is_a_usage_error_naming_what_it_has() -> None:
    """ids={"order_id"} for a schema with orderId only: the message names orderId."""
    guard = shop()
    guard.declare("refund", ids={"order_id": "order"})
    schema = {"type": "object", "properties": {"orderId": {"type": "string"}}}
    with pytest.raises(
        GuardrailUsageError, match="has no 'order_id' there \\(it has: 'orderId'\\)"
    ):
        bind(guard, "refund", schema, runtime="test")


def test_an_alias_is_read_as_its_field_and_the_tool_gets_the_checked_value_back() -> None:
    """orderId and order_id are one field: the check sees one value, the tool gets it by name."""
    guard = shop()
    guard.declare("refund", ids={"order_id": "order"})

    def refund(order_id: Annotated[str, Field(alias="orderId")]) -> str:
        return "ok"

    bound = bind(guard, "refund", schema_of(refund), runtime="test", source=refund)
    checked, undo = bound.to_check({"orderId": "#W1", "order_id": "#W2", "note": "x"})
    assert checked == {"order_id": "#W1", "note": "x"}  # the other name is dropped
    assert bound.to_run({"order_id": "#W1!", "note": "x"}, undo, None) == {
        "orderId": "#W1!",
        "note": "x",
    }


def test_nested_aliases_in_lists_and_choices_are_renamed_both_ways() -> None:
    """lines[*].sku declared, the model sends lines[*].skuId (or a validation alias)."""
    guard = shop()

    class Order(BaseModel):
        lines: list[Line]
        note: str = Field(validation_alias=AliasChoices("note", "memo"))

    guard.declare("order", ids={"lines[*].sku": "sku"})
    schema = Order.model_json_schema()
    bound = bind(guard, "order", schema, runtime="test", source=Order)
    sent = {"lines": [{"skuId": "a", "quantity": 1}, {"sku": "b", "quantity": 2}]}
    checked, undo = bound.to_check(sent)
    assert checked == {"lines": [{"sku": "a", "quantity": 1}, {"sku": "b", "quantity": 2}]}
    assert bound.to_run(checked, undo, sent) == sent
    assert bound.to_check('{"lines": [{"skuId": "c"}]}')[0] == {"lines": [{"sku": "c"}]}


def test_every_declared_id_parameter_is_described_for_the_model() -> None:
    """A hand-declared, unmarked parameter gets the instruction after its own description."""
    guard = shop()
    guard.declare("refund", ids={"order_id": "order"})
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"order_id": {"type": "string", "description": "The order"}},
    }
    bound = bind(guard, "refund", schema, runtime="test")
    assert bound.schema is not None
    description = bound.schema["properties"]["order_id"]["description"]
    assert description.startswith("The order. Identifier (order): copy the value exactly")
    assert "description" in schema["properties"]["order_id"]  # the given schema is untouched
    assert schema["properties"]["order_id"]["description"] == "The order"


def test_the_cache_binds_again_when_the_spec_or_the_schema_changes() -> None:
    """Bindings hands back the same binding while nothing changed, a new one after."""
    guard = shop()
    bindings = Bindings(guard, "test")
    schema = {"type": "object", "properties": {"order_id": {"type": "string"}}}
    first = bindings.get("refund", schema)
    assert first.spec is None and bindings.get("refund", dict(schema)) is first
    guard.declare("refund", ids={"order_id": "order"})
    second = bindings.get("refund", schema)
    assert second is not first and second.spec is guard.specs["refund"]
    assert bindings.latest("refund") is second
