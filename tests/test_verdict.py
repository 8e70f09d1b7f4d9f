"""Verdicts and rejections: truthiness, and a rejection written out as JSON wherever it goes."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import pydantic
import pytest

from guardrail import Guard, Id, Rejection
from guardrail._guard.audit import SilentLogger
from guardrail._provenance.failure import failed

from .conftest import ORDERS, shop_guard

Order = Annotated[str, Id("order")]


def _guard() -> tuple[Guard, dict[str, Any]]:
    """A reprompt-mode shop guard with a sync and an async refund tool."""
    guard = shop_guard("reprompt", logger=SilentLogger())

    @guard.tool(effect="write")
    def refund(order_id: Order) -> dict[str, Any]:
        """Refund an order."""
        return {"refunded": order_id}

    @guard.tool(effect="write")
    async def refund_async(order_id: Order) -> dict[str, Any]:
        """Refund an order, asynchronously."""
        await asyncio.sleep(0)
        return {"refunded": order_id}

    return guard, {"refund": refund, "refund_async": refund_async}


def _rejection() -> Rejection:
    guard, tools = _guard()
    with guard.session("s"):
        guard.record("search_orders", {"customer_id": "cus_41ZpA9"}, ORDERS)
        rejection = tools["refund"]("#W8855136")
    assert isinstance(rejection, Rejection)
    return rejection


def test_a_rejection_is_truthy_so_or_default_keeps_it() -> None:
    """A refused call's Rejection is truthy, sync and async: `result or default` returns it."""
    guard, tools = _guard()

    async def refused_async() -> Any:
        return await tools["refund_async"]("#W8855136")

    with guard.session("s"):
        guard.record("search_orders", {"customer_id": "cus_41ZpA9"}, ORDERS)
        for result in (tools["refund"]("#W8855136"), asyncio.run(refused_async())):
            assert isinstance(result, Rejection)
            assert bool(result) is True
            assert (result or "default") is result
            assert not result.verdict.allowed


def test_to_dict_names_error_message_findings_and_tool() -> None:
    """to_dict() is JSON-safe and has the tool; to_json() is the same as text."""
    rejection = _rejection()
    data = rejection.to_dict()
    assert set(data) == {"error", "message", "findings", "tool"}
    assert (data["error"], data["tool"]) == ("identifier_refused", "refund")
    assert data["message"] == str(rejection)
    assert data["findings"][0]["problem"] == "mutated"
    assert json.loads(rejection.to_json()) == data


def test_pydantic_serialises_a_rejection_typed_any_as_its_dict() -> None:
    """TypeAdapter(Any) (how agent frameworks type tool returns) dumps a rejection as to_dict()."""
    rejection = _rejection()
    adapter = pydantic.TypeAdapter(Any)
    assert adapter.dump_python(rejection, mode="json") == rejection.to_dict()
    nested = json.loads(adapter.dump_json({"results": [rejection]}))
    assert nested == {"results": [rejection.to_dict()]}


def test_a_pydantic_field_typed_rejection_validates_and_serialises() -> None:
    """A model field typed Rejection takes only a Rejection and dumps as to_dict()."""
    rejection = _rejection()
    model = pydantic.create_model("ToolReturn", result=(Rejection | str, ...))
    assert json.loads(model(result=rejection).model_dump_json()) == {"result": rejection.to_dict()}
    with pytest.raises(pydantic.ValidationError):
        pydantic.TypeAdapter(Rejection).validate_python({"error": "identifier_refused"})
    schema = pydantic.TypeAdapter(Rejection).json_schema()
    assert schema["properties"]["error"] == {"const": "identifier_refused"}
    assert schema["required"] == ["error", "message", "findings", "tool"]


def test_json_dumps_takes_rejection_json_default() -> None:
    """json.dumps(default=Rejection.json_default) writes a rejection; other objects still fail."""
    rejection = _rejection()
    assert json.loads(json.dumps([rejection], default=Rejection.json_default)) == [
        rejection.to_dict()
    ]
    with pytest.raises(TypeError, match="not JSON serializable"):
        json.dumps(object(), default=Rejection.json_default)


def test_a_rejection_serialised_by_pydantic_is_read_back_as_a_failure() -> None:
    """A runtime that sends the pydantic dump back as the result teaches the ledger nothing."""
    guard, _ = _guard()
    rejection = _rejection()
    sent = pydantic.TypeAdapter(Any).dump_json(rejection).decode()
    assert failed(None, sent)
    # A tool whose whole result text is scanned for ids: the refusal quotes the invented one.
    guard.declare("find_orders", produces={"re:(#W\\d{7})": "order"}, effect="read")
    assert "#W8855136" in sent
    with guard.session("s") as ledger:
        assert guard.record("find_orders", {}, sent) == []
        assert guard.record("find_orders", {}, "found #W8855136") != []  # the scan works
        assert [entry.value for entry in ledger] == ["#W8855136"]
