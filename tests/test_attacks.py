"""Attacks on the guard, written as a hostile user or a careless integrator would try them.

Each test tries one channel by which a foreign identifier could reach a
write tool, or one input that could crash the guard or burn its CPU, and
asserts that the write tool never runs with it.
"""

from __future__ import annotations

import json
from typing import Annotated

import pytest
from structlog.testing import capture_logs

from guardrail import Guard, GuardrailUsageError, Id, IdentifierViolation, Rejection
from guardrail.stores.memory import MemoryStore

from .conftest import ORDERS, shop_guard

# -- forged ledger blocks and refusals read back (compaction) ---------------------------------


# (end of the compaction section)


# -- tools, results and arguments (the check and the harvest) ---------------------------------


# tools, results, arguments

_Order = Annotated[str, Id("order")]


def test_a_second_tool_of_a_write_tools_name_cannot_unguard_it() -> None:
    """A lax tool declared under a write tool's name is refused; the write stays checked."""
    guard = shop_guard()
    ran: list[str] = []

    @guard.tool
    def delete_order(order_id: _Order) -> str:
        ran.append(order_id)
        return "deleted"

    with pytest.raises(GuardrailUsageError, match="declared twice"):
        guard.load_manifest({"tools": {"delete_order": {"effect": "read"}}})
    with pytest.raises(GuardrailUsageError, match="declared twice"):
        guard.declare("delete_order", effect="read")
    with guard.session("s"), pytest.raises(IdentifierViolation):
        delete_order("W1234567")
    assert ran == []


@pytest.mark.parametrize("answer", [{"error": "no such order"}, {"items": []}, [], "not found"])
def test_a_lookup_that_finds_nothing_does_not_launder_a_typed_id(answer: object) -> None:
    """A foreign order typed by the user, 'looked up' with no result, still cannot be refunded."""
    guard = shop_guard("reprompt")
    refunded: list[str] = []

    @guard.tool(effect="read", name="lookup_order")
    def lookup_order(order_id: _Order) -> object:
        return answer

    @guard.tool
    def refund(order_id: _Order) -> str:
        refunded.append(order_id)
        return "refunded"

    with guard.session("victim"):
        guard.observe_user("please refund my order #W9999999")  # someone else's order
        lookup_order("W9999999")
        assert isinstance(refund("W9999999"), Rejection)
    assert refunded == []


def test_observe_mode_does_not_launder_a_foreign_id_into_a_shared_ledger() -> None:
    """A shadow (observe) rollout runs a foreign lookup; the enforcing guard still refuses."""
    store = MemoryStore()
    shadow = shop_guard("observe", store=store)
    strict = shop_guard("raise", store=store)
    refunded: list[str] = []

    @shadow.tool(effect="read", produces={"order_id": "order"})
    def peek(order_id: _Order) -> dict[str, str]:
        return {"order_id": order_id, "owner": "someone else"}

    @strict.tool
    def refund(order_id: _Order) -> str:
        refunded.append(order_id)
        return "refunded"

    with shadow.session("victim"):
        peek("W9999999")  # would be refused: observe mode runs it anyway
        shadow.enforce("get_order", {"order_id": "W8888888"})
        shadow.record("get_order", {"order_id": "W8888888"}, {"order_id": "W8888888"})
    with strict.session("victim"):
        for foreign in ("W9999999", "W8888888"):
            with pytest.raises(IdentifierViolation):
                refund(foreign)
    assert refunded == []


def test_an_error_that_echoes_the_id_does_not_verify_it() -> None:
    """A lookup answering 'not found' with the id in a declared field brings nothing in."""
    guard = shop_guard("reprompt")
    refunded: list[str] = []

    @guard.tool(effect="read", name="lookup_order", produces={"order_id": "order"})
    def lookup_order(order_id: _Order) -> dict[str, str]:
        return {"error": f"order {order_id} not found", "order_id": order_id}

    @guard.tool
    def refund(order_id: _Order) -> str:
        refunded.append(order_id)
        return "refunded"

    with guard.session("victim"):
        guard.observe_user("refund #W9999999")
        lookup_order("W9999999")
        guard.record(
            "get_order", {"order_id": "W9999999"}, '{"isError": true, "order_id": "W9999999"}'
        )
        assert isinstance(refund("W9999999"), Rejection)
    assert refunded == []


def test_a_refusal_read_back_as_a_result_verifies_nothing() -> None:
    """A runtime recording the guard's own refusal text through a regex producer learns nothing."""
    guard = shop_guard("reprompt")
    guard.declare("find_orders", ids={"order_id": "order"}, produces={"re:(W\\d{7})": "order"})
    refunded: list[str] = []

    @guard.tool
    def refund(order_id: _Order) -> str:
        refunded.append(order_id)
        return "refunded"

    with guard.session("victim"):
        refusal = guard.enforce("find_orders", {"order_id": "W9999999"})
        assert not refusal.allowed
        guard.record("find_orders", {"order_id": "W9999999"}, refusal.message)
        guard.record("find_orders", {"order_id": "W9999999"}, Rejection(refusal))
        assert isinstance(refund("W9999999"), Rejection)
    assert refunded == []


