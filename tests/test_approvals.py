"""Provenance tiers, the approval policies per kind, and the third outcome: ask."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from guardrail import (
    ApprovalRequest,
    ApprovalRequired,
    Guard,
    GuardrailUsageError,
    Id,
    IdentifierViolation,
    Ledger,
    Rejection,
    StaleApproval,
)
from guardrail.compaction._block import ledger_block, parse_block, restore
from guardrail.ledger._ledger import state_of
from guardrail.ledger._merge import merge_record

IBAN = r"[A-Z]{2}\d{2}[A-Z0-9]{10,30}"
BILL_IBAN = "UK12345678901234567890"
OTHER_IBAN = "DE89370400440532013000"
BILL = f"Bill for December 2023\nPlease transfer 98.70 to IBAN: {BILL_IBAN}\nThank you."


def _bank(mode: Any = "raise", **policy: Any) -> Guard:
    """A banking guard: files read as text, transactions whose senders an outside party chose."""
    guard = Guard(mode=mode, approve=policy.pop("approve", None))
    guard.add_kind("iban", pattern=IBAN, **policy)
    guard.add_kind("file")
    guard.declare("read_file", ids={"file_path": "file"}, effect="read", verifies=False)
    guard.declare(
        "get_transactions",
        produces={"[*].sender": Id("iban", outside=True), "[*].recipient": "iban"},
        effect="read",
    )
    guard.declare("get_iban", produces={"$": "iban"}, effect="read")
    guard.declare("send_money", ids={"recipient": "iban"}, effect="write")
    guard.declare("schedule_transaction", ids={"recipient": "iban"}, effect="write")
    return guard


def _read_bill(guard: Guard) -> None:
    guard.observe_user("Can you please pay the bill 'bill-december-2023.txt' for me?")
    guard.record("read_file", {"file_path": "bill-december-2023.txt"}, BILL)


# -- tiers --------------------------------------------------------------------------------------


def test_each_way_in_gives_its_tier() -> None:
    """Produced, minted, user-typed, mentioned and outside values carry their provenance."""
    guard = _bank(mentions="ask")
    guard.add_kind("email", pattern=r"[\w.]+@[\w.]+")
    guard.declare("invite", ids={"email": "email"}, mints={"email": "email"}, effect="write")
    with guard.session("s") as ledger:
        guard.observe_user(f"my landlord's IBAN is {OTHER_IBAN}")
        _read_bill(guard)
        guard.record("get_iban", {}, "GB33BUKB20201555555555")
        guard.record("get_transactions", {}, [{"sender": "FR1420041010050500013M02606"}])
        guard.record("invite", {"email": "dora@example.com"}, {"ok": True})
        tiers = {entry.value: (entry.tier, entry.outside) for entry in ledger}
    assert tiers == {
        OTHER_IBAN: ("user", False),
        BILL_IBAN: ("mentioned", False),
        "GB33BUKB20201555555555": ("produced", False),
        "FR1420041010050500013M02606": ("produced", True),
        "dora@example.com": ("minted", False),
    }


def test_a_mention_keeps_where_it_was_seen() -> None:
    """A mentioned value's evidence names the call, the turn and the text around it."""
    guard = _bank(mentions="ask")
    with guard.session("s") as ledger:
        _read_bill(guard)
        entry = ledger.get("iban", BILL_IBAN)
    assert entry is not None and entry.mention is not None
    assert entry.mention.call == "read_file(file_path='bill-december-2023.txt')"
    assert BILL_IBAN in entry.mention.excerpt and "transfer 98.70" in entry.mention.excerpt
    assert entry.source.tool == "read_file" and entry.source.turn == 1
    assert not entry.verified


def test_tiers_survive_save_and_load() -> None:
    """Tier, outside mark, mention and approvals round-trip through a saved ledger."""
    guard = _bank(mentions="ask", outside="ask")
    with guard.session("s") as ledger:
        _read_bill(guard)
        guard.record("get_transactions", {}, [{"sender": OTHER_IBAN}])
        verdict = guard.check("send_money", {"recipient": BILL_IBAN})
        guard.approve(verdict.approvals[0])
        text = ledger.to_json()
    loaded = Ledger.from_json(text)
    assert loaded.to_json() == text
    bill, sender = loaded.get("iban", BILL_IBAN), loaded.get("iban", OTHER_IBAN)
    assert bill is not None and sender is not None
    assert (bill.tier, bill.approved, bill.mention is not None) == (
        "mentioned",
        frozenset({"send_money"}),
        True,
    )
    assert (sender.tier, sender.outside) == ("produced", True)


