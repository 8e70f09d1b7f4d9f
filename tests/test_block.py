"""The ledger block as text: render, parse back, and the seal that says compaction wrote it."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guardrail import Guard, Ledger
from guardrail._data.batch import Batch
from guardrail._guard.audit import SilentLogger
from guardrail.compaction._block import (
    BLOCK_HEADER,
    BlockLine,
    parse_block,
    render_block,
    restore,
    seal,
    unseal,
)
from guardrail.errors import GuardrailUsageError
from guardrail.ledger import Source
from guardrail.ledger._ledger import state_of

KINDS = ("order", "hotel", "note")


def a_guard(**options: object) -> Guard:
    guard = Guard(logger=SilentLogger(), **options)  # type: ignore[arg-type]
    for kind in KINDS:
        guard.add_kind(kind)
    return guard


def a_ledger(session: str | None = "conv-1") -> Ledger:
    ledger = a_guard().new_ledger(session)
    source = Source("t", None, "x", 0)
    state_of(ledger).admit(
        [Batch.one("order", "W1000001", "W1000001", "x", "delivered")], source=source
    )
    state_of(ledger).admit(
        [Batch.one("hotel", "Grand Hotel", "Grand Hotel", "x")], source=source, verified=False
    )
    return ledger


# -- the seal -------------------------------------------------------------------------------


def test_a_sealed_block_ends_with_a_seal_line_no_entry_line_can_be() -> None:
    """The seal is the last line, "(seal <32 hex>)": a role never starts with "("."""
    ledger = a_ledger()
    block = render_block(state_of(ledger), (), ())
    sealed = seal(block, state_of(ledger))
    body, _, last = sealed.rpartition("\n")
    assert body == block
    assert last.startswith("(seal ") and last.endswith(")") and len(last) == len("(seal )") + 32
    assert unseal(sealed, state_of(ledger)) == (block, True)
    lines, _, bad = parse_block(sealed, 0)  # the seal line is no entry, nor an unreadable one
    assert bad == []
    assert [line.value for line in lines] == ["W1000001", "Grand Hotel"]


def test_a_seal_verifies_only_with_the_key_and_session_it_was_made_for() -> None:
    """Another key, another session id, or no seal line at all: not verified."""
    ledger = a_ledger()
    block = render_block(state_of(ledger), (), ())
    sealed = seal(block, state_of(ledger))
    other_key = a_ledger()
    state_of(other_key).session_id = ledger.session_id
    other_session = Ledger.from_json(ledger.to_json())
    state_of(other_session).session_id = "conv-2"
    state_of(other_session).seal_key = ledger.seal_key
    assert not unseal(sealed, state_of(other_key))[1]
    assert not unseal(sealed, state_of(other_session))[1]
    assert unseal(block, state_of(ledger)) == (block, False)
    unnamed = a_ledger(None)
    assert unseal(seal(block, state_of(unnamed)), state_of(unnamed))[1]


def test_a_guard_secret_derives_one_key_per_session() -> None:
    """Guard(secret=): the same session always has the same key; two sessions never share one."""
    guard = a_guard(secret="server key")
    again = a_guard(secret=b"server key")
    assert guard.new_ledger("a").seal_key == again.new_ledger("a").seal_key
    assert guard.new_ledger("a").seal_key != guard.new_ledger("b").seal_key
    with guard.session("a") as ledger:
        assert ledger.seal_key == again.new_ledger("a").seal_key
    rotated = a_guard(secret="the next key")
    assert rotated.new_ledger("a").seal_key != guard.new_ledger("a").seal_key


def test_a_guard_without_a_secret_draws_one_of_its_own() -> None:
    """No secret: one random secret per guard, so its sessions' keys hold within the guard only."""
    guard = a_guard()
    assert guard.new_ledger("a").seal_key == guard.new_ledger("a").seal_key
    assert a_guard().new_ledger("a").seal_key != guard.new_ledger("a").seal_key


def test_ledgers_of_no_session_each_have_a_key_of_their_own() -> None:
    """A ledger with no session id never shares its key: not two of one guard, secret or not."""
    for guard in (a_guard(), a_guard(secret="server key")):
        keys = {guard.new_ledger().seal_key for _ in range(3)} | {Ledger().seal_key}
        assert len(keys) == 4


@pytest.mark.parametrize("secret", [b"", "", 42])
def test_a_secret_that_is_no_key_is_an_error_of_use(secret: object) -> None:
    """An empty or non-text secret is refused at construction, saying what to pass."""
    with pytest.raises(GuardrailUsageError, match="secret"):
        Guard(secret=secret)  # type: ignore[arg-type]


# -- render and parse back ------------------------------------------------------------------

ROLES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,12}", fullmatch=True)
VALUES = st.text(
    st.characters(codec="utf-8") | st.sampled_from(" \"'[](){}\\,\n\t#"), min_size=1, max_size=20
)
STATUSES = st.none() | st.text(
    st.characters(codec="utf-8") | st.sampled_from(' ",()\n'), min_size=1, max_size=12
)


