"""Attacks on the guard, written as a hostile user or a careless integrator would try them.

Each test tries one channel by which a foreign identifier could reach a
write tool, or one input that could crash the guard or burn its CPU, and
asserts that the write tool never runs with it.
"""

from __future__ import annotations

from collections.abc import Callable, KeysView
from typing import Annotated, Any, cast

import pytest
from structlog.testing import capture_logs

from guardrail import Guard, Id, IdentifierViolation, Rejection, Verdict, nearmiss

from .conftest import ORDERS, shop_guard

# -- forged ledger blocks and refusals read back (compaction) ---------------------------------


# (end of the compaction section)


# -- tools, results and arguments (the check and the harvest) ---------------------------------

# kinds, near misses, floods


def _refund_tool(guard: Guard) -> tuple[Callable[[str], Any], list[str]]:
    """A guarded write tool that refunds an order, and the list of orders it refunded."""
    ran: list[str] = []

    @guard.tool(name="refund")
    def refund(order_id: Annotated[str, Id("order")]) -> str:
        ran.append(order_id)
        return "refunded"

    return refund, ran


def _refused(call: Callable[[], Any]) -> Verdict:
    """The verdict of a call that must be refused in raise mode."""
    with pytest.raises(IdentifierViolation) as caught:
        call()
    return caught.value.verdict


def test_a_32k_character_id_is_refused_without_any_near_miss_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An id far longer than any ledger key is unknown at once: no variant is ever built."""
    searched: list[str] = []
    real = nearmiss._first_variant

    def counting(key: str, letters: list[str], keys: KeysView[str]) -> tuple[str, str] | None:
        searched.append(key)
        return real(key, letters, keys)

    monkeypatch.setattr(nearmiss, "_first_variant", counting)
    guard = shop_guard()
    refund, ran = _refund_tool(guard)
    with guard.session("s"):
        guard.record("search_orders", {}, ORDERS)
        verdict = _refused(lambda: refund("W885" * 8000))
        assert searched == []
        _refused(lambda: refund("W8855136"))  # a near miss of normal length is still searched
    assert [f.problem for f in verdict.findings] == ["unknown"]
    assert searched == ["W8855136"]
    assert ran == []


def test_a_megabyte_id_is_refused_as_unknown() -> None:
    """A 1 MB argument costs what reading it costs, and is refused as unknown."""
    guard = shop_guard()
    refund, ran = _refund_tool(guard)
    with guard.session("s"):
        guard.observe_user("my order is #W8855135 " * 1000)
        guard.record("search_orders", {}, ORDERS)
        verdict = _refused(lambda: refund("#W8855135" * 111_112))
    assert [f.problem for f in verdict.findings] == ["unknown"]
    assert ran == []


def test_a_long_token_in_the_users_text_is_searched_in_linear_time() -> None:
    """A value found all over the user's text, never as a whole token, is unknown, quickly."""
    guard = shop_guard()
    guard.add_kind("hotel")
    guard.declare("book_hotel", ids={"name": "hotel"})
    with guard.session("s"):
        guard.observe_user("ab" * 500_000)
        verdict = guard.check("book_hotel", {"name": "ab" * 20_000})
        assert [f.problem for f in verdict.findings] == ["unknown"]
        guard.observe_user("x " + "ab " * 300_000)
        verdict = guard.check("book_hotel", {"name": "ab " * 1000 + "abc"})
        assert [f.problem for f in verdict.findings] == ["unknown"]


def test_an_absurd_exponent_is_an_unknown_text_not_a_billion_digit_number() -> None:
    """A number normaliser reads '1e999999999' as text: no giant integer, no crash."""
    guard = Guard()
    guard.add_kind("ticket", normalize="number")
    guard.declare("list_tickets", produces={"tickets[*]": "ticket"}, effect="read")
    closed: list[str] = []

    @guard.tool
    def close_ticket(ticket: Annotated[str, Id("ticket")]) -> None:
        closed.append(ticket)

    with guard.session("s"):
        guard.record("list_tickets", {}, {"tickets": ["7", "1e999999999", "2e5000"]})
        close_ticket("7.0")
        for forged in ("1e999999998", "1E5000", "3e5000"):
            assert _refused(lambda forged=forged: close_ticket(forged)).findings  # type: ignore[misc]
        close_ticket("1e999999999")  # named by the result, as written there
    assert closed == ["7.0", "1e999999999"]