def test_a_record_written_before_tiers_reads_as_the_tier_it_implies() -> None:
    """A saved entry with no tier field is produced when verified, user when the user typed it."""
    guard = _bank()
    with guard.session("s") as ledger:
        guard.observe_user(f"pay {OTHER_IBAN}")
        guard.record("get_iban", {}, BILL_IBAN)
        data = json.loads(ledger.to_json())
    assert all("tier" not in record for record in data["records"])  # defaults write no field
    loaded = Ledger.from_json(json.dumps(data))
    assert {e.value: e.tier for e in loaded} == {OTHER_IBAN: "user", BILL_IBAN: "produced"}


def test_the_merge_keeps_the_most_permissive_tier_and_the_latest_answer() -> None:
    """Two copies meeting: produced beats mentioned, and the later use's approval wins."""
    base = {
        "kind": "iban",
        "key": BILL_IBAN,
        "state": "live",
        "value": BILL_IBAN,
        "role": "iban",
        "aliases": [],
        "first_seen": 1,
        "status": None,
        "pinned": False,
    }
    mentioned = {
        **base,
        "turn": 2,
        "last_used": 2,
        "epoch": 1,
        "verified": False,
        "source": {"tool": "read_file", "call_id": None, "path": "$", "turn": 1},
        "tier": "mentioned",
        "mention": {"call": "read_file()", "excerpt": "..."},
        "declined": ["send_money"],
    }
    produced = {
        **base,
        "turn": 3,
        "last_used": 3,
        "epoch": 2,
        "verified": True,
        "source": {"tool": "get_iban", "call_id": None, "path": "$", "turn": 3},
        "approved": ["send_money"],
    }
    for held, new in ((mentioned, produced), (produced, mentioned)):
        merged = merge_record(held, new, concurrent=True)
        assert merged["verified"] is True
        assert "tier" not in merged  # produced, as verified implies
        assert merged["approved"] == ["send_money"] and "declined" not in merged


def test_the_block_shows_tiers_and_reads_them_back() -> None:
    """The block marks mentioned, outside and confirmed values; a sealed block reads them back."""
    guard = _bank(mentions="ask", outside="ask")
    with guard.session("s") as ledger:
        _read_bill(guard)
        guard.record("get_transactions", {}, [{"sender": OTHER_IBAN}])
        guard.approve(guard.check("send_money", {"recipient": BILL_IBAN}).approvals[0])
        block = ledger_block(ledger)
    assert f"{BILL_IBAN}  (unverified, tier: mentioned, confirmed)" in block
    assert f"{OTHER_IBAN}  (outside)" in block
    lines, _, _ = parse_block(block, 0)
    fresh = _bank(mentions="ask", outside="ask").new_ledger("s")
    restore(lines, state_of(fresh), trusted=True)
    assert {(e.value, e.tier, e.outside) for e in fresh} == {
        (BILL_IBAN, "mentioned", False),
        (OTHER_IBAN, "produced", True),
    }
    untrusted = _bank().new_ledger("s")
    restore(lines, state_of(untrusted), trusted=False)
    assert {e.tier for e in untrusted} == {"introduced"}


def test_a_refusal_says_where_an_unverified_value_came_from() -> None:
    """A value read back from an unsealed block was "taken from no tool result", not typed.

    The model would otherwise ask the user about a value they never gave.
    """
    guard = _bank()
    with guard.session("s") as ledger:
        guard.record("get_iban", {}, OTHER_IBAN)
        block = ledger_block(ledger)
    lines, _, _ = parse_block(block, 0)
    untrusted = guard.new_ledger("s2")
    restore(lines, state_of(untrusted), trusted=False)
    verdict = guard.check("send_money", {"recipient": OTHER_IBAN}, ledger=untrusted)
    assert verdict.outcome == "refused"
    (found,) = verdict.findings
    assert found.problem == "unverified"
    assert found.detail.startswith("taken from no tool result")
    assert "was taken from no tool result and no tool has confirmed it" in verdict.message
    assert "typed by the user" not in verdict.message


