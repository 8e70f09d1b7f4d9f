"""The check: findings most specific first, nearest roles, and the re-prompt text."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from guardrail import Guard, GuardrailUsageError, Ledger, Verdict
from guardrail._check.nearmiss import MARGIN
from guardrail.ledger import USER_TEXTS_KEPT
from guardrail.ledger._ledger import state_of

from .conftest import ORDERS, shop_guard


def problems(verdict: Verdict) -> list[tuple[str, str | None]]:
    return [(f.problem, f.nearest_role) for f in verdict.findings]


@pytest.fixture
def shop(guard: Guard, ledger: Ledger) -> Guard:
    """The shop guard with two orders harvested and one customer typed by the user."""
    guard.observe_user("I'm cus_41ZpA9, my blender from the second order arrived broken")
    guard.record("search_orders", {"customer_id": "cus_41ZpA9"}, ORDERS)
    return guard


def test_harvested_ids_are_allowed_in_any_written_form(shop: Guard) -> None:
    """An id from a tool result passes, with or without the '#' its normaliser strips."""
    for value in ("#W2378156", "W2378156", " W2378156 "):
        assert shop.check("issue_refund", {"order_id": value}).allowed


@pytest.mark.parametrize(
    ("value", "problem", "role"),
    [
        ("#W2378157", "mutated", "order_2"),  # one character changed
        ("#W2387156", "mutated", "order_2"),  # two neighbours swapped
        ("#W2378516", "mutated", "order_2"),
        ("#W237815", "truncated", "order_2"),  # a proper prefix
        ("#W23781566", "mutated", "order_2"),  # one character added
        ("W2378…", "truncated", "order_2"),  # ellipsis
        ("W23...", "truncated", "order_2"),
        ("W23..", "truncated", "order_2"),  # two dots: an argument cut short all the same
        ("#W0000000", "example", None),
        ("cus_41ZpA9", "wrong_kind", "customer"),
        ("#W9999999", "unknown", None),
        ("#W８８５５１３５", "mutated", "order"),  # full-width digits
        ("#W8855135\u200b", "mutated", "order"),  # zero-width space
    ],
)
def test_findings(shop: Guard, value: str, problem: str, role: str | None) -> None:
    """Each kind of bad id gets its finding and, where there is one, the nearest role."""
    verdict = shop.check("issue_refund", {"order_id": value})
    assert not verdict.allowed
    assert problems(verdict) == [(problem, role)]
    finding = verdict.findings[0]
    assert (finding.tool, finding.param, finding.value, finding.kind) == (
        "issue_refund",
        "order_id",
        value,
        "order",
    )


def test_homoglyphs_from_other_scripts_are_mutations(guard: Guard, ledger: Ledger) -> None:
    """Cyrillic look-alikes of every letter of an id are caught, not only one of them."""
    found = {"order_id": "W1234567", "items": [{"item_id": "it_xopa"}]}
    guard.record("get_order", {"order_id": "W1234567"}, found)
    verdict = guard.check("issue_refund", {"order_id": "W1234567", "item_ids": ["it_хора"]})
    assert problems(verdict) == [("mutated", "item")]
    assert "look-alike" in verdict.findings[0].detail


def test_user_typed_ids_may_be_looked_up_but_not_written_with(shop: Guard) -> None:
    """An unverified id passes a read tool, and a write tool only once a read returned it."""
    shop.observe_user("Actually it is order #W5555555")
    refund = shop.check("issue_refund", {"order_id": "W5555555"})
    assert problems(refund) == [("unverified", "order_3")]
    assert shop.check("get_order", {"order_id": "#W5555555"}).allowed
    shop.record("get_order", {"order_id": "#W5555555"}, {"items": []})  # a success naming no order
    assert problems(shop.check("issue_refund", {"order_id": "W5555555"})) == [
        ("unverified", "order_3")
    ]
    shop.record("get_order", {"order_id": "#W5555555"}, {"order_id": "#W5555555", "items": []})
    assert shop.check("issue_refund", {"order_id": "W5555555"}).allowed


def test_a_failed_lookup_verifies_nothing(shop: Guard) -> None:
    """A read call that errors leaves the typed id unverified."""
    shop.observe_user("order #W5555555 please")
    shop.record("get_order", {"order_id": "W5555555"}, "Error: no such order", error=True)
    assert problems(shop.check("issue_refund", {"order_id": "W5555555"})) == [
        ("unverified", "order_3")
    ]


def test_reads_that_do_not_verify(guard: Guard, ledger: Ledger) -> None:
    """A read declared verifies=False (a search) does not confirm the ids it took."""
    guard.declare("find_customer", ids={"customer_id": "customer"}, effect="read", verifies=False)
    guard.declare("close_account", ids={"customer_id": "customer"})
    guard.observe_user("I am cus_aaaaaa")
    guard.record("find_customer", {"customer_id": "cus_aaaaaa"}, [])
    assert problems(guard.check("close_account", {"customer_id": "cus_aaaaaa"})) == [
        ("unverified", "customer")
    ]


def test_ids_with_no_pattern_count_as_typed_when_the_user_wrote_them(
    guard: Guard, ledger: Ledger
) -> None:
    """A kind with no pattern is recognised as user-typed from the kept user texts."""
    guard.add_kind("hotel")
    guard.declare("find_hotel", ids={"name": "hotel"}, produces={"hotel": "hotel"}, effect="read")
    guard.declare("book_hotel", ids={"name": "hotel"})
    guard.observe_user("Book me the Grand Hyatt please")
    assert guard.check("find_hotel", {"name": "Grand Hyatt"}).allowed
    assert problems(guard.check("book_hotel", {"name": "Grand Hyatt"})) == [("unverified", None)]
    assert problems(guard.check("find_hotel", {"name": "Grand Hotel"})) == [("unknown", None)]
    guard.record("find_hotel", {"name": "Grand Hyatt"}, {})  # found nothing: confirms nothing
    assert not guard.check("book_hotel", {"name": "Grand Hyatt"}).allowed
    guard.record("find_hotel", {"name": "Grand Hyatt"}, {"hotel": "Grand Hyatt"})
    assert guard.check("book_hotel", {"name": "Grand Hyatt"}).allowed


def test_a_kind_with_no_pattern_matches_the_user_text_after_its_normaliser(
    guard: Guard, ledger: Ledger
) -> None:
    """Ana@Example.com typed by the user counts for ana@example.com under normalize="email"."""
    guard.add_kind("email", normalize="email")
    guard.declare("find_user", ids={"email": "email"}, produces={"email": "email"}, effect="read")
    guard.declare("send_invite", ids={"email": "email"})
    guard.observe_user('Please invite "Ana@Example.com." to the team')
    assert guard.check("find_user", {"email": "ana@example.com"}).allowed
    assert problems(guard.check("send_invite", {"email": "ana@example.com"})) == [
        ("unverified", None)
    ]
    assert problems(guard.check("find_user", {"email": "bob@example.com"})) == [("unknown", None)]
    guard.record("find_user", {"email": "ana@example.com"}, {"email": "ana@example.com"})
    assert guard.check("send_invite", {"email": "ANA@example.com"}).allowed


def test_a_name_of_several_words_matches_after_the_normaliser(guard: Guard, ledger: Ledger) -> None:
    """A run of the user's words counts, trimmed of punctuation: "the grand hyatt," for a name."""
    guard.add_kind("hotel", normalize=["strip", "casefold"])
    guard.declare("find_hotel", ids={"name": "hotel"}, effect="read")
    guard.observe_user("Book me the grand  HYATT, please")
    assert guard.check("find_hotel", {"name": "Grand Hyatt"}).allowed
    assert not guard.check("find_hotel", {"name": "Grand Hyatt Regency"}).allowed
    guard.observe_user("Or (the Park Plaza) maybe")  # a new text: the keys are read again
    assert guard.check("find_hotel", {"name": "park plaza"}).allowed
    assert guard.check("find_hotel", {"name": "Grand Hyatt"}).allowed


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("#W2378157", "mutated"),
        ("#W23781", "truncated"),
        ("#W0000000", "example"),
        ("cus_41ZpA9", "wrong_kind"),
        ("#W9999999", "unknown"),
    ],
)
def test_a_refusal_never_names_a_lookup_no_tool_offers(value: str, problem: str) -> None:
    """With no read tool for the kind, the re-prompt says to ask the user, not to look it up."""
    guard = Guard(mode="reprompt")
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    guard.add_kind("customer", pattern=r"cus_\w{6}")
    guard.declare("list_orders", produces={"orders[*].order_id": "order"}, effect="write")
    guard.declare("issue_refund", ids={"order_id": "order"}, description="order_id, e.g. #W0000000")
    with guard.session("s"):
        guard.observe_user("I'm cus_41ZpA9")
        guard.record("list_orders", {}, {"orders": [{"order_id": "#W2378156"}]})
        verdict = guard.check("issue_refund", {"order_id": value})
    assert [f.problem for f in verdict.findings] == [problem]
    assert "look it up" not in verdict.message
    assert "lookup" not in verdict.message
    assert "ask the user" in verdict.message