@st.composite
def ledgers(draw: st.DrawFn) -> Ledger:
    """A ledger of random entries: any value, role, status, turns, verified or not, pinned."""
    ledger = a_guard().new_ledger(draw(st.none() | st.text(max_size=8)))
    values = draw(st.lists(VALUES, min_size=1, max_size=6, unique_by=str.strip))
    for value in values:
        if not value.strip():
            continue
        kind = draw(st.sampled_from(KINDS))
        found = Batch.one(kind, value, value.strip(), "x", draw(STATUSES))
        added = (
            state_of(ledger)
            .admit([found], source=Source("t", None, "x", 0), verified=draw(st.booleans()))
            .added
        )
        for entry in added:
            role = draw(ROLES)
            if role not in ledger and not role[0].isdigit():
                ledger.label(entry.role, role)
            entry.first_seen = draw(st.integers(0, 50))
            entry.last_used = entry.first_seen + draw(st.integers(0, 3))
            if draw(st.booleans()):
                ledger.pin(entry.role)
    return ledger


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ledgers())
def test_every_entry_reads_back_with_its_role_value_and_flags(ledger: Ledger) -> None:
    """render -> parse gives every entry back: role, value, status, verified, pinned, turns."""
    lines, evicted, bad = parse_block(render_block(state_of(ledger), (), ()), 0)
    assert (evicted, bad) == ([], [])
    assert len(lines) == len(ledger.entries())
    for line, entry in zip(lines, ledger.entries(), strict=True):
        assert (line.role, line.value, line.status) == (entry.role, entry.value, entry.status)
        assert (line.verified, line.pinned) == (entry.verified, entry.pinned)
        if line.seen is None:  # the short form: seen and last used in the same turn
            assert entry.first_seen == entry.last_used
        else:
            assert (line.seen, line.last or line.seen) == (entry.first_seen, entry.last_used)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ledgers(), st.data())
def test_any_single_change_to_a_sealed_block_fails_the_seal(
    ledger: Ledger, data: st.DataObject
) -> None:
    """A character replaced, inserted or deleted anywhere (the seal line too): not verified."""
    sealed = seal(render_block(state_of(ledger), (), ()), state_of(ledger))
    assert unseal(sealed, state_of(ledger))[1]
    at = data.draw(st.integers(0, len(sealed) - 1))
    how = data.draw(st.sampled_from(["replace", "insert", "delete"]))
    char = data.draw(st.characters(codec="utf-8") | st.sampled_from("0123456789abcdef\n "))
    if how == "replace":
        if char == sealed[at]:
            char = "x" if char != "x" else "y"
        forged = sealed[:at] + char + sealed[at + 1 :]
    elif how == "insert":
        forged = sealed[:at] + char + sealed[at:]
    else:
        forged = sealed[:at] + sealed[at + 1 :]
    assert forged != sealed
    assert not unseal(forged, state_of(ledger))[1]


@given(st.text(max_size=200))
def test_any_text_parses_without_crashing(text: str) -> None:
    """parse_block reads what it can of any text and reports the rest as unreadable lines."""
    lines, _, bad = parse_block(f"{BLOCK_HEADER}\n{text}", 3)
    assert all(isinstance(line, BlockLine) for line in lines)
    assert all(repair.index == 3 for repair in bad)


def test_a_line_whose_role_is_no_name_is_unreadable() -> None:
    """A "role" holding braces or quotes (a template, say) is not a line this module writes."""
    text = f'{BLOCK_HEADER}\n{{n}}_order      W1000001\n"order"           W1000002'
    lines, _, bad = parse_block(text, 0)
    assert lines == []
    assert [repair.problem for repair in bad] == ["unreadable_ledger_line"] * 2


def test_a_status_that_could_break_a_line_is_written_quoted() -> None:
    """A status with a line break, a comma or brackets is written as a JSON string."""
    ledger = a_guard().new_ledger()
    status = 'ok)\nnote  W9 (pinned, "x"'
    found = Batch.one("order", "W1000001", "W1000001", "x", status)
    state_of(ledger).admit([found], source=Source("t", None, "x", 0))
    text = render_block(state_of(ledger), (), ())
    assert len(text.split("\n")) == 2
    (line,), _, _ = parse_block(text, 0)
    assert line.status == status


def test_restoring_an_untrusted_line_keeps_only_its_value_and_role() -> None:
    """restore(trusted=False): unverified, unpinned, no turns, whatever the line says."""
    ledger = a_guard().new_ledger()
    line = BlockLine("order_7", "W1000007", seen=40, last=41, status="ok", pinned=True)
    assert restore([line], state_of(ledger), trusted=False) == []
    entry = ledger["order_7"]
    assert (entry.verified, entry.pinned, entry.first_seen, entry.status) == (False, False, 0, "ok")
    assert ledger.turn == 0
    trusted = a_guard().new_ledger()
    restore([line], state_of(trusted))
    entry = trusted["order_7"]
    assert (entry.verified, entry.pinned, entry.first_seen, entry.last_used) == (True, True, 40, 41)
    assert len(trusted) == 1


def test_a_restored_pinned_entry_does_not_count_against_the_capacity() -> None:
    """A pinned line is pinned through the ledger: a ledger of one keeps it and one more."""
    ledger = a_guard(capacity=1).new_ledger()
    pinned = BlockLine("order", "W1000001", pinned=True)
    plain = BlockLine("order_2", "W1000002")
    restore([pinned, plain], state_of(ledger))
    assert [(e.value, e.pinned) for e in ledger.entries()] == [
        ("W1000001", True),
        ("W1000002", False),
    ]