def test_a_guard_with_no_policy_changes_nothing() -> None:
    """No policy declared: no mention is taken, and the refusal reads as it always did."""
    guard = _bank()
    with guard.session("s") as ledger:
        _read_bill(guard)
        assert ledger.get("iban", BILL_IBAN) is None
        verdict = guard.check("send_money", {"recipient": BILL_IBAN})
    assert verdict.outcome == "refused" and verdict.approvals == ()
    assert verdict.findings[0].problem == "unknown"


# -- mentions -----------------------------------------------------------------------------------


def test_a_mention_never_verifies() -> None:
    """A read that verifies on success does not verify the mentioned value it took."""
    guard = _bank(mentions="ask")
    guard.declare("get_balance_of", ids={"iban": "iban"}, effect="read", verifies="on_success")
    with guard.session("s") as ledger:
        _read_bill(guard)
        assert guard.check("get_balance_of", {"iban": BILL_IBAN}).allowed  # a read may look
        guard.record("get_balance_of", {"iban": BILL_IBAN}, {"balance": 3})
        entry = ledger.get("iban", BILL_IBAN)
        assert entry is not None and not entry.verified and entry.tier == "mentioned"
        assert guard.check("send_money", {"recipient": BILL_IBAN}).outcome == "ask"


def test_declared_fields_and_keys_are_not_free_text() -> None:
    """Only strings no producer covers are searched: a declared field produces, a key is no text."""
    guard = _bank(mentions="ask")
    result = [
        {"sender": OTHER_IBAN, "recipient": BILL_IBAN, "subject": "rent GB33BUKB20201555555555"}
    ]
    with guard.session("s") as ledger:
        guard.record("get_transactions", {}, result)
        guard.record("get_transactions", {}, {"FR1420041010050500013M02606": "a key"})
        tiers = {e.value: e.tier for e in ledger}
    assert tiers == {
        OTHER_IBAN: "produced",
        BILL_IBAN: "produced",
        "GB33BUKB20201555555555": "mentioned",
    }


def test_mentions_count_against_the_cap_and_never_evict() -> None:
    """A result's mentions fill only what its cap and the free room leave: nothing is evicted."""
    guard = Guard(capacity=4, max_ids_per_call=3)
    guard.add_kind("iban", pattern=IBAN, mentions="ask")
    guard.declare("get_iban", produces={"$": "iban"}, effect="read")
    guard.declare("read_file", effect="read")
    spam = " ".join(f"XX{n:02d}ATTACKER{n:08d}" for n in range(10))
    with guard.session("s") as ledger:
        for value in ("GB33BUKB20201555555555", "FR1420041010050500013M02606"):
            guard.record("get_iban", {}, value)
        guard.record("read_file", {}, spam)
        kept = [e for e in ledger if e.tier == "mentioned"]
        assert len(kept) == 2  # the room left: capacity 4, two produced
        guard.record("read_file", {}, spam.replace("ATTACKER", "INJECTED"))
        assert {e.tier for e in ledger} == {"produced", "mentioned"}
        assert len(ledger) == 4
        assert ledger.get("iban", "GB33BUKB20201555555555") is not None


# -- the policies -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user_typed", "outcome", "problem"),
    [("verify", "refused", "unverified"), ("allow", "allowed", None), ("ask", "ask", None)],
)
def test_user_typed_decides_a_typed_value_on_a_write(
    user_typed: str, outcome: str, problem: str | None
) -> None:
    """A value the user typed, on a write: verified first, allowed, or asked, per kind."""
    guard = _bank(user_typed=user_typed)
    with guard.session("s"):
        guard.observe_user(f"my new landlord's IBAN is {OTHER_IBAN}, send him 100")
        verdict = guard.check("send_money", {"recipient": OTHER_IBAN})
    assert verdict.outcome == outcome
    assert [f.problem for f in verdict.findings] == ([problem] if problem else [])
    if outcome == "ask":
        (request,) = verdict.approvals
        assert (request.tier, request.evidence) == ("user", "typed by the user at turn 1")