def test_an_unconfirmable_user_typed_id_is_refused_with_advice_to_tell_the_user(
    guard: Guard, ledger: Ledger
) -> None:
    """A typed id no declared read tool can confirm: the detail and re-prompt say so, no lookup."""
    guard.add_kind("email", normalize="email")
    guard.declare("send_invite", ids={"email": "email"})
    guard.observe_user("invite ana@example.com")
    verdict = guard.check("send_invite", {"email": "Ana@Example.com"})
    assert problems(verdict) == [("unverified", None)]
    assert "no declared read tool looks up kind 'email'" in verdict.findings[0].detail
    assert "lookup" not in verdict.message
    assert "tell the user" in verdict.message


def test_evicted_ids_are_reported_as_evicted() -> None:
    """An id dropped for capacity is 'evicted, look it up again', not invented."""
    guard = shop_guard(capacity=1, max_ids_per_call=2)
    with guard.session("s"):
        guard.record("search_orders", {}, ORDERS)
        verdict = guard.check("issue_refund", {"order_id": "#W8855135"})
    assert problems(verdict) == [("evicted", "order")]
    assert "dropped to make room" in verdict.message


def test_several_kinds_and_list_parameters(guard: Guard, ledger: Ledger) -> None:
    """A parameter may accept several kinds; list parameters check every element."""
    guard.declare("contact", ids={"who": ["customer", "email"]}, effect="read")
    found = {"order_id": "W1234567", "items": [{"item_id": "it_aaaa"}]}
    guard.record("get_order", {"order_id": "W1234567"}, found)
    guard.observe_user("mail me at Jane@Example.com")
    assert guard.check("contact", {"who": "Jane@Example.com"}).allowed
    verdict = guard.check("issue_refund", {"order_id": "W1234567", "item_ids": ["it_aaaa", "it_b"]})
    assert problems(verdict) == [("unknown", None)]
    assert verdict.findings[0].param == "item_ids[*]"
    as_text = json.dumps(["it_aaaa"])
    assert guard.check("issue_refund", {"order_id": "W1234567", "item_ids": as_text}).allowed


