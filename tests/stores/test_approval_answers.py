"""What an answer covers, and who can give one: written as an attacker who writes to the store.

An approval covers the value for that tool in that session (``scope="value"``,
the default), or the held call alone (``scope="call"``): used up as it runs,
on whichever worker runs it. In a session of a guard with ``secret=``, each
answer kept in the store carries a MAC: a store writer who adds an
approval, copies one from another session or value, or turns a one-call
approval into a standing one grants nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from guardrail import ApprovalRequest, Guard, GuardrailUsageError
from guardrail.stores import SQLiteStore
from guardrail.stores.protocol import Change

IBAN = r"\b[A-Z]{2}\d{2}[A-Z0-9]{10,30}\b"
BILL_IBAN = "UK12345678901234567890"
SECRET = "the workers' shared key"


def _guard(store: Any = None, *, secret: str | None = SECRET) -> Guard:
    guard = Guard(secret=secret, mode="reprompt", **({"store": store} if store else {}))
    guard.add_kind("iban", pattern=IBAN, mentions="ask")
    guard.add_kind("file")
    guard.declare("read_file", ids={"file_path": "file"}, effect="read")
    guard.declare("send_money", ids={"recipient": "iban"}, effect="write")
    guard.declare("schedule_transaction", ids={"recipient": "iban"}, effect="write")
    return guard


def _ask(guard: Guard, tool: str = "send_money") -> ApprovalRequest:
    guard.record("read_file", {"file_path": "bill.txt"}, f"Please pay to IBAN: {BILL_IBAN}")
    verdict = guard.check(tool, {"recipient": BILL_IBAN})
    assert verdict.outcome == "ask"
    return verdict.approvals[0]


def _outcome(guard: Guard, tool: str = "send_money") -> str:
    return guard.enforce(tool, {"recipient": BILL_IBAN}).outcome


# -- scope ----------------------------------------------------------------------------------------


def test_an_approval_covers_the_value_for_that_tool_in_that_session() -> None:
    """The default: this value, this tool, this session; another tool or session asks again."""
    guard = _guard()
    with guard.session("a"):
        guard.approve(_ask(guard))
        assert _outcome(guard) == "allowed"
        assert _outcome(guard) == "allowed"  # a new payment to the approved payee
        assert guard.check("schedule_transaction", {"recipient": BILL_IBAN}).outcome == "ask"
    with guard.session("b"):
        _ask(guard)


def test_an_approval_of_the_held_call_alone_runs_it_once() -> None:
    """scope="call": the held call runs; the next call with the value asks again."""
    guard = _guard()
    with guard.session("a"):
        request = _ask(guard)
        guard.approve(request, scope="call")
        assert guard.check("send_money", {"recipient": BILL_IBAN}).allowed  # a check spends none
        assert _outcome(guard) == "allowed"
        assert _outcome(guard) == "ask"  # a second payment from one yes: asked again
        with pytest.raises(GuardrailUsageError, match="scope"):
            guard.approve(request, scope="session")  # type: ignore[arg-type]


def test_a_one_call_approval_is_spent_on_every_worker(tmp_path: Path) -> None:
    """Approved for one call on worker A, run on worker B: worker A's next call asks again."""
    path = tmp_path / "sessions.db"
    one, other = _guard(SQLiteStore(path)), _guard(SQLiteStore(path))
    with one.session("conv"):
        one.approve(_ask(one), scope="call")
    with other.session("conv"):
        assert _outcome(other) == "allowed"
    with one.session("conv"):
        assert _outcome(one) == "ask"


# -- a store writer without the secret ------------------------------------------------------------


def _tamper(path: Path, session: str, edit: Any) -> None:
    """Rewrite the session's live records as a store writer with no secret could."""
    store = SQLiteStore(path)
    snapshot = store.load(session)
    assert snapshot is not None
    records = [dict(r) for r in snapshot.records if r["state"] == "live"]
    for record in records:
        edit(record)
    store.apply(session, Change(snapshot.version, records))
    store.close()


def test_an_approval_written_into_the_store_grants_nothing(tmp_path: Path) -> None:
    """With secret=, a plain "approved" list added to a record leaves the call asking."""
    path = tmp_path / "sessions.db"
    guard = _guard(SQLiteStore(path))
    with guard.session("conv"):
        _ask(guard)
    _tamper(path, "conv", lambda r: r.update(approved=["send_money"]))
    restarted = _guard(SQLiteStore(path))
    with restarted.session("conv"):
        assert _outcome(restarted) == "ask"


def test_an_approval_copied_from_another_session_or_scope_grants_nothing(tmp_path: Path) -> None:
    """A genuine answer's MAC moved to another session, or a one-call one made standing: nothing."""
    path = tmp_path / "sessions.db"
    guard = _guard(SQLiteStore(path))
    with guard.session("yes"):
        guard.approve(_ask(guard), scope="call")
    with guard.session("victim"):
        _ask(guard)
    store = SQLiteStore(path)
    snapshot = store.load("yes")
    store.close()
    assert snapshot is not None
    (genuine,) = [r for r in snapshot.records if r.get("approved")]
    assert genuine["approved"] == ["send_money#call"] and list(genuine["seals"]) == [
        "+send_money#call"
    ]
    copied = {"approved": genuine["approved"], "seals": genuine["seals"]}
    _tamper(path, "victim", lambda r: r.update(copied))
    standing = {
        "approved": ["send_money"],
        "seals": {"+send_money": genuine["seals"]["+send_money#call"]},
    }
    _tamper(path, "yes", lambda r: r.update(standing))
    restarted = _guard(SQLiteStore(path))
    with restarted.session("victim"):
        assert _outcome(restarted) == "ask"
    with restarted.session("yes"):
        assert _outcome(restarted) == "ask"


def test_a_genuine_answer_survives_the_store_and_a_restart(tmp_path: Path) -> None:
    """The answers the program gave (yes and no) hold after a restart with the same secret."""
    path = tmp_path / "sessions.db"
    guard = _guard(SQLiteStore(path))
    with guard.session("conv"):
        guard.approve(_ask(guard))
        guard.deny(_ask(guard, "schedule_transaction"))
    restarted = _guard(SQLiteStore(path))
    with restarted.session("conv"):
        assert _outcome(restarted) == "allowed"
        verdict = restarted.check("schedule_transaction", {"recipient": BILL_IBAN})
        assert [f.problem for f in verdict.findings] == ["declined"]