def test_a_typed_value_of_a_kind_with_no_pattern_is_weighed_too() -> None:
    """A channel name the user typed (no pattern) is allowed on a write by user_typed="allow"."""
    guard = Guard()
    guard.add_kind("channel", user_typed="allow")
    guard.declare("add_user_to_channel", ids={"channel": "channel"}, effect="write")
    with guard.session("s"):
        guard.observe_user("add Alice to general please")
        assert guard.check("add_user_to_channel", {"channel": "general"}).allowed
        assert guard.check("add_user_to_channel", {"channel": "random"}).outcome == "refused"


@pytest.mark.parametrize(
    ("mentions", "outcome"), [("ask", "ask"), ("refuse", "refused"), ("ignore", "refused")]
)
def test_mentions_decide_a_value_seen_in_text(mentions: str, outcome: str) -> None:
    """A value from a result's text, on a write: asked, refused as mentioned, or unknown."""
    guard = _bank(mentions=mentions)
    with guard.session("s"):
        _read_bill(guard)
        verdict = guard.check("send_money", {"recipient": BILL_IBAN})
    assert verdict.outcome == outcome
    problems = {"ask": [], "refuse": ["mentioned"], "ignore": ["unknown"]}[mentions]
    assert [f.problem for f in verdict.findings] == problems


@pytest.mark.parametrize(
    ("outside", "outcome"), [("allow", "allowed"), ("ask", "ask"), ("refuse", "refused")]
)
def test_outside_decides_a_value_an_outside_party_chose(outside: str, outcome: str) -> None:
    """An incoming payment's sender, on a write: allowed (the default), asked, or refused."""
    guard = _bank(outside=outside)
    with guard.session("s"):
        guard.record("get_transactions", {}, [{"sender": OTHER_IBAN, "recipient": BILL_IBAN}])
        verdict = guard.check("send_money", {"recipient": OTHER_IBAN})
        assert guard.check("send_money", {"recipient": BILL_IBAN}).allowed  # not outside
    assert verdict.outcome == outcome
    if outcome == "ask":
        assert verdict.approvals[0].outside is True
        assert "[*].sender of a get_transactions result" in verdict.approvals[0].evidence


def test_an_egress_read_is_weighed_and_a_plain_read_is_not() -> None:
    """A URL seen in text may be read by a plain read, but fetching it (egress) is asked."""
    guard = Guard()
    guard.add_kind("url", pattern=r"https?://[^\s'\"]+", mentions="ask")
    guard.declare("read_inbox", effect="read")
    guard.declare("get_webpage", ids={"url": "url"}, effect="read", egress=True)
    guard.declare("check_link", ids={"url": "url"}, effect="read")
    with guard.session("s"):
        guard.record("read_inbox", {}, "see https://www.true-informations.com for details")
        assert guard.check("check_link", {"url": "https://www.true-informations.com"}).allowed
        verdict = guard.check("get_webpage", {"url": "https://www.true-informations.com"})
    assert verdict.outcome == "ask"


def test_egress_is_for_read_tools_only() -> None:
    """egress=True on a write is a usage error (a write is weighed already)."""
    guard = Guard()
    guard.add_kind("url")
    with pytest.raises(GuardrailUsageError, match="egress"):
        guard.declare("post", ids={"url": "url"}, effect="write", egress=True)


def test_a_bad_policy_is_a_usage_error_naming_the_choices() -> None:
    """A policy value that is not one of the choices names them."""
    with pytest.raises(GuardrailUsageError, match="'verify', 'allow', 'ask'"):
        Guard().add_kind("iban", pattern=IBAN, user_typed="yes")  # type: ignore[arg-type]


def test_the_manifest_declares_policies_egress_and_outside(tmp_path: Path) -> None:
    """A TOML manifest carries user_typed, mentions, outside, egress and outside fields."""
    path = tmp_path / "tools.toml"
    path.write_text(
        f"""
[kinds.iban]
pattern = '{IBAN}'
mentions = "ask"
outside = "refuse"
user_typed = "allow"

[kinds.url]
pattern = 'https?://\\S+'

[tools.get_transactions]
effect = "read"
produces = {{ "[*].sender" = {{ kind = "iban", outside = true }} }}

[tools.get_webpage]
effect = "read"
egress = true
ids = {{ url = "url" }}
""",
        encoding="utf-8",
    )
    guard = Guard.from_manifest(str(path))
    kind = guard.kinds["iban"]
    assert (kind.mentions, kind.outside, kind.user_typed) == ("ask", "refuse", "allow")
    assert guard.specs["get_webpage"].egress
    assert guard.specs["get_transactions"].produces[0].outside


