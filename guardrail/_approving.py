"""What a guard does with the user's answer to an approval request: ``approve`` and ``deny``.

A part of :class:`~guardrail.Guard` (its base class), kept apart from the
rest of its methods: a request's token is verified, the session it names is
opened (a stale one is refused), and the answer recorded in its ledger (see
:mod:`guardrail._approvals`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from guardrail._approvals import read_token
from guardrail._engine import Engine
from guardrail._sessions import Sessions, SessionScope, check_session_id
from guardrail._verdict import ApprovalRequest, Verdict
from guardrail.errors import GuardrailUsageError, StaleApproval
from guardrail.ledger import Entry, Ledger
from guardrail.ledger._ledger import state_of
from guardrail.ledger._state import LedgerState


class Approvals:
    """The user's answers to approval requests, and the async check that may ask for them."""

    _engine: Engine
    _sessions: Sessions

    async def enforce_async(
        self,
        name: str,
        arguments: Mapping[str, Any] | str,
        *,
        ledger: Ledger | None = None,
        session: str | None = None,
    ) -> Verdict:
        """:meth:`enforce` for an async runtime: ``Guard(approve=...)`` may be a coroutine."""
        if session is None:
            return await self._engine.enforce_async(name, arguments, self._state(ledger))
        check_session_id(session)
        async with SessionScope(self._sessions, session, None) as scoped:
            return await self._engine.enforce_async(name, arguments, state_of(scoped))

    def _state(self, given: Ledger | None) -> LedgerState:
        return state_of(given) if given is not None else self._sessions.current()

    def approve(self, request: ApprovalRequest | str, *, ledger: Ledger | None = None) -> Entry:
        """The user approved a request: its value is ``confirmed`` for that session, tool and kind.

        ``request`` is one of a verdict's ``approvals`` (or its ``token``), as
        the guard gave it; the call it came from is then allowed when made
        again (another tool asks again). A forged, altered or another guard's
        request is a usage error; one of a session that ended is
        :class:`StaleApproval`. ``ledger=``: the ledger the request was made
        on, where it was checked on a ledger of no session.
        """
        return self._decide(request, True, ledger)

    def deny(self, request: ApprovalRequest | str, *, ledger: Ledger | None = None) -> Entry:
        """The user declined a request: the value is refused for that tool (``declined``)."""
        return self._decide(request, False, ledger)

    async def approve_async(
        self, request: ApprovalRequest | str, *, ledger: Ledger | None = None
    ) -> Entry:
        """:meth:`approve` for a guard whose store is an asynchronous one."""
        return await self._decide_async(request, True, ledger)

    async def deny_async(
        self, request: ApprovalRequest | str, *, ledger: Ledger | None = None
    ) -> Entry:
        """:meth:`deny` for a guard whose store is an asynchronous one."""
        return await self._decide_async(request, False, ledger)

    def _decide(
        self, request: ApprovalRequest | str, approved: bool, ledger: Ledger | None
    ) -> Entry:
        engine = self._engine
        session = self._grant_session(request, ledger)
        if session is None:
            return engine.decide(self._state(ledger), request, approved)
        with SessionScope(self._sessions, session, None) as scoped:
            return engine.decide(state_of(scoped), request, approved)

    async def _decide_async(
        self, request: ApprovalRequest | str, approved: bool, ledger: Ledger | None
    ) -> Entry:
        engine = self._engine
        session = self._grant_session(request, ledger)
        if session is None:
            return engine.decide(self._state(ledger), request, approved)
        async with SessionScope(self._sessions, session, None) as scoped:
            return engine.decide(state_of(scoped), request, approved)

    def _grant_session(self, request: ApprovalRequest | str, ledger: Ledger | None) -> str | None:
        """The session a request's token names, once it verifies; None: decide on ``ledger``."""
        grant = read_token(self._engine.approval_key, request)
        if ledger is not None or grant.session is None:
            if ledger is None:
                raise GuardrailUsageError(
                    "the request was made on a ledger of no session: pass it as ledger="
                )
            return None
        if grant.session in self._sessions.ended:
            raise StaleApproval(
                f"session {grant.session!r} has ended: its approval requests are stale. "
                "Ask again in a live session"
            )
        return grant.session