def test_packed_ids_are_split_by_the_declared_separator(guard: Guard, ledger: Ledger) -> None:
    """ids packed into one string ("a, b") are each checked."""
    guard.declare("bulk", ids={"items": {"kind": "item", "sep": ","}})
    guard.record("get_order", {"order_id": "W1234567"}, {"items": [{"item_id": "it_aaaa"}]})
    assert guard.check("bulk", {"items": "it_aaaa"}).allowed
    assert problems(guard.check("bulk", {"items": "it_aaaa, it_zzzz"})) == [("unknown", None)]


@pytest.mark.parametrize(
    ("value", "detail"),
    [(["#W8855135"], "got list"), ({"id": "x"}, "got dict"), (True, "got bool")],
)
def test_wrong_types_are_malformed_never_accepted(shop: Guard, value: object, detail: str) -> None:
    """A list, object or boolean where one id is expected is refused with a clear reason."""
    verdict = shop.check("issue_refund", {"order_id": value})
    assert problems(verdict) == [("malformed", None)]
    assert detail in verdict.findings[0].detail


def test_numbers_and_missing_values(guard: Guard, ledger: Ledger) -> None:
    """Numbers are checked as text; a missing or null optional id is simply absent."""
    guard.add_kind("ticket", normalize="number")
    guard.declare("get_ticket", produces={"id": "ticket"}, effect="read")
    guard.declare("close_ticket", ids={"ticket": "ticket"})
    guard.record("get_ticket", {}, {"id": 7})
    assert guard.check("close_ticket", {"ticket": 7.0}).allowed
    assert guard.check("close_ticket", {"ticket": "7"}).allowed
    assert not guard.check("close_ticket", {"ticket": 8}).allowed
    assert guard.check("close_ticket", {}).allowed
    assert guard.check("close_ticket", {"ticket": None}).allowed