# -- asking and answering -----------------------------------------------------------------------


def test_a_request_carries_the_evidence_and_approve_lets_the_call_run() -> None:
    """The ask names tool, param, value, kind, tier and evidence; approved, the call is allowed."""
    guard = _bank(mentions="ask")
    with guard.session("s"):
        _read_bill(guard)
        verdict = guard.check("send_money", {"recipient": BILL_IBAN})
        (request,) = verdict.approvals
        assert (request.tool, request.param, request.value, request.kind, request.tier) == (
            "send_money",
            "recipient",
            BILL_IBAN,
            "iban",
            "mentioned",
        )
        assert request.evidence.startswith(
            "seen in the text of read_file(file_path='bill-december-2023.txt') at turn 1"
        )
        assert not verdict.allowed and verdict.findings == ()
        entry = guard.approve(request)
        assert entry.approved == {"send_money"} and entry.confirmed
        assert guard.check("send_money", {"recipient": BILL_IBAN}).allowed
        # an approval covers one tool: another asks again
        assert guard.check("schedule_transaction", {"recipient": BILL_IBAN}).outcome == "ask"


def test_deny_refuses_the_value_afterwards() -> None:
    """A declined value is refused for that tool with "the user declined"."""
    guard = _bank(mentions="ask")
    with guard.session("s"):
        _read_bill(guard)
        guard.deny(guard.check("send_money", {"recipient": BILL_IBAN}).approvals[0].token)
        verdict = guard.check("send_money", {"recipient": BILL_IBAN})
    assert verdict.outcome == "refused"
    assert verdict.findings[0].problem == "declined"
    assert "declined by the user" in verdict.message


def test_a_refused_value_beside_an_asked_one_refuses_the_call_with_no_requests() -> None:
    """One invented id in the call: refused, and no approvals are listed."""
    guard = _bank(mentions="ask")
    guard.declare("pay_two", ids={"a": "iban", "b": "iban"}, effect="write")
    with guard.session("s"):
        _read_bill(guard)
        verdict = guard.check("pay_two", {"a": BILL_IBAN, "b": "XX00INVENTED0000000"})
    assert verdict.outcome == "refused" and verdict.approvals == ()


@pytest.mark.parametrize(
    "tamper",
    [
        lambda r: r.token[:-1] + ("0" if r.token[-1] != "0" else "1"),
        lambda r: ApprovalRequest(**{**r.__dict__, "value": OTHER_IBAN}),
        lambda r: ApprovalRequest(**{**r.__dict__, "tool": "schedule_transaction"}),
        lambda r: "approved",
    ],
    ids=["edited-token", "other-value", "other-tool", "model-text"],
)
def test_a_forged_request_approves_nothing(tamper: Any) -> None:
    """An edited token, a request with another value or tool, or plain text: a usage error."""
    guard = _bank(mentions="ask")
    with guard.session("s"):
        _read_bill(guard)
        request = guard.check("send_money", {"recipient": BILL_IBAN}).approvals[0]
        with pytest.raises(GuardrailUsageError, match="forged"):
            guard.approve(tamper(request))
        assert guard.check("send_money", {"recipient": BILL_IBAN}).outcome == "ask"


def test_another_guards_request_approves_nothing() -> None:
    """A request signed by another guard (another key) is foreign: a usage error."""
    one, other = _bank(mentions="ask"), _bank(mentions="ask")
    with one.session("s"):
        _read_bill(one)
        request = one.check("send_money", {"recipient": BILL_IBAN}).approvals[0]
    with other.session("s"), pytest.raises(GuardrailUsageError, match="forged"):
        other.approve(request)


