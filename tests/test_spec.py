"""Declarations: Id annotations, decorator keywords and guard.declare, all compiled once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Optional, TypedDict, cast

import pytest
from pydantic import BaseModel, Field, TypeAdapter, validate_call

from guardrail import Guard, GuardrailUsageError, Id, IdentifierViolation, describe_ids
from guardrail._declare.spec import annotation_ids, param_specs, producers, signature_ids

from .conftest import ORDERS, shop_guard


class Line(BaseModel):
    item_id: Annotated[str, Id("item")]
    note: str = ""


class Order(BaseModel):
    order_id: Annotated[str, Id("order", status="status")]
    status: str = "pending"
    lines: list[Line] = []
    by_sku: dict[Annotated[str, Id("item")], int] = {}


@dataclass
class Refund:
    refund_id: Annotated[str, Id("item", role="refund_{n}")]
    order: Optional[Order] = None  # noqa: UP045 - the old spelling must work too


class Customer(TypedDict):
    customer_id: Annotated[str, Id("customer")]
    emails: list[Annotated[str, Id("email")]]


def test_id_takes_one_kind_or_several() -> None:
    """Id("a") and Id(["a", "b"]) both work; an empty kind does not."""
    assert Id("order").kinds == ("order",)
    assert Id(["customer", "line"]).kinds == ("customer", "line")
    with pytest.raises(GuardrailUsageError):
        Id([])


def test_annotations_of_models_dataclasses_and_typeddicts_become_paths() -> None:
    """Nested models, lists, optionals and dict keys are walked by their annotations."""
    order_paths = {path.text: marker.kinds for path, marker in annotation_ids(Order)}
    assert order_paths == {
        "order_id": ("order",),
        "lines[*].item_id": ("item",),
        "by_sku.~": ("item",),
    }
    refund_paths = [path.text for path, _ in annotation_ids(Refund)]
    assert refund_paths == [
        "refund_id",
        "order.order_id",
        "order.lines[*].item_id",
        "order.by_sku.~",
    ]
    customer = {path.text for path, _ in annotation_ids(Customer)}
    assert customer == {"customer_id", "emails[*]"}


def test_self_referencing_models_are_walked_once() -> None:
    """A model that contains itself does not recurse forever."""

    class Node(BaseModel):
        node_id: Annotated[str, Id("item")]
        children: list[Node] = []

    Node.model_rebuild()
    assert [path.text for path, _ in annotation_ids(Node)] == ["node_id"]


def test_signature_gives_params_and_result_producers() -> None:
    """Parameters and the return annotation are read from one signature."""

    def refund(
        order_id: Annotated[str, Id("order")],
        item_ids: list[Annotated[str, Id("item")]],
        amount: int,
    ) -> Refund:
        return Refund(refund_id="r1")

    params, produced = signature_ids(refund)
    assert [(p.path.text, p.kinds) for p in params] == [
        ("order_id", ("order",)),
        ("item_ids[*]", ("item",)),
    ]
    assert params[0].simple and not params[1].simple
    assert produced[0].path is not None and produced[0].path.text == "refund_id"
    assert produced[0].role == "refund_{n}"


def test_decorator_keyword_forms() -> None:
    """ids= takes a kind, a list of kinds, or {kind, sep}; produces= takes {kind, role, status}."""
    params = param_specs(
        {"a": "order", "b": ["customer", "email"], "c": {"kind": "item", "sep": ","}},
        tool="t",
    )
    assert [(p.name, p.kinds, p.sep) for p in params] == [
        ("a", ("order",), None),
        ("b", ("customer", "email"), None),
        ("c", ("item",), ","),
    ]
    produced = producers(
        {"orders[*].id": {"kind": "order", "status": "state"}, "re:(W\\d+)": "order"},
        tool="t",
    )
    assert produced[0].status == "state"
    assert produced[1].regex is not None and produced[1].source == "re:(W\\d+)"


def test_default_ok_exempts_a_parameters_default() -> None:
    """Id(default_ok=True), or default_ok in the mapping form, reaches the parameter spec."""
    assert not Id("order").default_ok
    assert Id("order", default_ok=True).default_ok
    with pytest.raises(GuardrailUsageError, match="default_ok"):
        Id("order", default_ok="yes")  # type: ignore[arg-type]
    (param,) = param_specs({"a": {"kind": "order", "default_ok": True}}, tool="t")
    assert param.default_ok

    def refund(
        a: Annotated[str, Id("order", default_ok=True)] = "W1", b: Annotated[str, Id("order")] = ""
    ) -> None: ...

    params, _ = signature_ids(refund)
    assert [(p.name, p.default_ok) for p in params] == [("a", True), ("b", False)]


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        ({"ids": {"order_id": "ordr"}}, "'order_id' names unknown kind 'ordr'"),
        ({"produces": {"orders[*": "order"}}, "malformed path 'orders\\[\\*'"),
        ({"produces": {"re:(": "order"}}, "bad regex producer"),
        ({"produces": {"a": ["order", "item"]}}, "exactly one kind"),
        ({"ids": {"order_id": {"knd": "order"}}}, "unknown option"),
        ({"ids": {"order_id": 3}}, "expected a kind name"),
        ({"ids": {"[*]": "order"}}, "must start with a parameter name"),
        ({"effect": "delete"}, "effect must be 'read' or 'write'"),
        ({"mints": {"email": "email"}, "effect": "read"}, "only a write tool mints"),
        ({"produces": {"orders[*]": {"kind": "order", "status": "s"}}}, "must end in a key"),
    ],
)
def test_bad_declarations_fail_when_declared(declaration: dict[str, object], message: str) -> None:
    """A bad declaration raises at once, naming the tool and what is wrong."""
    guard = shop_guard()
    with pytest.raises(GuardrailUsageError, match=message) as info:
        guard.declare("lookup", **declaration)  # type: ignore[arg-type]
    assert "lookup" in str(info.value)


def test_id_on_a_missing_parameter_names_the_tool_and_parameter() -> None:
    """ids= naming a parameter the function lacks is caught at decoration."""
    guard = shop_guard()
    with pytest.raises(GuardrailUsageError, match="no parameter of that name") as info:

        @guard.tool(ids={"order": "order"})
        def refund(order_id: str) -> None: ...

    assert (info.value.tool, info.value.param) == ("refund", "order")


def test_an_id_on_star_args_says_to_take_a_list() -> None:
    """Id on *args is a usage error naming the tool, the parameter and the list to use instead."""
    guard = shop_guard()
    with pytest.raises(GuardrailUsageError, match=r"list\[Annotated") as info:

        @guard.tool
        def refund(*order_ids: Annotated[str, Id("order")]) -> None: ...

    assert (info.value.tool, info.value.param) == ("refund", "order_ids")
    assert "*order_ids" in str(info.value)


def test_an_id_on_star_star_kwargs_says_to_name_the_keywords() -> None:
    """Id on **kwargs is a usage error; ids= naming a keyword it takes is checked by that name."""
    guard = shop_guard()
    with pytest.raises(GuardrailUsageError, match=r"ids=\{'order_id'") as info:

        @guard.tool
        def refund(**orders: Annotated[str, Id("order")]) -> None: ...

    assert (info.value.tool, info.value.param) == ("refund", "orders")
    refunded: list[object] = []

    @guard.tool(ids={"order_id": "order"})
    def cancel(**orders: str) -> None:
        refunded.append(orders["order_id"])

    with guard.session("s"):
        guard.record("search_orders", {}, ORDERS)
        cancel(order_id="W8855135")
        with pytest.raises(IdentifierViolation):
            cancel(order_id="W8855136")
    assert refunded == ["W8855135"]  # as the caller wrote it


def test_unknown_kind_in_an_annotation_fails_at_decoration() -> None:
    """Id("nope") in a signature is a usage error when the decorator runs."""
    guard = Guard()
    with pytest.raises(GuardrailUsageError, match="unknown kind 'nope'"):

        @guard.tool
        def f(x: Annotated[str, Id("nope")]) -> None: ...


def test_tools_default_to_write() -> None:
    """A tool declared without an effect is a write, the strict side."""
    guard = shop_guard()
    assert guard.declare("anything").effect == "write"

    @guard.tool
    def act(order_id: Annotated[str, Id("order")]) -> None: ...

    assert guard.specs["act"].effect == "write"


def test_examples_quoted_in_a_description_are_placeholders() -> None:
    """An id of a parameter's kind quoted in a tool description becomes an example."""
    guard = shop_guard()

    @guard.tool(effect="read")
    def get_details(order_id: Annotated[str, Id("order")]) -> None:
        """Look up an order, such as '#W1234567'."""

    assert "W1234567" in guard.kinds["order"].examples