def test_arguments_as_json_text_and_garbage(shop: Guard) -> None:
    """Arguments may arrive as JSON text; anything else is a malformed call."""
    assert shop.check("issue_refund", '{"order_id": "W2378156"}').allowed
    assert problems(shop.check("issue_refund", "not json")) == [("malformed", None)]
    assert problems(shop.check("issue_refund", "[1, 2]")) == [("malformed", None)]


def test_undeclared_tools_are_allowed_unless_refused() -> None:
    """A tool the guard does not know declares no ids; a strict guard refuses it."""
    with shop_guard().session("s") as ledger:
        assert shop_guard().check("shell", {"cmd": "ls"}, ledger=ledger).allowed
    strict = shop_guard(refuse_undeclared=True)
    with strict.session("s"):
        verdict = strict.check("shell", {"cmd": "ls"})
    assert problems(verdict) == [("undeclared", None)]


def test_advisory_kinds_log_but_never_refuse(guard: Guard, ledger: Ledger) -> None:
    """Findings of a kind with enforce=False are reported on an allowed verdict."""
    guard.add_kind("airport", pattern="[A-Z]{3}", enforce=False)
    guard.declare("search_flights", ids={"origin": "airport"}, effect="read")
    verdict = guard.check("search_flights", {"origin": "JFK"})
    assert verdict.allowed
    assert [(f.problem, f.enforced) for f in verdict.findings] == [("unknown", False)]


def test_check_changes_nothing_but_last_use(shop: Guard, ledger: Ledger) -> None:
    """check runs nothing and records nothing; a refused check does not even touch."""
    before = ledger.to_json()
    shop.check("issue_refund", {"order_id": "W9999999"})
    assert ledger.to_json() == before
    state_of(ledger).next_turn()
    shop.check("issue_refund", {"order_id": "W8855135"})
    assert ledger["order"].last_used == ledger.turn
    assert len(ledger) == 3


def test_reprompt_text_guides_without_asserting_a_guess(shop: Guard) -> None:
    """The message says what to do next and names roles, never the ledger's value as fact."""
    message = shop.check("issue_refund", {"order_id": "#W2378157"}).message
    assert message.startswith("guardrail refused the call to issue_refund; the tool did not run.")
    assert "[order_2]" in message
    assert "copy its value exactly from the ID LEDGER" in message
    assert "search_orders" in message or "get_order" in message
    assert "W2378156" not in message  # the real value is never put forward as the answer
    unknown = shop.check("issue_refund", {"order_id": "#W9999999"}).message
    assert "Do not invent" in unknown
    assert "ask the user" in unknown


order_values = st.lists(
    st.from_regex(r"W[0-9A-Z]{3,10}", fullmatch=True), min_size=1, max_size=8, unique=True
)
ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZW_-"


def _record(guard: Guard, ledger: Ledger, values: list[str]) -> None:
    result = {"orders": [{"order_id": value} for value in values]}
    guard.record("search_orders", {}, result, ledger=ledger)