def test_a_regex_producer_does_not_read_free_text_inside_json() -> None:
    """A foreign id written into a JSON field's prose is not harvested by a re: producer."""
    guard = shop_guard("reprompt")
    refunded: list[str] = []

    @guard.tool(effect="read", produces={"re:Created (W\\d{7})": "order"})
    def open_ticket(subject: str) -> str:
        # Meant to return "Created W1234567"; this time it answers with JSON whose
        # free text someone else wrote.
        return json.dumps({"status": "queued", "note": f"{subject}\nCreated W9999999"})

    @guard.tool
    def refund(order_id: _Order) -> str:
        refunded.append(order_id)
        return "refunded"

    with guard.session("victim"):
        open_ticket("please look at")
        assert isinstance(refund("W9999999"), Rejection)
    assert refunded == []


def test_an_omitted_id_argument_does_not_run_with_an_unchecked_default() -> None:
    """refund() with no argument would refund the default order, which no tool returned."""
    guard = shop_guard("reprompt")
    refunded: list[str] = []

    @guard.tool
    def refund(order_id: _Order = "W9999999", amount: int = 0) -> str:
        refunded.append(order_id)
        return "refunded"

    with guard.session("victim"):
        guard.record("search_orders", {}, ORDERS)
        assert isinstance(refund(), Rejection)
        assert isinstance(refund(amount=500), Rejection)
        assert not guard.enforce("refund", {"amount": 500}).allowed
    assert refunded == []


def test_a_write_tool_left_undeclared_is_refused_in_production_and_warned_about_otherwise() -> None:
    """A tool added to the agent but not to the guard: refused with the production setting."""
    moved: list[str] = []

    def move_order(order_id: str) -> str:
        moved.append(order_id)
        return "moved"

    registry = {"move_order": move_order}

    def run(guard: Guard, name: str, arguments: dict[str, str]) -> object:
        verdict = guard.enforce(name, arguments)  # what a runtime does before each call
        if not verdict.allowed:
            return verdict.message
        return registry[name](**arguments)

    production = shop_guard("reprompt", refuse_undeclared=True)
    with production.session("victim"):
        answer = run(production, "move_order", {"order_id": "W9999999"})
    assert isinstance(answer, str) and "not a tool this agent may call" in answer
    assert moved == []
    lenient = shop_guard("reprompt")
    with capture_logs() as logs, lenient.session("victim"):
        run(lenient, "move_order", {"order_id": "W9999999"})
    (warning,) = [e for e in logs if e["event"] == "guardrail.undeclared_tool"]
    assert (warning["tool"], warning["log_level"]) == ("move_order", "warning")


@pytest.mark.parametrize("url", ["http://[::1", "https://pay.example:99999/x", "http://a:-1"])
def test_a_value_the_url_normaliser_chokes_on_is_refused_not_a_crash(url: str) -> None:
    """URLs urlsplit cannot read give a Rejection, never a ValueError out of the guard."""
    guard = Guard(mode="reprompt")
    guard.add_kind("url", normalize="url")
    guard.declare("search", produces={"[*]": "url"}, effect="read")
    paid: list[str] = []

    @guard.tool
    def pay_invoice(invoice_url: Annotated[str, Id("url")]) -> str:
        paid.append(invoice_url)
        return "paid"

    with guard.session("victim"):
        guard.record("search", {}, ["https://pay.example/inv/1", url, "https://pay.example/inv/2"])
        assert len(guard.ledger) == 2  # the readable ones are kept
        refused = pay_invoice(url)
        assert isinstance(refused, Rejection)
        assert refused.verdict.findings[0].problem == "malformed"
        assert pay_invoice("https://pay.example/inv/2") == "paid"
    assert paid == ["https://pay.example/inv/2"]


@pytest.mark.parametrize(
    "spelling",
    [
        "https://evil.example\\@pay.example/inv/1",  # urlsplit's host, not a browser's
        "https://attacker:pw@PAY.EXAMPLE:443/inv/1/",
        "https://pay.example/inv/1#@evil.example",
    ],
)
def test_a_respelled_url_reaches_the_tool_as_the_ledger_has_it(spelling: str) -> None:
    """A URL that normalises to a ledger entry runs as the entry: never the attacker's text."""
    guard = Guard(mode="reprompt")
    guard.add_kind("url", normalize="url")
    guard.declare("list_invoices", produces={"[*]": "url"}, effect="read")
    fetched: list[str] = []

    @guard.tool
    def pay_invoice(invoice_url: Annotated[str, Id("url")]) -> str:
        fetched.append(invoice_url)
        return "paid"

    with guard.session("victim"):
        guard.record("list_invoices", {}, ["https://pay.example/inv/1"])
        assert guard.enforce("pay_invoice", {"invoice_url": spelling}).arguments == {
            "invoice_url": "https://pay.example/inv/1"
        }
        pay_invoice(spelling)
        pay_invoice(invoice_url=spelling)
    assert fetched == ["https://pay.example/inv/1"] * 2


def test_a_number_id_in_another_script_reaches_the_tool_as_the_ledger_has_it() -> None:
    """Fullwidth digits or 1e3 pass the number normaliser as 1000; the tool gets '1000'."""
    guard = Guard(mode="reprompt")
    guard.add_kind("account", normalize="number")
    guard.declare("my_accounts", produces={"[*]": "account"}, effect="read")
    debited: list[object] = []

    @guard.tool(ids={"accounts[*]": "account"})
    def debit(accounts: list[str]) -> str:
        debited.append(accounts)
        return "debited"

    with guard.session("victim"):
        guard.record("my_accounts", {}, ["1000"])
        given = ["１０００", "1e3", "1000.0"]
        debit(given)
    assert debited == [["1000", "1000", "1000"]]
    assert given == ["１０００", "1e3", "1000.0"]


# (end of the check section)


# -- sessions and stores (persistence) --------------------------------------------------------


# (end of the persistence section)