class _Orders:
    guard = shop_guard()

    @guard.tool
    def delete(self, order_id: Annotated[str, Id("order")]) -> str:
        return f"deleted {order_id}"


def test_a_second_tool_under_a_declared_name_is_refused() -> None:
    """Two methods named delete in two classes: the second says where both come from."""
    guard = _Orders.guard
    with pytest.raises(GuardrailUsageError) as info:

        class Customers:
            @guard.tool
            def delete(self, customer_id: Annotated[str, Id("customer")]) -> str:
                return f"deleted {customer_id}"

    message = str(info.value)
    assert f"{__name__}._Orders.delete" in message
    assert "Customers.delete" in message
    assert "name=" in message
    assert info.value.tool == "delete"
    assert guard.specs["delete"].params[0].kinds == ("order",)  # the first one stays


def test_declare_after_a_decorated_tool_of_that_name_is_refused() -> None:
    """guard.declare cannot replace a decorated tool, nor a declaring decorator a declared one."""
    guard = shop_guard()

    @guard.tool
    def refund(order_id: Annotated[str, Id("order")]) -> str:
        return order_id

    with pytest.raises(GuardrailUsageError, match=r"refund.*guard\.declare.*name="):
        guard.declare("refund", ids={})
    with pytest.raises(GuardrailUsageError, match=r"issue_refund.*declared twice.*guard\.declare"):

        @guard.tool(name="issue_refund", ids={"order_id": "item"})
        def issue(order_id: str) -> str:
            return order_id

    assert guard.specs["refund"].params[0].kinds == ("order",)
    assert guard.specs["issue_refund"].params[0].kinds == ("order",)