@settings(max_examples=80, deadline=None)
@given(order_values)
def test_harvested_ids_are_allowed_while_in_the_ledger(values: list[str]) -> None:
    """Property: an id harvested from a result is allowed afterwards."""
    guard = shop_guard()
    ledger = guard.new_ledger("p")
    _record(guard, ledger, values)
    for value in values:
        assert guard.check("issue_refund", {"order_id": value}, ledger=ledger).allowed


@st.composite
def one_edit(draw: st.DrawFn) -> tuple[list[str], str]:
    values = draw(order_values)
    value = draw(st.sampled_from(values))
    edit = draw(st.sampled_from(["substitute", "transpose", "delete", "insert"]))
    at = draw(st.integers(min_value=0, max_value=len(value) - 1))
    char = draw(st.sampled_from(ALPHABET))
    if edit == "substitute":
        edited = value[:at] + char + value[at + 1 :]
    elif edit == "transpose" and at < len(value) - 1:
        edited = value[:at] + value[at + 1] + value[at] + value[at + 2 :]
    elif edit == "delete":
        edited = value[:at] + value[at + 1 :]
    else:
        edited = value[:at] + char + value[at:]
    return values, edited


@settings(max_examples=300, deadline=None)
@given(one_edit())
def test_single_edits_of_ledger_values_are_always_refused(case: tuple[list[str], str]) -> None:
    """Property: one substitution, swap, deletion or insertion of a ledger value never passes."""
    values, edited = case
    guard = shop_guard()
    assume(edited.strip() and guard.kinds["order"].normalize(edited) not in values)
    ledger = guard.new_ledger("p")
    _record(guard, ledger, values)
    verdict = guard.check("issue_refund", {"order_id": edited}, ledger=ledger)
    assert not verdict.allowed
    assert verdict.findings[0].problem in {"mutated", "truncated", "unknown", "example"}


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        ("W23781569", "one character added (position 9)"),
        ("W237156", "one character missing (position 5)"),
        ("W2378157", "one character changed (position 8)"),
        ("W2387156", "two neighbouring characters swapped"),
        ("W6378152", "two characters swapped"),
    ],
)
def test_mutation_details_say_what_changed(shop: Guard, value: str, detail: str) -> None:
    """The detail of a mutation describes the value sent, relative to the ledger entry."""
    finding = shop.check("issue_refund", {"order_id": value}).findings[0]
    assert (finding.problem, finding.detail) == ("mutated", detail)


def _link_guard() -> Guard:
    """A guard with a url kind (whose normaliser raises on what is no URL) and one write tool."""
    guard = shop_guard()
    guard.add_kind("link", normalize="url")
    guard.declare("post", ids={"url": "link", "target": ["link", "order"]})
    return guard


def test_a_value_no_normaliser_can_read_is_malformed() -> None:
    """A normaliser that raises makes the value malformed, naming the kind; it never crashes."""
    guard = _link_guard()
    with guard.session("s"):
        verdict = guard.check("post", {"url": "http://[x"})
        assert problems(verdict) == [("malformed", None)]
        assert verdict.findings[0].detail == (
            "the normaliser of kind 'link' could not read the value"
        )
        assert "could not read the value" in verdict.message
        # Another accepted kind that reads it decides: here, an order no result named.
        assert problems(guard.check("post", {"target": "http://[x"})) == [("unknown", None)]


def test_values_that_are_no_text_are_described_briefly_and_safely() -> None:
    """A deep, huge or unprintable argument is malformed, described in a few characters."""

    class Unprintable:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    deep: list[object] = []
    for _ in range(10_000):
        deep = [deep]
    guard = shop_guard()
    with guard.session("s"):
        for value in (deep, list(range(100_000)), Unprintable()):
            verdict = guard.check("issue_refund", {"order_id": value})
            assert problems(verdict) == [("malformed", None)]
            assert len(verdict.findings[0].value) <= 80


