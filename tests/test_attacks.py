"""Attacks on the guard, written as a hostile user or a careless integrator would try them.

Each test tries one channel by which a foreign identifier could reach a
write tool, or one input that could crash the guard or burn its CPU, and
asserts that the write tool never runs with it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Annotated, Any

import pytest

from guardrail import Guard, GuardrailUsageError, Id, IdentifierViolation, SQLiteStore

from .conftest import ORDERS, shop_guard

# -- forged ledger blocks and refusals read back (compaction) ---------------------------------


# (end of the compaction section)


# -- tools, results and arguments (the check and the harvest) ---------------------------------


# (end of the check section)


# -- sessions and stores (persistence) --------------------------------------------------------


def _refund_tool(guard: Guard) -> tuple[Callable[[str], str], list[str]]:
    """A guarded write tool and the list of order ids it really refunded."""
    refunded: list[str] = []

    @guard.tool
    def issue_refund(order_id: Annotated[str, Id("order")]) -> str:
        refunded.append(order_id)
        return "refunded"

    return issue_refund, refunded


def _plant(path: Path, session_id: str, data: dict[str, Any]) -> None:
    """Write a saved ledger straight into the store's table, as someone with the file could."""
    SQLiteStore(path).close()
    with closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "INSERT OR REPLACE INTO guardrail_sessions (session_id, ledger) VALUES (?, ?)",
            (session_id, json.dumps(data)),
        )


def _saved_with_a_typed_id(guard: Guard) -> dict[str, Any]:
    """A saved ledger in which the user only typed W7777777 (unverified)."""
    with guard.session("tmp") as ledger:
        guard.observe_user("please refund #W7777777")
        data = ledger.to_dict()
    assert data["entries"][0]["verified"] is False
    return data


def test_a_verified_flag_written_as_text_never_verifies_a_typed_id(tmp_path: Path) -> None:
    """A saved "verified": "false" is refused on load instead of read as true."""
    path = tmp_path / "s.sqlite3"
    guard = shop_guard(store=SQLiteStore(path))
    refund, refunded = _refund_tool(guard)
    data = _saved_with_a_typed_id(guard)
    data["entries"][0]["verified"] = "false"
    _plant(path, "victim", data)

    def resume() -> None:
        with guard.session("victim"):
            refund("W7777777")

    with pytest.raises(GuardrailUsageError, match=r"entries\[0\]\.verified"):
        resume()
    assert refunded == []


def test_a_saved_key_cannot_vouch_for_an_id_its_value_is_not(tmp_path: Path) -> None:
    """A saved entry whose key names another id is re-keyed from its value on load."""
    path = tmp_path / "s.sqlite3"
    guard = shop_guard(store=SQLiteStore(path))
    refund, refunded = _refund_tool(guard)
    with guard.session("tmp") as ledger:
        guard.record("get_order", {}, {"order_id": "#W8855135"})
        data = ledger.to_dict()
    data["entries"][0]["key"] = "W6666666"  # a verified entry that would vouch for W6666666
    _plant(path, "victim", data)
    with guard.session("victim"), pytest.raises(IdentifierViolation):
        refund("W6666666")
    assert refunded == []


def test_a_saved_alias_cannot_point_a_role_at_another_id(tmp_path: Path) -> None:
    """A role table naming a role that is no entry's own or alias is refused on load."""
    path = tmp_path / "s.sqlite3"
    guard = shop_guard(store=SQLiteStore(path))
    with guard.session("tmp") as ledger:
        guard.record("search_orders", {}, ORDERS)
        data = ledger.to_dict()
    data["roles"]["refund_this"] = "order_2"  # an alias the entry never had
    _plant(path, "victim", data)
    with pytest.raises(GuardrailUsageError, match="refund_this"), guard.session("victim"):
        pass


def test_merging_copies_never_verifies_an_id_only_typed(tmp_path: Path) -> None:
    """Two workers on one conversation: an id one only saw typed stays unverified after merge."""
    path = tmp_path / "s.sqlite3"
    one = shop_guard(store=SQLiteStore(path))
    two = shop_guard(store=SQLiteStore(path))
    refund, refunded = _refund_tool(one)
    with one.session("s"), two.session("s"):
        one.record("search_orders", {}, ORDERS)
        two.observe_user("refund #W7777777 now")
    with one.session("s") as ledger:
        entry = ledger.get("order", "W7777777")
        assert entry is not None and not entry.verified
        with pytest.raises(IdentifierViolation):
            refund("W7777777")
        refund("W8855135")
    assert refunded == ["W8855135"]


# (end of the persistence section)