def test_the_same_tool_declared_again_is_no_second_tool() -> None:
    """A factory or notebook cell run twice declares the same spec again: allowed."""
    guard = shop_guard()

    def make(kind: str) -> object:
        @guard.tool(ids={"ref": kind})
        def cancel(ref: str) -> str:
            return ref

        return cancel

    make("order")
    make("order")
    with pytest.raises(GuardrailUsageError, match="declared twice"):
        make("customer")  # the same function, checking another kind: a second tool
    assert guard.specs["cancel"].params[0].kinds == ("order",)


# -- the JSON schema an Id publishes ------------------------------------------------------

ORDER_DESCRIPTION = (
    "Identifier (order): copy the value exactly from a tool result or the ID LEDGER, "
    "never from memory."
)


def test_an_id_publishes_its_instruction_and_kind_in_json_schema() -> None:
    """TypeAdapter(Annotated[str, Id("order")]) gives the instruction and x-guardrail-kind."""
    schema = TypeAdapter(Annotated[str, Id("order")]).json_schema()
    assert schema == {
        "type": "string",
        "description": ORDER_DESCRIPTION,
        "x-guardrail-kind": "order",
    }


def test_list_items_several_kinds_and_a_separator_are_published() -> None:
    """list[Annotated[str, Id(...)]] describes each item; kinds listed, the separator named."""
    schema = TypeAdapter(list[Annotated[str, Id(["order", "customer"], sep=",")]]).json_schema()
    item = schema["items"]
    assert schema["type"] == "array"
    assert item["x-guardrail-kind"] == ["order", "customer"]
    assert item["x-guardrail-sep"] == ","
    assert item["description"].startswith("Identifier (order or customer): copy the value exactly")
    assert item["description"].endswith("Several are separated by ','.")


def test_a_functions_parameters_keep_their_own_description_first() -> None:
    """validate_call's schema: a parameter's Field(description=) comes first, then the rule."""

    @validate_call
    def refund(
        order_id: Annotated[str, Id("order"), Field(description="The order to refund")],
        lines: list[Annotated[str, Id("item")]],
        note: str = "",
        other: Annotated[str, Field(description="Another one?"), Id("order")] = "",
    ) -> None:
        """Refund an order."""

    properties = TypeAdapter(cast(Any, refund)).json_schema()["properties"]
    assert properties["order_id"]["description"] == f"The order to refund. {ORDER_DESCRIPTION}"
    assert properties["other"]["description"] == f"Another one? {ORDER_DESCRIPTION}"
    assert properties["order_id"]["x-guardrail-kind"] == "order"
    assert properties["lines"]["items"]["x-guardrail-kind"] == "item"
    assert "description" not in properties["note"]


def test_describe_ids_restores_the_rule_a_field_description_replaced() -> None:
    """A field description set by a framework (from a docstring) is kept, the rule appended."""

    class RefundArgs(BaseModel):
        order_id: Annotated[str, Id("order")] = Field(description="The order to refund")
        order: Order
        maybe: Annotated[str, Id("order")] | None = None

    raw = RefundArgs.model_json_schema()
    # pydantic writes the field's own description over the one the Id gave its type.
    assert raw["properties"]["order_id"]["description"] == "The order to refund"
    described = describe_ids(raw)
    assert described["properties"]["order_id"]["description"] == (
        f"The order to refund. {ORDER_DESCRIPTION}"
    )
    nested = described["$defs"]["Line"]["properties"]["item_id"]
    assert nested["x-guardrail-kind"] == "item"
    assert "copy the value exactly" in nested["description"]
    assert described["properties"]["maybe"]["anyOf"][0]["description"] == ORDER_DESCRIPTION
    assert describe_ids(described) == described  # twice adds nothing
    assert raw["properties"]["order_id"]["description"] == "The order to refund"  # not changed


def test_describe_ids_leaves_other_schemas_alone_and_refuses_non_schemas() -> None:
    """Nodes without x-guardrail-kind are copied unchanged; a non-mapping is a usage error."""
    schema = {"type": "object", "properties": {"q": {"type": "string", "description": "x"}}}
    assert describe_ids(schema) == schema
    with pytest.raises(GuardrailUsageError, match="takes a JSON schema"):
        describe_ids([schema])  # type: ignore[arg-type]