def test_a_value_longer_than_any_key_by_more_than_the_margin_is_not_searched(
    shop: Guard,
) -> None:
    """Within the margin a padded id is still a near miss; past it, unknown without a search."""
    longest = len("W8855135")
    padded = "W8855135" + "\u200b" * MARGIN
    assert len(padded) == longest + MARGIN
    assert problems(shop.check("issue_refund", {"order_id": padded})) == [("mutated", "order")]
    further = padded + "\u200b"
    assert problems(shop.check("issue_refund", {"order_id": further})) == [("unknown", None)]


def test_edits_over_a_huge_alphabet_are_searched_only_within_the_budget(
    guard: Guard, ledger: Ledger
) -> None:
    """Keys using hundreds of characters make substitutions too dear: those are unknown."""
    guard.add_kind("glyphs")
    guard.declare("list_glyphs", produces={"[*]": "glyphs"}, effect="read")
    guard.declare("draw", ids={"glyphs": "glyphs"})
    key = "".join(chr(0x4E00 + n) for n in range(300))
    guard.record("list_glyphs", {}, [key])
    assert len(state_of(ledger).alphabet("glyphs")) == 300
    changed = "x" + key[1:]
    assert problems(guard.check("draw", {"glyphs": changed})) == [("unknown", None)]
    added = key + "x"  # one deletion finds it: n variants, whatever the alphabet
    assert problems(guard.check("draw", {"glyphs": added})) == [("mutated", "glyphs")]


def test_ids_a_result_named_beyond_the_limit_are_refused_as_not_kept() -> None:
    """A dropped id is 'evicted' with a detail naming the result, and the re-prompt says narrow."""
    guard = shop_guard(max_ids_per_call=1)
    with guard.session("s"):
        guard.observe_user("hello")
        guard.record("search_orders", {}, ORDERS)
        verdict = guard.check("issue_refund", {"order_id": "#W2378156"})
    assert problems(verdict) == [("evicted", None)]
    assert verdict.findings[0].detail == (
        "not kept: search_orders's result at turn 1 named more new ids than one call may add"
    )
    assert "Narrow the search: call search_orders again with a narrower query" in verdict.message
    assert "use the order from that narrower result" in verdict.message


def test_ids_a_user_message_named_beyond_the_limit_are_refused_as_not_kept() -> None:
    """An id typed among too many is not kept; once the text is gone, ask the user."""
    guard = shop_guard(max_ids_per_call=1)
    with capture_logs() as logs, guard.session("s"):
        guard.observe_user("orders #W1111111 and #W2222222")
        # While the text is kept, the id counts as typed: a read may look it up.
        assert guard.check("get_order", {"order_id": "W2222222"}).allowed
        for _ in range(USER_TEXTS_KEPT):
            guard.observe_user("ok")
        verdict = guard.check("get_order", {"order_id": "W2222222"})
    assert problems(verdict) == [("evicted", None)]
    assert "the user's message at turn 1" in verdict.findings[0].detail
    assert "Ask the user which order they mean" in verdict.message
    dropped = [e for e in logs if e["event"] == "guardrail.ids_dropped"]
    assert [(e["tool"], e["dropped"], e["limit"]) for e in dropped] == [("user", 1, 1)]


def test_the_limit_per_call_defaults_to_a_tenth_of_the_capacity() -> None:
    """max_ids_per_call: None is a tenth of the capacity, at least one; others must be counts."""
    assert Guard().max_ids_per_call == 100
    assert Guard(capacity=5).max_ids_per_call == 1
    assert Guard(max_ids_per_call=7).max_ids_per_call == 7
    for bad in (0, -1, 2.5, True, "10"):
        with pytest.raises(GuardrailUsageError, match="max_ids_per_call must be a positive"):
            Guard(max_ids_per_call=bad)  # type: ignore[arg-type]


# -- what the tool receives: the model's own arguments, always ---------------------------------


