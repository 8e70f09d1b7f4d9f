"""An approval lives as long as its session, on every worker, and outlives a restart.

Written as an attacker (or an unlucky reuse of a session id) would go at it:
keep a request of a conversation that has ended, been deleted or expired,
and answer it later, on the worker that ended it or on another one sharing
the store; answer one session-less ledger's request on another's ledger;
restart the process and answer what was asked before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from guardrail import ApprovalRequest, Guard, GuardrailUsageError, Ledger, StaleApproval
from guardrail.stores import SQLiteStore, Store

IBAN = r"\b[A-Z]{2}\d{2}[A-Z0-9]{10,30}\b"
BILL_IBAN = "UK12345678901234567890"
SECRET = "the workers' shared key"


def _guard(store: Store | None = None, *, secret: str | None = SECRET) -> Guard:
    guard = Guard(secret=secret, store=store) if store is not None else Guard(secret=secret)
    guard.add_kind("iban", pattern=IBAN, mentions="ask")
    guard.add_kind("file")
    guard.declare("read_file", ids={"file_path": "file"}, effect="read")
    guard.declare("send_money", ids={"recipient": "iban"}, effect="write")
    return guard


def _ask(guard: Guard, ledger: Ledger | None = None) -> ApprovalRequest:
    bill = f"Please pay to IBAN: {BILL_IBAN}"
    guard.record("read_file", {"file_path": "bill.txt"}, bill, ledger=ledger)
    verdict = guard.check("send_money", {"recipient": BILL_IBAN}, ledger=ledger)
    assert verdict.outcome == "ask"
    return verdict.approvals[0]


def _asks(guard: Guard, session: str) -> bool:
    with guard.session(session):
        return guard.check("send_money", {"recipient": BILL_IBAN}).outcome == "ask"


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    """A maker of stores that all reach one place (a worker's own client each)."""
    made: list[Store] = []

    def make() -> Store:
        store: Store
        if request.param == "sqlite":
            store = SQLiteStore(tmp_path / "sessions.db")
        elif request.param == "redis":
            import redis

            from guardrail.stores import RedisStore

            url = request.getfixturevalue("redis_url")
            prefix = request.getfixturevalue("redis_prefix")
            store = RedisStore(redis.Redis.from_url(url), prefix=prefix)
        else:
            from guardrail.stores import PostgresStore

            dsn = request.getfixturevalue("postgres_dsn")
            schema = request.getfixturevalue("postgres_schema")
            store = PostgresStore(dsn, schema=schema)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


# -- a session that ended, was deleted or expired: its requests are stale everywhere --------------


def test_a_deleted_sessions_request_is_refused_on_another_worker(
    shared: Callable[[], Store],
) -> None:
    """Worker A deletes the conversation; worker B is handed its old request: refused, stale.

    The same id opened again later (a new conversation reusing it) asks again.
    """
    one, other = _guard(shared()), _guard(shared())
    with other.session("conv"):  # B holds the session too, cached
        _ask(other)
    with one.session("conv"):
        request = _ask(one)
    one.end_session("conv", delete=True)
    with pytest.raises(StaleApproval, match="ended"):
        other.approve(request)
    with pytest.raises(StaleApproval):
        other.deny(request)
    with pytest.raises(StaleApproval):
        one.approve(request)
    with other.session("conv"):  # nothing was written back into the deleted session
        assert not other.check("send_money", {"recipient": BILL_IBAN}).allowed
        assert len(other.ledger) == 0


def test_a_deleted_sessions_request_is_refused_once_the_id_is_reused(
    shared: Callable[[], Store],
) -> None:
    """The id is opened again by a new conversation: the old request still approves nothing."""
    one, other = _guard(shared()), _guard(shared())
    with one.session("conv"):
        request = _ask(one)
    one.end_session("conv", delete=True)
    with one.session("conv"):
        _ask(one)  # the new conversation reads the same bill
    for worker in (one, other):
        with pytest.raises(StaleApproval):
            worker.approve(request)
    assert _asks(one, "conv") and _asks(other, "conv")


def test_an_ended_sessions_requests_and_answers_go_with_it(shared: Callable[[], Store]) -> None:
    """end_session keeps the ledger, not the answers: its requests are stale on every worker."""
    one, other = _guard(shared()), _guard(shared())
    with one.session("yes"):
        approved = _ask(one)
        one.approve(approved)
    with one.session("no"):
        declined = _ask(one)
        one.deny(declined)
    with other.session("yes"):
        assert other.check("send_money", {"recipient": BILL_IBAN}).allowed
    one.end_session("yes")
    one.end_session("no")
    for worker in (one, other):
        for request in (approved, declined):
            with pytest.raises(StaleApproval):
                worker.approve(request)
    # Neither the yes nor the no is kept: the next conversation on these ids asks again.
    assert all(_asks(worker, s) for worker in (other, one) for s in ("yes", "no"))


def test_an_expired_sessions_request_is_refused_on_the_worker_that_expired_it(
    tmp_path: Path,
) -> None:
    """expire_sessions deletes the session: its requests are stale, even on that very worker."""
    guard = _guard(SQLiteStore(tmp_path / "sessions.db"))
    with guard.session("conv"):
        request = _ask(guard)
    assert guard.expire_sessions(0) == ["conv"]
    with pytest.raises(StaleApproval):
        guard.approve(request)
    with guard.session("conv"):
        _ask(guard)
        with pytest.raises(StaleApproval):
            guard.approve(request)
    assert _asks(guard, "conv")


# -- ledgers of no session ------------------------------------------------------------------------


def test_a_session_less_ledgers_request_approves_on_no_other_ledger() -> None:
    """Two users' ledgers of no session: one user's request approves nothing on the other's."""
    guard = _guard(secret=None)
    alice, mallory = Ledger(), Ledger()
    request = _ask(guard, ledger=mallory)
    _ask(guard, ledger=alice)
    with pytest.raises(GuardrailUsageError, match="another ledger"):
        guard.approve(request, ledger=alice)
    assert guard.check("send_money", {"recipient": BILL_IBAN}, ledger=alice).outcome == "ask"
    guard.approve(request, ledger=mallory)  # on its own ledger it approves
    assert guard.check("send_money", {"recipient": BILL_IBAN}, ledger=mallory).allowed


def test_a_saved_ledger_keeps_its_requests_and_a_copy_made_anew_does_not() -> None:
    """A ledger restored from its JSON is the same ledger; an empty one is another."""
    guard = _guard(secret="k")
    ledger = Ledger()
    request = _ask(guard, ledger=ledger)
    restored = Ledger.from_json(ledger.to_json())
    guard.approve(request, ledger=restored)
    assert guard.check("send_money", {"recipient": BILL_IBAN}, ledger=restored).allowed
    with pytest.raises(GuardrailUsageError, match="another ledger"):
        guard.approve(request, ledger=Ledger())


# -- a restart ------------------------------------------------------------------------------------


def test_an_approval_asked_before_a_restart_is_answered_after_it(tmp_path: Path) -> None:
    """With secret= and a store, a request made before a restart is answered after it: yes or no."""
    path = tmp_path / "sessions.db"
    before = _guard(SQLiteStore(path))
    with before.session("yes"):
        yes = _ask(before)
    with before.session("no"):
        no = _ask(before)
    after = _guard(SQLiteStore(path))  # a new process: same secret, same store
    after.approve(yes)
    after.deny(no)
    with after.session("yes"):
        assert after.check("send_money", {"recipient": BILL_IBAN}).allowed
    with after.session("no"):
        verdict = after.check("send_money", {"recipient": BILL_IBAN})
        assert [f.problem for f in verdict.findings] == ["declined"]


def test_without_a_secret_the_error_after_a_restart_names_what_is_missing(
    tmp_path: Path,
) -> None:
    """No secret=: a request from before a restart fails, saying secret= is what is missing."""
    path = tmp_path / "sessions.db"
    before = _guard(SQLiteStore(path), secret=None)
    with before.session("conv"):
        request = _ask(before)
    after = _guard(SQLiteStore(path), secret=None)
    with pytest.raises(GuardrailUsageError, match=r"no secret=") as caught:
        after.approve(request)
    assert "forged, altered, or another guard's" not in str(caught.value)
    assert "Guard(secret=...)" in str(caught.value)
    assert _asks(after, "conv")