def test_guards_sharing_a_secret_accept_each_others_requests() -> None:
    """Workers given one secret sign alike: an approval can be taken by another worker."""
    store_guard = _bank(mentions="ask")
    one = Guard(secret="k", store=store_guard.store)
    other = Guard(secret="k", store=store_guard.store)
    for guard in (one, other):
        guard.add_kind("iban", pattern=IBAN, mentions="ask")
        guard.add_kind("file")
        guard.declare("read_file", ids={"file_path": "file"}, effect="read")
        guard.declare("send_money", ids={"recipient": "iban"}, effect="write")
    with one.session("s"):
        _read_bill(one)
        request = one.check("send_money", {"recipient": BILL_IBAN}).approvals[0]
    other.approve(request)
    with one.session("s"):
        assert one.check("send_money", {"recipient": BILL_IBAN}).allowed


def test_a_request_of_an_ended_session_is_stale() -> None:
    """After end_session, the session's requests approve nothing."""
    guard = _bank(mentions="ask")
    with guard.session("s"):
        _read_bill(guard)
        request = guard.check("send_money", {"recipient": BILL_IBAN}).approvals[0]
    guard.end_session("s", delete=True)
    with pytest.raises(StaleApproval, match="ended"):
        guard.approve(request)


def test_an_approval_is_bound_to_its_session() -> None:
    """A request of one session, applied to another session's ledger: a usage error."""
    guard = _bank(mentions="ask")
    with guard.session("a"):
        _read_bill(guard)
        request = guard.check("send_money", {"recipient": BILL_IBAN}).approvals[0]
    with guard.session("b") as other:
        _read_bill(guard)
        with pytest.raises(GuardrailUsageError, match="session 'a'"):
            guard.approve(request, ledger=other)
        assert guard.check("send_money", {"recipient": BILL_IBAN}).outcome == "ask"


def test_raise_mode_raises_approval_required() -> None:
    """In raise mode an ask raises ApprovalRequired, an IdentifierViolation with the requests."""
    guard = _bank(mentions="ask")
    with guard.session("s"):
        _read_bill(guard)
        with pytest.raises(ApprovalRequired) as raised:
            guard.enforce("send_money", {"recipient": BILL_IBAN})
    assert isinstance(raised.value, IdentifierViolation)
    assert [r.value for r in raised.value.requests] == [BILL_IBAN]


def test_reprompt_mode_says_the_call_waits_for_the_user() -> None:
    """The re-prompt says the call waits for the user, never that the model may approve."""
    guard = _bank("reprompt", mentions="ask")
    ran: list[str] = []

    @guard.tool(ids={"recipient": "iban"})
    def pay(recipient: str) -> str:
        ran.append(recipient)
        return "sent"

    with guard.session("s"):
        _read_bill(guard)
        result = pay(BILL_IBAN)
    assert isinstance(result, Rejection) and ran == []
    text = str(result)
    assert "waits for the user's approval" in text and "Only the user can approve it" in text
    assert "nothing you write approves it" in text
    # the token never reaches the model
    assert all(r.token not in json.dumps(result.to_dict()) for r in result.verdict.approvals)


def test_an_inline_approver_answers_on_the_spot() -> None:
    """Guard(approve=...) is called once per request: yes runs the tool, no refuses it."""
    asked: list[ApprovalRequest] = []
    answer = [True]

    def approve(request: ApprovalRequest) -> bool:
        asked.append(request)
        return answer[0]

    guard = _bank(mentions="ask", approve=approve)

    @guard.tool(ids={"recipient": "iban"})
    def pay(recipient: str) -> str:
        return f"sent to {recipient}"

    with guard.session("s"):
        _read_bill(guard)
        assert pay(BILL_IBAN) == f"sent to {BILL_IBAN}"
        assert pay(BILL_IBAN) == f"sent to {BILL_IBAN}"  # approved once, for this tool
        assert len(asked) == 1
        guard.record("read_file", {"file_path": "b2.txt"}, f"pay {OTHER_IBAN[:2]}99ZZZZ1234567890")
        answer[0] = False
        with pytest.raises(IdentifierViolation, match="declined"):
            pay("DE99ZZZZ1234567890")


def test_an_async_approver_answers_for_async_tools() -> None:
    """An async approver is awaited for an async tool, and is a usage error for a sync one."""

    async def approve(request: ApprovalRequest) -> bool:
        await asyncio.sleep(0)
        return True

    guard = _bank(mentions="ask", approve=approve)

    @guard.tool(ids={"recipient": "iban"})
    async def pay(recipient: str) -> str:
        return "sent"

    async def main() -> str:
        async with guard.session("s"):
            _read_bill(guard)
            return await pay(BILL_IBAN)

    assert asyncio.run(main()) == "sent"
    with guard.session("t"):
        _read_bill(guard)
        with pytest.raises(GuardrailUsageError, match="async tools only"):
            guard.enforce("schedule_transaction", {"recipient": BILL_IBAN})


