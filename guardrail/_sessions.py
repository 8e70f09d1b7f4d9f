"""Sessions: which ledger is current, the ledgers open in some scope, the store, new ledgers.

One :class:`Sessions` per guard (shared by its :meth:`~guardrail.Guard.silenced`
copies): a ``ContextVar`` holds the ledger of the innermost
``with guard.session(id)`` of the running thread or task; scopes of one
session id open at the same time share one live ledger, read from the store
by the first and saved as each ends; a guard built with ``default_session``
has one ledger current wherever no scope is. New ledgers get the guard's
capacity and kinds, and a seal key derived from its ``secret`` where it has
one. Nothing here logs: the scope reports a failed save through its guard's
audit.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from guardrail.errors import GuardrailUsageError
from guardrail.kinds import Kind
from guardrail.ledger import Ledger
from guardrail.stores import Store

if TYPE_CHECKING:
    from guardrail._guard import Guard


class _Live:
    """A session open in one guard: its one ledger, and how many scopes hold it."""

    __slots__ = ("ledger", "lock", "scopes")

    def __init__(self) -> None:
        self.ledger: Ledger | None = None
        self.lock = threading.Lock()  # held while the ledger is read from the store
        self.scopes = 0


class Sessions:
    """The current ledger, the sessions open in some scope, and the ledgers a guard makes.

    ``kinds`` is the registry's own mapping (changed in place as kinds are
    declared), so every ledger normalises with the kinds declared so far.
    """

    def __init__(
        self,
        *,
        store: Store,
        kinds: Mapping[str, Kind],
        capacity: int,
        tombstones: int | None,
        secret: bytes | None,
        default_session: str | None,
    ) -> None:
        self.store = store
        self.kinds = kinds
        self.capacity = capacity
        self.tombstones = tombstones
        self.default_session = default_session
        self._secret = secret
        #: The ledger of the innermost open scope, per thread and task: one variable per
        #: guard, so two guards' sessions never see each other's ledgers.
        self.var: contextvars.ContextVar[Ledger | None] = contextvars.ContextVar(
            "guardrail.session", default=None
        )
        self._open_lock = threading.Lock()
        self._live: dict[str, _Live] = {}  # sessions open in some scope, by id
        self._default: Ledger | None = None

    def new_ledger(self, session_id: str | None = None) -> Ledger:
        """An empty ledger with the guard's capacity and kinds, outside any store.

        With a ``secret``, its seal key is derived from the session id: a
        ledger rebuilt for the same session verifies its own ledger blocks,
        and a block of one session never verifies in another.
        """
        ledger = Ledger(
            capacity=self.capacity,
            tombstones=self.tombstones,
            kinds=self.kinds,
            session_id=session_id,
        )
        if self._secret is not None:
            session = (session_id or "").encode("utf-8", "surrogatepass")
            message = b"guardrail seal\0" + session
            ledger.seal_key = hmac.new(self._secret, message, hashlib.sha256).digest()
        return ledger

    def open(self, session_id: str, given: Ledger | None) -> Ledger:
        """The live ledger of ``session_id``, read from the store by its first scope only.

        Every ``open`` is paired with a :meth:`release` (which :meth:`close` does).
        """
        with self._open_lock:
            live = self._live.get(session_id)
            if live is None:
                live = self._live[session_id] = _Live()
            live.scopes += 1
        try:
            with live.lock:
                if live.ledger is None:
                    live.ledger = self._load(session_id, given)
                elif given is not None and given is not live.ledger:
                    live.ledger.merge(given)  # open already: one ledger, which only grows
                return live.ledger
        except BaseException:
            self.release(session_id)
            raise

    def _load(self, session_id: str, given: Ledger | None) -> Ledger:
        """A session's ledger as a scope starts: ``given``, the stored one, or a new one."""
        ledger = given if given is not None else self.store.load(session_id)
        if ledger is None:
            return self.new_ledger(session_id)
        if ledger._kinds is not self.kinds:  # keyed by this guard's normalisers from now on
            ledger._use_kinds(self.kinds)
        ledger.session_id = session_id
        return ledger

    def release(self, session_id: str) -> None:
        """One scope of ``session_id`` ended: the last one lets the live ledger go."""
        with self._open_lock:
            live = self._live.get(session_id)
            if live is not None:
                live.scopes -= 1
                if live.scopes <= 0:
                    del self._live[session_id]

    def close(self, session_id: str, ledger: Ledger) -> None:
        """Save a session as one of its scopes ends, then release it (even if the save fails)."""
        try:
            self.store.save(session_id, ledger)
        finally:
            self.release(session_id)

    def save_default(self, ledger: Ledger) -> None:
        """Save the default session after a change to it (no scope's end will); else nothing."""
        if ledger is self._default and self.default_session is not None:
            self.store.save(self.default_session, ledger)

    def current(self) -> Ledger:
        """The ledger of the innermost open scope, else the default session's."""
        ledger = self.var.get()
        if ledger is not None:
            return ledger
        if self.default_session is None:
            raise GuardrailUsageError(
                "a guarded call ran outside any session. Wrap each conversation in "
                "`with guard.session(conversation_id):` (or `async with`), or build the guard "
                "with Guard(default_session='default') for a single-conversation program."
            )
        if self._default is None:
            # Opened as a scope that never ends: one live ledger, shared with any
            # `with guard.session(default_session)`, saved after each change.
            self._default = self.open(self.default_session, None)
        return self._default


class SessionScope:
    """``with guard.session(id) as ledger`` (or ``async with``): makes a ledger current.

    Scopes of one session id open at the same time (threads, tasks) share
    one ledger object. Each scope saves it to the guard's store as it ends;
    if the save fails while the block is already leaving by an exception,
    that exception goes on (the failure is logged and added as a note),
    else the :class:`~guardrail.errors.StoreError` is raised.
    """

    def __init__(self, guard: Guard, session_id: str, ledger: Ledger | None) -> None:
        self._guard = guard
        self._sessions = guard._sessions
        self.session_id = session_id
        self._given = ledger
        self._tokens: list[tuple[contextvars.Token[Ledger | None], Ledger]] = []

    @property
    def guard(self) -> Guard:
        """The guard whose session this is (its kinds and tool specs)."""
        return self._guard

    def __enter__(self) -> Ledger:
        ledger = self._sessions.open(self.session_id, self._given)
        self._tokens.append((self._sessions.var.set(ledger), ledger))
        return ledger

    def __exit__(self, exc_type: object, exc: BaseException | None, traceback: object) -> None:
        token, ledger = self._tokens.pop()
        self._sessions.var.reset(token)
        try:
            self._sessions.close(self.session_id, ledger)
        except Exception as failure:  # never hide the exception the block ends by
            self._guard.audit.session_not_saved(self.session_id, failure)
            if exc is None:
                raise
            add_note = getattr(exc, "add_note", None)  # Python 3.11+
            if add_note is not None:
                add_note(f"guardrail: session {self.session_id!r} was not saved: {failure}")

    async def __aenter__(self) -> Ledger:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: object, exc: BaseException | None, traceback: object
    ) -> None:
        self.__exit__(exc_type, exc, traceback)