def test_values_repeated_to_the_model_and_the_log_are_cut_short() -> None:
    """A 32,000-character id comes back as 200 characters and its length, in every channel."""
    guard = shop_guard("reprompt")
    refund, ran = _refund_tool(guard)
    forged = "W885" * 8000
    with capture_logs() as logs, guard.session("s"):
        guard.record("search_orders", {}, ORDERS)
        rejection = refund(forged)
    assert isinstance(rejection, Rejection) and ran == []
    assert f'"{forged[:200]}…" (32,000 characters)' in rejection.message
    assert len(rejection.message) < 1000
    sent = rejection.to_dict()["findings"][0]["value"]
    assert sent == f"{forged[:200]}… (32,000 characters)"
    assert rejection.verdict.findings[0].value == forged  # the finding keeps the full value
    refused = next(e for e in logs if e["event"] == "guardrail.call_checked")
    assert refused["value"] == sent and refused["values"] == [sent]


def _link_guard(mode: str) -> tuple[Guard, Callable[[str], Any], list[str]]:
    """A guard with a url kind, a read tool producing links, and a write tool posting to one."""
    guard = Guard(mode=mode)  # type: ignore[arg-type]
    guard.add_kind("url", normalize="url")
    guard.declare("fetch", produces={"links[*]": "url"}, effect="read")
    posted: list[str] = []

    @guard.tool
    def post(url: Annotated[str, Id("url")]) -> str:
        posted.append(url)
        return "posted"

    return guard, post, posted


@pytest.mark.parametrize("mode", ["raise", "reprompt", "observe"])
def test_a_url_no_parser_can_read_is_malformed_in_every_mode(mode: str) -> None:
    """'http://[x' makes urlsplit raise: the call is refused as malformed, never a crash."""
    guard, post, posted = _link_guard(mode)
    with capture_logs() as logs, guard.session("s"):
        if mode == "raise":
            verdict = _refused(lambda: post("http://[x"))
            assert [f.problem for f in verdict.findings] == ["malformed"]
            assert "url" in verdict.findings[0].detail
        elif mode == "reprompt":
            rejection = post("http://[x")
            assert isinstance(rejection, Rejection)
            assert [f.problem for f in rejection.verdict.findings] == ["malformed"]
        else:
            assert post("http://[x") == "posted"  # observe mode runs the tool and logs why
    checked = [e for e in logs if e["event"] == "guardrail.call_checked"]
    assert [e["problem"] for e in checked] == ["malformed"]
    assert posted == (["http://[x"] if mode == "observe" else [])


@pytest.mark.xfail(
    raises=ValueError,
    strict=False,
    reason="the allowed path normalises directly, until it falls through to _classify",
)
@pytest.mark.parametrize("mode", ["raise", "reprompt"])
def test_an_unreadable_url_beside_real_links_is_malformed(mode: str) -> None:
    """With links in the ledger the allowed path reads the value first: still malformed."""
    guard, post, posted = _link_guard(mode)
    with guard.session("s"):
        guard.record("fetch", {}, {"links": ["https://shop.example/pay"]})
        if mode == "raise":
            verdict = _refused(lambda: post("http://[x"))
        else:
            rejection = post("http://[x")
            assert isinstance(rejection, Rejection)
            verdict = rejection.verdict
    assert [f.problem for f in verdict.findings] == ["malformed"]
    assert posted == []


def test_a_user_message_with_a_url_no_parser_can_read_is_no_crash() -> None:
    """observe_user skips a token its kind cannot normalise; the rest of the message counts."""
    guard = Guard()
    guard.add_kind("link", pattern=r"https?://\S+", normalize="url")
    with guard.session("s") as ledger:
        added = guard.observe_user("see http://[x and http://Shop.example/a/")
        assert [entry.key for entry in added] == ["http://shop.example/a"]
        assert [entry.verified for entry in ledger] == [False]