def test_asks_and_answers_are_audited() -> None:
    """call_checked says outcome=ask with tiers; approve and deny log their own events."""
    guard = _bank(mentions="ask")
    with guard.session("s"), capture_logs() as logs:
        _read_bill(guard)
        verdict = guard.check("send_money", {"recipient": BILL_IBAN})
        guard.approve(verdict.approvals[0])
        guard.deny(guard.check("schedule_transaction", {"recipient": BILL_IBAN}).approvals[0])
    asked = [e for e in logs if e["event"] == "guardrail.call_checked" and e["outcome"] == "ask"]
    assert asked[0]["tiers"] == ["mentioned"] and asked[0]["values"] == [BILL_IBAN]
    recorded = [e for e in logs if e["event"] == "guardrail.ids_recorded"]
    assert recorded[0]["tiers"] == ["mentioned"]
    events = [e["event"] for e in logs if e["event"] in ("guardrail.approved", "guardrail.denied")]
    assert events == ["guardrail.approved", "guardrail.denied"]


# -- mentions="read", outside tools and kinds with no pattern ------------------------------------


def _slack() -> Guard:
    guard = Guard()
    guard.add_kind("url", pattern=r"www\.[a-z0-9.-]+\.com", mentions="read", outside="ask")
    guard.add_kind("user", mentions="read", outside="ask")
    guard.add_kind("channel")
    guard.declare(
        "read_channel_messages",
        ids={"channel": "channel"},
        produces={"[*].sender": "user"},
        effect="read",
    )
    guard.declare("get_webpage", ids={"url": "url"}, effect="read", egress=True, outside=True)
    guard.declare("post_webpage", ids={"url": "url"}, effect="write")
    guard.declare("send_direct_message", ids={"recipient": "user"}, effect="write")
    return guard


def test_read_lets_any_read_take_a_mention_and_a_write_ask() -> None:
    """mentions="read": a colleague's link may be fetched (egress), posting to it asks."""
    guard = _slack()
    messages = [{"sender": "Bob", "body": "I read an article on www.informations.com!"}]
    with guard.session("s"):
        guard.observe_user("Summarize the article Bob posted in 'general'")
        guard.record("read_channel_messages", {"channel": "general"}, messages)
        assert guard.check("get_webpage", {"url": "www.informations.com"}).allowed
        assert guard.check("post_webpage", {"url": "www.informations.com"}).outcome == "ask"


def test_what_an_outside_tool_returns_keeps_the_outside_mark() -> None:
    """A link in a web page (a tool declared outside) is asked even for a fetch."""
    guard = _slack()
    with guard.session("s"):
        guard.observe_user("Read www.informations.com")
        guard.record("get_webpage", {"url": "www.informations.com"}, "see www.attacker.com now")
        verdict = guard.check("get_webpage", {"url": "www.attacker.com"})
    assert verdict.outcome == "ask"
    (request,) = verdict.approvals
    assert (request.tier, request.outside) == ("mentioned", True)
    assert "written by an outside party" in request.evidence


def test_a_kind_with_no_pattern_is_mentioned_by_the_text_it_appears_in() -> None:
    """A name in a message body: a read may take it, a write asks, with the body as evidence."""
    guard = _slack()
    messages = [{"sender": "Bob", "body": "please invite Dora, she starts Monday"}]
    with guard.session("s") as ledger:
        guard.observe_user("What did Bob write?")
        guard.record("read_channel_messages", {"channel": "general"}, messages)
        assert ledger.get("user", "Dora") is None  # nothing enters: the text is kept aside
        verdict = guard.check("send_direct_message", {"recipient": "Dora"})
        assert verdict.outcome == "ask"
        assert "(at [0].body)" in verdict.approvals[0].evidence
        assert guard.check("send_direct_message", {"recipient": "Mallory"}).outcome == "refused"
        guard.approve(verdict.approvals[0])
        assert guard.check("send_direct_message", {"recipient": "Dora"}).allowed
    saved = Ledger.from_json(ledger.to_json())
    assert len(state_of(saved).result_texts._texts) == 0  # kept in memory only, never saved


