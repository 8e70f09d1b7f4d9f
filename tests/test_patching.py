"""guard.patch: tool functions of a module the program cannot edit, guarded in place with wrapt."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import itertools
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from guardrail import Guard, GuardrailUsageError, IdentifierViolation, Rejection

SHOP = '''
"""A third-party shop client: its functions are the agent's tools."""

REFUNDS = []


def search_orders(customer_id):
    """Orders of a customer."""
    return {"orders": [{"order_id": "#W8855135"}, {"order_id": "#W2378156"}]}


def issue_refund(order_id, amount):
    """Refund an order."""
    REFUNDS.append(order_id)
    return f"refunded {amount} on {order_id}"


async def issue_refund_async(order_id, amount):
    """Refund an order, asynchronously."""
    REFUNDS.append(order_id)
    return f"refunded {amount} on {order_id}"


class Client:
    """A client object whose methods are tools."""

    def __init__(self):
        self.sent = []

    def refund(self, order_id):
        self.sent.append(order_id)
        return f"refunded {order_id}"
'''

_names = itertools.count()


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The name of a fresh shop module on sys.path, not imported yet."""
    name = f"thirdparty_shop_{next(_names)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(SHOP), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def shop_guard(mode: Any = "raise") -> Guard:
    guard = Guard(mode=mode)
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    return guard


def patch_shop(guard: Guard, module: str) -> list[Any]:
    return [
        guard.patch(f"{module}:search_orders", produces={"orders[*].order_id": "order"},
                    effect="read"),
        guard.patch(f"{module}:issue_refund", ids={"order_id": "order"}),
    ]  # fmt: skip


def test_a_patched_function_is_checked_run_and_recorded_as_a_decorated_one(shop: str) -> None:
    """The module's function refuses a mutated id, runs with the id as given, harvests."""
    module = importlib.import_module(shop)
    original = module.issue_refund
    guard = shop_guard()
    patches = patch_shop(guard, shop)
    assert all(patch.applied for patch in patches)
    assert module.issue_refund is not original
    with guard.session("s") as ledger:
        module.search_orders("cus_41ZpA9")
        assert [entry.value for entry in ledger] == ["#W8855135", "#W2378156"]
        assert module.issue_refund("W2378156", 40) == "refunded 40 on W2378156"
        with pytest.raises(IdentifierViolation) as refusal:
            module.issue_refund("#W2378157", 40)
    assert refusal.value.verdict.findings[0].problem == "mutated"
    assert module.REFUNDS == ["W2378156"]
    assert guard.specs["issue_refund"].effect == "write"


def test_a_module_imported_later_is_patched_when_it_is_imported(shop: str) -> None:
    """Patching before the import waits for it (a wrapt post-import hook), then guards."""
    assert shop not in sys.modules
    guard = shop_guard()
    patch = guard.patch(f"{shop}:issue_refund", ids={"order_id": "order"})
    assert not patch.applied
    assert repr(patch).endswith("waiting>")
    module = importlib.import_module(shop)
    assert patch.applied
    with guard.session("s"), pytest.raises(IdentifierViolation):
        module.issue_refund("#W2378157", 40)
    assert module.REFUNDS == []


def test_an_async_function_is_patched_and_stays_a_coroutine_function(shop: str) -> None:
    """An async tool is awaited through the guard; in reprompt mode a refusal is a Rejection."""
    module = importlib.import_module(shop)
    guard = shop_guard(mode="reprompt")
    guard.patch(f"{shop}:issue_refund_async", ids={"order_id": "order"})
    assert inspect.iscoroutinefunction(module.issue_refund_async)
    assert list(inspect.signature(module.issue_refund_async).parameters) == ["order_id", "amount"]

    async def conversation() -> tuple[Any, Any]:
        async with guard.session("s"):
            guard.record("search", {}, None)  # an undeclared tool: nothing recorded
            refused = await module.issue_refund_async("#W2378157", 40)
            guard.declare("search", produces={"[*]": "order"}, effect="read")
            guard.record("search", {}, ["#W2378157"])
            allowed = await module.issue_refund_async("W2378157", 40)
        return refused, allowed

    refused, allowed = asyncio.run(conversation())
    assert isinstance(refused, Rejection)
    assert allowed == "refunded 40 on W2378157"
    assert module.REFUNDS == ["W2378157"]


def test_a_method_is_patched_on_its_class_and_still_binds(shop: str) -> None:
    """Client.refund guarded in place: through an instance, and called on the class with self."""
    module = importlib.import_module(shop)
    guard = shop_guard()
    guard.patch(f"{shop}:Client.refund", ids={"order_id": "order"})
    client = module.Client()
    with guard.session("s"):
        guard.declare("search", produces={"[*]": "order"}, effect="read")
        guard.record("search", {}, ["#W8855135"])
        assert client.refund("W8855135") == "refunded W8855135"
        assert module.Client.refund(client, order_id="#W8855135") == "refunded #W8855135"
        with pytest.raises(IdentifierViolation):
            client.refund("#W8855136")
    assert client.sent == ["W8855135", "#W8855135"]


def test_undo_puts_the_original_back_and_cancels_a_waiting_patch(shop: str) -> None:
    """undo(): the very original object returns; a patch undone before the import never applies."""
    guard = shop_guard()
    waiting = guard.patch(f"{shop}:issue_refund", ids={"order_id": "order"})
    waiting.undo()
    module = importlib.import_module(shop)
    assert not waiting.applied
    assert module.issue_refund("anything", 1) == "refunded 1 on anything"  # not guarded
    original = module.issue_refund
    with guard.patch(f"{shop}:issue_refund", ids={"order_id": "order"}) as patch:
        assert module.issue_refund is not original
    assert module.issue_refund is original
    assert not patch.applied
    patch.undo()  # twice is harmless
    again = guard.patch(f"{shop}:issue_refund", ids={"order_id": "order"})  # same declaration
    assert again.applied
    again.undo()


def test_a_patched_tool_has_the_decorators_sessions_and_audit(shop: str) -> None:
    """Outside a session it is the decorator's usage error; each call is a call_checked event."""
    module = importlib.import_module(shop)
    guard = shop_guard()
    patch_shop(guard, shop)
    with pytest.raises(GuardrailUsageError, match="session"):
        module.issue_refund("#W8855135", 1)
    with capture_logs() as logs, guard.session("conv-7"):
        module.search_orders("cus_41ZpA9")
        module.issue_refund("#W8855135", 1)
    checked = [event for event in logs if event["event"] == "guardrail.call_checked"]
    assert [(e["tool"], e["outcome"], e["session"]) for e in checked] == [
        ("search_orders", "allowed", "conv-7"),
        ("issue_refund", "allowed", "conv-7"),
    ]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("no_colon", "takes 'module:function'"),
        ("mod:", "takes 'module:function'"),
        ("mod:a..b", "takes 'module:function'"),
    ],
)
def test_a_bad_target_is_a_usage_error(target: str, message: str) -> None:
    """The target is 'module:function' or 'module:Class.method'; anything else says so."""
    with pytest.raises(GuardrailUsageError, match=message):
        Guard().patch(target)


def test_a_missing_function_or_a_non_function_is_a_usage_error(shop: str) -> None:
    """A name the module lacks, or one that is no function, is refused when patched."""
    importlib.import_module(shop)
    with pytest.raises(GuardrailUsageError, match="has no 'refund_all'"):
        Guard().patch(f"{shop}:refund_all")
    with pytest.raises(GuardrailUsageError, match="REFUNDS is list, not a function"):
        Guard().patch(f"{shop}:REFUNDS")


def test_undo_refuses_to_remove_a_later_replacement(shop: str) -> None:
    """Replaced again after the patch: undo would drop that change, so it says so instead."""
    module = importlib.import_module(shop)
    patch = Guard().patch(f"{shop}:search_orders", effect="read")
    module.__dict__["search_orders"] = lambda customer_id: {}
    with pytest.raises(GuardrailUsageError, match="replaced again since"):
        patch.undo()