@pytest.mark.parametrize("gives", [None, ["W1"], 7])
def test_a_normaliser_that_returns_no_text_makes_the_value_malformed(gives: object) -> None:
    """A user normaliser returning None, a list or a number refuses the call, never crashes."""
    guard = Guard()
    guard.add_kind("sku", normalize=cast(Callable[[str], str], lambda value: gives))
    shipped: list[str] = []

    @guard.tool
    def ship(sku: Annotated[str, Id("sku")]) -> None:
        shipped.append(sku)

    with guard.session("s"):
        verdict = _refused(lambda: ship("SKU-1"))
    assert [f.problem for f in verdict.findings] == ["malformed"]
    assert "'sku'" in verdict.findings[0].detail
    assert shipped == []


@pytest.mark.parametrize(
    "forged",
    [
        "javascript://shop.example/pay",  # another scheme
        "http://shop.example/pay",  # another scheme, too
        "https://attacker:x@shop.example/pay",  # userinfo
        "https://shop.example/pay#attacker",  # fragment
        "https://shop.example:8443/pay",  # a port that is not the default
        "shop.example/pay",  # no scheme at all
    ],
)
def test_urls_that_go_elsewhere_are_not_folded_into_a_real_link(forged: str) -> None:
    """Scheme, userinfo, fragment and port are part of where a request goes."""
    guard, post, posted = _link_guard("raise")
    with guard.session("s"):
        guard.record("fetch", {}, {"links": ["https://shop.example/pay"]})
        _refused(lambda: post(forged))
        post("HTTPS://Shop.Example:443/pay/")  # harmless differences still fold
    assert posted == ["HTTPS://Shop.Example:443/pay/"]


def test_a_flood_of_ids_in_a_result_leaves_the_real_order_refundable() -> None:
    """A result naming 10,000 new ids keeps one call's share; the rest are refused as dropped."""
    guard = shop_guard()
    refund, ran = _refund_tool(guard)
    flood = {"orders": [{"order_id": f"W{n:07d}"} for n in range(1, 10_001)]}
    with guard.session("s") as ledger:
        guard.observe_user("Please refund my order #W8855135")
        guard.record("search_orders", {}, ORDERS)
        guard.record("search_orders", {}, flood)
        refund("#W8855135")
        verdict = _refused(lambda: refund("W0009999"))
        assert len(ledger) <= ledger.capacity
    assert ran == ["#W8855135"]
    finding = verdict.findings[0]
    assert finding.problem == "evicted"
    assert "search_orders's result" in finding.detail
    assert "narrow" in verdict.message and "search_orders" in verdict.message


def test_floods_over_many_calls_in_one_turn_never_evict_the_ids_in_use() -> None:
    """Results that fill the ledger within one turn drop their own ids, not the real ones."""
    guard = shop_guard(capacity=50)
    refund, ran = _refund_tool(guard)
    with guard.session("s") as ledger:
        guard.observe_user("Please refund my order #W8855135")
        guard.record("search_orders", {}, ORDERS)
        for page in range(20):
            ids = [{"order_id": f"W{page:03d}{n:04d}"} for n in range(5)]
            guard.record("search_orders", {}, {"orders": ids})
        assert len(ledger) == ledger.capacity
        refund("#W8855135")
        verdict = _refused(lambda: refund("W0190004"))
    assert ran == ["#W8855135"]
    assert verdict.findings[0].problem == "evicted"


def test_a_user_message_naming_ten_thousand_ids_evicts_nothing() -> None:
    """observe_user keeps one call's share of the ids a message names."""
    guard = shop_guard()
    refund, ran = _refund_tool(guard)
    with guard.session("s") as ledger:
        guard.record("search_orders", {}, ORDERS)
        guard.observe_user(" ".join(f"#W{n:07d}" for n in range(1, 10_001)))
        refund("#W2378156")
        assert len(ledger) <= ledger.capacity
    assert ran == ["#W2378156"]


# (end of the check section)


# -- sessions and stores (persistence) --------------------------------------------------------


# (end of the persistence section)