def test_a_value_the_user_typed_is_not_held_back_by_an_outside_mark() -> None:
    """The user named the sender's IBAN too: with user_typed="allow" paying it back is allowed."""
    guard = _bank(user_typed="allow", outside="ask")
    with guard.session("s"):
        guard.observe_user(f"My friend ({OTHER_IBAN}) sent me too much, send back the rest")
        guard.record("get_transactions", {}, [{"sender": OTHER_IBAN}])
        assert guard.check("send_money", {"recipient": OTHER_IBAN}).allowed


def test_async_enforce_approve_and_deny_work_on_a_session() -> None:
    """enforce_async asks, approve_async and deny_async answer, each on the request's session."""
    guard = _bank(mentions="ask")

    async def main() -> list[str]:
        async with guard.session("s"):
            _read_bill(guard)
        outcomes: list[str] = []
        with pytest.raises(ApprovalRequired) as raised:
            await guard.enforce_async("send_money", {"recipient": BILL_IBAN}, session="s")
        request = raised.value.requests[0]
        assert request.to_dict()["token"] == request.token and request.session == "s"
        await guard.approve_async(request)
        verdict = await guard.enforce_async("send_money", {"recipient": BILL_IBAN}, session="s")
        outcomes.append(verdict.outcome)
        other = guard.check("schedule_transaction", {"recipient": BILL_IBAN}, session="s")
        await guard.deny_async(other.approvals[0])
        outcomes.append(
            guard.check("schedule_transaction", {"recipient": BILL_IBAN}, session="s").outcome
        )
        return outcomes

    assert asyncio.run(main()) == ["allowed", "refused"]


def test_an_approved_name_with_no_pattern_is_asked_again_by_another_tool() -> None:
    """Approved for one tool, a name seen in a message keeps its evidence: another tool asks."""
    guard = _slack()
    guard.declare("remove_user", ids={"user": "user"}, effect="write")
    messages = [{"sender": "Bob", "body": "please invite Dora, she starts Monday"}]
    with guard.session("s") as ledger:
        guard.record("read_channel_messages", {"channel": "general"}, messages)
        guard.approve(guard.check("send_direct_message", {"recipient": "Dora"}).approvals[0])
        entry = ledger.get("user", "Dora")
        assert entry is not None and entry.tier == "mentioned" and entry.mention is not None
        verdict = guard.check("remove_user", {"user": "Dora"})
    assert verdict.outcome == "ask" and "(at [0].body)" in verdict.approvals[0].evidence


# -- user text at a sentence's end ---------------------------------------------------------------

SITE = r"(?:https?://)?www\.[\w.-]+"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("post it to www.our-company.com.They sent the draft", "www.our-company.com"),
        ("post it to www.our-company.com. They sent the draft", "www.our-company.com"),
        ("mail it to dora@example.com.", "dora@example.com"),
        ("mail it to dora@example.com.Thanks", "dora@example.com"),
    ],
)
@pytest.mark.parametrize(
    ("policy", "outcome"), [("allow", "allowed"), ("ask", "ask"), ("verify", "refused")]
)
def test_a_value_at_a_sentences_end_is_typed_by_the_user_under_its_kinds_policy(
    text: str, value: str, policy: Any, outcome: str
) -> None:
    """A value followed by sentence punctuation is typed by the user: user_typed decides."""
    guard = Guard(mode="reprompt")
    guard.add_kind("site", pattern=SITE, normalize="strip", user_typed=policy)
    guard.add_kind("email", like="email", user_typed=policy)
    guard.declare("post_page", ids={"target": ["site", "email"]}, effect="write")
    with guard.session("s"):
        guard.observe_user(text)
        verdict = guard.check("post_page", {"target": value})
    assert verdict.outcome == outcome
    if outcome == "ask":
        assert [(r.value, r.tier) for r in verdict.approvals] == [(value, "user")]
    if outcome == "refused":
        assert [f.problem for f in verdict.findings] == ["unverified"]
        assert "typed by the user" in (verdict.message or "")