@pytest.mark.parametrize("fast", [True, False])
def test_every_spelling_of_an_id_passes_as_the_model_wrote_it(fast: bool) -> None:
    """User typed W5061109, a result wrote #W5061109: any spelling passes untouched, both paths."""
    guard = shop_guard()
    if not fast:  # a list parameter sends the call through the full check
        guard.declare("refund_all", ids={"order_ids[*]": "order"})
    with guard.session("s") as ledger:
        guard.observe_user("my order is W5061109")
        guard.record("get_order", {"order_id": "W5061109"}, {"order_id": "#W5061109"})
        assert ledger["order"].value == "#W5061109" and ledger["order"].verified
        if fast:
            for value in ("#W5061109", "W5061109", " W5061109"):
                given = {"order_id": value}
                verdict = guard.check("issue_refund", given)
                assert verdict.allowed and verdict.arguments is given
                assert given == {"order_id": value}
        else:
            listed = {"order_ids": ["#W5061109", "W5061109", "W5061109 "]}
            verdict = guard.check("refund_all", listed)
            assert verdict.allowed and verdict.arguments is listed
            assert listed == {"order_ids": ["#W5061109", "W5061109", "W5061109 "]}
            text = json.dumps(listed)  # JSON text: the mapping it reads as, nothing changed
            assert guard.check("refund_all", text).arguments == listed


@pytest.mark.parametrize("fast", [True, False])
def test_an_id_no_tool_wrote_passes_as_the_model_wrote_it(fast: bool) -> None:
    """A user-typed id (unverified, or confirmed by a lookup) passes as the model wrote it."""
    guard = shop_guard()
    guard.declare(
        "get_order_quietly", ids={"order_id": "order"}, effect="read", verifies="on_success"
    )
    guard.declare("look_all", ids={"order_ids[*]": "order"}, effect="read")
    guard.declare("refund_all", ids={"order_ids[*]": "order"})

    def check(read: bool) -> Verdict:
        if fast:
            return guard.check("get_order" if read else "issue_refund", {"order_id": "#W5061109"})
        return guard.check("look_all" if read else "refund_all", {"order_ids": ["#W5061109"]})

    as_written = {"order_id": "#W5061109"} if fast else {"order_ids": ["#W5061109"]}
    with guard.session("s") as ledger:
        guard.observe_user("my order is W5061109")
        assert ledger["order"].value == "W5061109"
        read = check(read=True)
        assert read.allowed and read.arguments == as_written
        # Confirmed by a lookup that returns no id: verified, still the user's spelling.
        guard.record("get_order_quietly", {"order_id": "#W5061109"}, {"total": 40})
        assert ledger["order"].verified and ledger["order"].value == "W5061109"
        write = check(read=False)
        assert write.allowed and write.arguments == as_written


def test_the_first_spelling_a_tool_wrote_stays_the_value_and_any_other_passes_as_written() -> None:
    """Two tools write one order two ways: the first is the value; each way passes as it is."""
    guard = shop_guard()
    with guard.session("s") as ledger:
        guard.record("get_order", {"order_id": "#W5061109"}, {"order_id": "#W5061109"})
        guard.record(
            "search_orders", {"customer_id": "cus_41ZpA9"}, {"orders": [{"order_id": "W5061109"}]}
        )
        assert ledger["order"].value == "#W5061109"
        for value in ("#W5061109", "W5061109", "W5061109 "):
            assert guard.check("issue_refund", {"order_id": value}).arguments == {"order_id": value}


def test_a_refusal_points_at_the_spelling_the_tool_wrote() -> None:
    """A near miss of an id the user typed as W5061109 is sent to the ledger's #W5061109."""
    guard = shop_guard("reprompt")
    with guard.session("s") as ledger:
        guard.observe_user("my order is W5061109")
        guard.record("get_order", {"order_id": "W5061109"}, {"order_id": "#W5061109"})
        verdict = guard.check("issue_refund", {"order_id": "#W5061190"})
        assert [(f.problem, f.nearest_role) for f in verdict.findings] == [("mutated", "order")]
        assert "copy its value exactly from the ID LEDGER" in (verdict.message or "")
        assert ledger[verdict.findings[0].nearest_role or ""].value == "#W5061109"
