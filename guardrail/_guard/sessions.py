"""Sessions: which ledger is current, the sessions cached as live ledgers, the store, new ledgers.

One :class:`Sessions` per guard (shared by its :meth:`~guardrail.Guard.silenced`
copies): a ``ContextVar`` holds the ledger of the innermost
``with guard.session(id)`` of the running thread or task. Each session a
guard uses stays cached as one live ledger (scopes of one id open at the
same time share it), up to ``max_cached`` sessions, the least recently used
going first once no scope holds them. Opening a cached session asks the
store only what changed since (``changes_since``: nothing, usually); each
scope's end writes only what changed in it (the ledger's journal, one
atomic :class:`~guardrail.stores.Change`). A session the store cannot read
is an error, never an empty ledger: the guard fails closed. A guard built
with ``default_session`` has one ledger current wherever no scope is. New
ledgers get the guard's capacity and kinds, and a seal key derived from its
``secret`` where it has one. Nothing here logs: the scope reports a failed
save through its guard's audit. Each sequence that calls the store (open,
close, write, end, expire) is written once, as steps that a synchronous and
an asynchronous driver take (``_Steps``).
"""

from __future__ import annotations

import contextvars
import gc
import hashlib
import hmac
import inspect
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from guardrail._check.approvals import renew
from guardrail._check.tokens import Keys
from guardrail._guard import journal
from guardrail.errors import GuardrailUsageError, SessionDeleted
from guardrail.kinds import Kind
from guardrail.ledger import Ledger
from guardrail.ledger._ledger import state_of
from guardrail.ledger._rekey import use_kinds
from guardrail.ledger._state import LedgerState
from guardrail.stores.protocol import AsyncStore, Snapshot, Store

if TYPE_CHECKING:
    import asyncio


#: Ended sessions remembered for refusing their approval requests as stale.
_ENDED_KEPT = 10_000


class _Cached:
    """A session cached in one guard: its live ledger, the store version it caught up with."""

    __slots__ = ("_async_lock", "ledger", "lock", "scopes", "version")

    def __init__(self) -> None:
        self.ledger: Ledger | None = None
        self.version = 0
        self.lock = threading.Lock()  # held while the ledger is read, refreshed or written
        self._async_lock: asyncio.Lock | None = None  # the same, with an asynchronous store
        self.scopes = 0

    def async_lock(self) -> asyncio.Lock:
        """The lock an asynchronous store's reads and writes of this session hold."""
        if self._async_lock is None:
            import asyncio  # here, not at import: a program without asyncio never loads it

            self._async_lock = asyncio.Lock()
        return self._async_lock


_T = TypeVar("_T")
#: Session work written once for both kinds of store (sans-I/O: it never calls the store
#: itself). A generator that yields each store call it needs as ``(method, *arguments)`` and
#: is sent the answer, or has the store's exception thrown into it; ``with (yield _LOCK,
#: cached):`` holds a cached session's lock. :func:`_drive` takes it with a synchronous
#: store and its threading lock, :func:`_drive_async` awaiting an asynchronous one.
_Steps = Generator[tuple[Any, ...], Any, _T]
_LOCK = object()


class _Acquired:
    """An acquired asyncio lock, released as the ``with`` block holding it ends."""

    __slots__ = ("lock",)

    def __init__(self, lock: asyncio.Lock) -> None:
        self.lock = lock

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def _drive(store: Store, steps: _Steps[_T]) -> _T:
    """Take ``steps`` with a synchronous store.

    A whole session's read and the ledger made of it run with the cyclic
    collector paused, as :func:`~guardrail._guard.journal.opened` pauses it:
    the records read are the objects the ledger is made from, and the
    collector would walk them in between. It runs again at the next step.
    """
    send = steps.send
    reply: Any = None
    paused = False
    while True:
        try:
            need = send(reply)
        except StopIteration as done:
            result: _T = done.value
            return result
        finally:
            if paused:
                paused = False
                gc.enable()
        try:
            if need[0] is _LOCK:
                reply = need[1].lock
            else:
                paused = need[0] == "load" and gc.isenabled()
                if paused:
                    gc.disable()
                reply = getattr(store, need[0])(*need[1:])
        except BaseException as exc:
            send, reply = steps.throw, exc
        else:
            send = steps.send


async def _drive_async(store: AsyncStore, steps: _Steps[_T]) -> _T:
    """Take ``steps`` awaiting an asynchronous store."""
    send = steps.send
    reply: Any = None
    while True:
        try:
            need = send(reply)
        except StopIteration as done:
            result: _T = done.value
            return result
        try:
            if need[0] is _LOCK:
                reply = _Acquired(need[1].async_lock())
                await reply.lock.acquire()
            else:
                reply = await getattr(store, need[0])(*need[1:])
        except BaseException as exc:
            send, reply = steps.throw, exc
        else:
            send = steps.send


class Sessions:
    """The current ledger, the cached sessions, and the ledgers a guard makes.

    ``kinds`` is the registry's own mapping (changed in place as kinds are
    declared), so every ledger normalises with the kinds declared so far.
    """

    def __init__(
        self,
        *,
        store: Store | AsyncStore,
        kinds: Mapping[str, Kind],
        capacity: int,
        tombstones: int | None,
        secret: bytes | str | None,
        default_session: str | None,
        not_saved: Callable[[str | None, BaseException], None],
        max_cached: int = 1024,
    ) -> None:
        if type(max_cached) is not int or max_cached < 1:
            raise GuardrailUsageError(
                f"max_cached_sessions is how many sessions to keep as live ledgers (>= 1), "
                f"not {max_cached!r}"
            )
        if isinstance(secret, str):
            secret = secret.encode("utf-8")
        if secret is not None and (not isinstance(secret, bytes) or not secret):
            raise GuardrailUsageError("secret must be non-empty bytes or text (a server's key)")
        self.store = store
        self.kinds = kinds
        self.capacity = capacity
        self.tombstones = tombstones
        self.default_session = default_session
        self.max_cached = max_cached
        #: Whether the store's methods are coroutines (an AsyncStore): scopes must be async.
        self.is_async = inspect.iscoroutinefunction(getattr(store, "load", None))
        if self.is_async and default_session is not None:
            raise GuardrailUsageError(
                "default_session needs a synchronous store (a change outside any scope is "
                "written at once, with no coroutine to wait in); with an asynchronous store, "
                "open each conversation with `async with guard.session(id)`"
            )
        #: Whether the guard was given a secret (it seals the results it records); without
        #: one it draws a random secret, so its seal keys hold in this process only.
        self.has_secret = secret is not None
        self._secret = secret if secret is not None else secrets.token_bytes(32)
        #: Reports a session whose changes could not be written (the guard's audit).
        self.not_saved = not_saved
        #: The state of the innermost open scope's ledger, per thread and task: one variable
        #: per guard, so two guards' sessions never see each other's ledgers.
        self.var: contextvars.ContextVar[LedgerState | None] = contextvars.ContextVar(
            "guardrail.session", default=None
        )
        self._open_lock = threading.Lock()
        #: Cached sessions by id, least recently opened first.
        self._cache: OrderedDict[str, _Cached] = OrderedDict()
        self._default: Ledger | None = None
        #: Sessions ended here and not opened since (bounded), whose approval requests are stale.
        self.ended: OrderedDict[str, None] = OrderedDict()
        #: Signs approval requests (:mod:`guardrail._check.approvals`): derived from the secret.
        self.approval_key = Keys(
            hmac.new(self._secret, b"guardrail approvals", hashlib.sha256).digest(),
            from_secret=self.has_secret,
        )

    def new_ledger(self, session_id: str | None = None) -> Ledger:
        """An empty ledger with the guard's capacity and kinds, outside any store.

        A ledger of a session seals its blocks with a key derived from the
        guard's secret and the session id (see :meth:`seal`); a ledger of no
        session keeps the random key of its own it was made with.
        """
        ledger = Ledger(
            capacity=self.capacity,
            tombstones=self.tombstones,
            kinds=self.kinds,
            session_id=session_id,
        )
        if session_id is not None:
            self.seal(state_of(ledger), session_id)
        return ledger

    def seal(self, state: LedgerState, session_id: str) -> None:
        """Make ``state`` the ledger of ``session_id``, with that session's seal key.

        The key is an HMAC of the session id under the guard's secret: the
        same in every process that shares the secret, different for every
        session, and never written to a store or a saved ledger. A block
        sealed in one session never verifies in another.
        """
        state.session_id = session_id
        message = b"guardrail seal\0" + session_id.encode("utf-8", "surrogatepass")
        state.seal_key = hmac.new(self._secret, message, hashlib.sha256).digest()
        if self.has_secret:  # only then is the key the same in every worker and after a restart
            message = b"guardrail answers\0" + session_id.encode("utf-8", "surrogatepass")
            state.answer_key = hmac.new(self._secret, message, hashlib.sha256).digest()

    # -- opening and closing ------------------------------------------------------------------
    # Each sequence is written once, as steps (_Steps); each public method runs it with _run
    # or _run_async, which differ only by the awaited store call and the lock they hold.

    def open(self, session_id: str, given: Ledger | None) -> Ledger:
        """The live ledger of ``session_id``, brought up to date with the store.

        Every ``open`` is paired with a :meth:`close`, which writes and releases it.
        """
        return self._run(self._open(session_id, given))

    async def open_async(self, session_id: str, given: Ledger | None) -> Ledger:
        """:meth:`open` awaiting an asynchronous store; paired with :meth:`close_async`."""
        return await self._run_async(self._open(session_id, given))

    def close(self, session_id: str, ledger: Ledger) -> None:
        """Write what a scope changed as it ends, then release it (even if the write fails)."""
        self._run(self._close(session_id, ledger))

    async def close_async(self, session_id: str, ledger: Ledger) -> None:
        """:meth:`close` awaiting an :class:`~guardrail.stores.AsyncStore`."""
        await self._run_async(self._close(session_id, ledger))

    def _open(self, session_id: str, given: Ledger | None) -> _Steps[Ledger]:
        cached = self._hold(session_id)
        try:
            with (yield _LOCK, cached):
                if cached.ledger is None:
                    snapshot = yield "load", session_id
                    cached.ledger = self._loaded(session_id, given, cached, snapshot)
                else:
                    delta = yield "changes_since", session_id, cached.version
                    self._refreshed(session_id, cached, delta, given)
                return cached.ledger
        except BaseException:
            yield from self._release(session_id)
            raise

    def _release(self, session_id: str) -> _Steps[None]:
        """One scope of ``session_id`` ended; sessions over the cache bound are let go."""
        for sid, held in self._unhold(session_id):
            try:
                yield from self._write(sid, held)
            except SessionDeleted:
                pass  # deleted elsewhere: nothing to keep
            except Exception:
                continue  # kept, unwritten changes and all; the next scope's end writes them
            self._forget(sid, held)

    def _close(self, session_id: str, ledger: Ledger) -> _Steps[None]:
        try:
            cached = self._cache.get(session_id)
            if cached is not None and cached.ledger is ledger:
                yield from self._write(session_id, cached)
        finally:
            yield from self._release(session_id)

    def _write(self, session_id: str, cached: _Cached) -> _Steps[None]:
        """Write a cached ledger's unwritten changes as one Change; on failure none is lost."""
        with (yield _LOCK, cached):
            ledger = cached.ledger
            if ledger is None:
                return
            state = state_of(ledger)
            change, names = journal.take(state, cached.version)
            if not change:
                return
            try:
                written = yield "apply", session_id, change
            except SessionDeleted:
                self._discard(cached)
                raise
            except BaseException:
                journal.undo(state, names, change)
                raise
            journal.written(state, change)
            if written.alone:  # no one else wrote: the ledger is the session
                cached.version = written.version

    def _run(self, steps: _Steps[_T]) -> _T:
        """Take ``steps`` with the synchronous store: a usage error with an asynchronous one."""
        return _drive(self.sync_store(), steps)

    async def _run_async(self, steps: _Steps[_T]) -> _T:
        """Take ``steps`` awaiting an asynchronous store (with a synchronous one: :meth:`_run`)."""
        if not self.is_async:
            return self._run(steps)
        return await _drive_async(cast(AsyncStore, self.store), steps)

    def _hold(self, session_id: str) -> _Cached:
        """The cache entry of a session, one more scope holding it, most recently used."""
        with self._open_lock:
            self.ended.pop(session_id, None)
            cached = self._cache.get(session_id)
            if cached is None:
                cached = self._cache[session_id] = _Cached()
            else:
                self._cache.move_to_end(session_id)
            cached.scopes += 1
        return cached

    def _loaded(
        self, session_id: str, given: Ledger | None, cached: _Cached, snapshot: Snapshot | None
    ) -> Ledger:
        """A session's ledger as it is first used here: the stored one, ``given``, or a new one."""
        if snapshot is None:
            if given is None:
                ledger = self.new_ledger(session_id)
                journal.follow(state_of(ledger), all_of_it=False)
                return ledger
            ledger = given  # the store has nothing: the given ledger is the session, all unwritten
            state = state_of(ledger)
            if state.kinds is not self.kinds:  # keyed by this guard's normalisers from now on
                use_kinds(state, self.kinds)
            self.seal(state, session_id)
            journal.follow(state, all_of_it=True)
            return ledger
        ledger = self.new_ledger(session_id)
        journal.follow(state_of(ledger), all_of_it=False)
        journal.opened(state_of(ledger), snapshot, session_id, self.store)
        cached.version = snapshot.version
        if given is not None:
            ledger.merge(given)
        return ledger

    def _refreshed(
        self, session_id: str, cached: _Cached, delta: Snapshot | None, given: Ledger | None
    ) -> None:
        """Fold into the cached ledger what other writers wrote since it last caught up."""
        ledger = cached.ledger
        assert ledger is not None
        if delta is not None:
            records, meta = journal.checked(delta, session_id, self.store)
            deleted = delta.complete and cached.version > 0
            if deleted or (
                delta.complete and cached.scopes == 1 and not journal.unwritten(state_of(ledger))
            ):
                # Deleted (or started anew) elsewhere since this copy read it: the delete wins
                # over what this copy holds, unwritten changes too. Else (a copy that never read
                # the session) nothing here is lost.
                fresh = self.new_ledger(session_id)
                journal.follow(state_of(fresh), all_of_it=False)
                journal.load(state_of(fresh), records, meta)
                cached.ledger = ledger = fresh
            else:
                journal.catch_up(state_of(ledger), records, meta)
            cached.version = delta.version
        if given is not None and given is not ledger:
            ledger.merge(given)  # one ledger, which only grows

    def _unhold(self, session_id: str) -> list[tuple[str, _Cached]]:
        """One scope fewer; the sessions to let go (written first) to stay within the bound."""
        with self._open_lock:
            cached = self._cache.get(session_id)
            if cached is None:
                return []
            cached.scopes -= 1
            if cached.scopes <= 0 and cached.ledger is None:  # never loaded (the store failed)
                del self._cache[session_id]
            over = len(self._cache) - self.max_cached
            victims: list[tuple[str, _Cached]] = []
            if over > 0:
                for sid, held in self._cache.items():
                    if held.scopes <= 0 and held.ledger is not self._default:
                        victims.append((sid, held))
                        if len(victims) == over:
                            break
        return victims

    def _forget(self, session_id: str, cached: _Cached) -> None:
        """Drop a written session from the cache, unless a scope took it up meanwhile."""
        with self._open_lock:
            if cached.scopes <= 0 and self._cache.get(session_id) is cached:
                del self._cache[session_id]

    def _discard(self, cached: _Cached) -> None:
        """Drop a cached copy of a session deleted elsewhere: the next use reads the store anew.

        Scopes still open keep the old object, and write nothing of it when they end.
        """
        ledger = cached.ledger
        cached.ledger = None
        cached.version = 0
        with self._open_lock:
            if ledger is not None and ledger is self._default:
                state_of(ledger).after_change = None
                self._default = None

    def sync_store(self) -> Store:
        """The store, for a synchronous call: a usage error if it is an asynchronous one."""
        if self.is_async:
            raise GuardrailUsageError(
                "this guard's store is asynchronous: open sessions with `async with "
                "guard.session(id)` (and use ledger_for_async, end_session_async, "
                "expire_sessions_async); a synchronous call cannot wait for it"
            )
        return cast(Store, self.store)

    def _write_default(self) -> None:
        """Write the default session after a change to it: no scope's end will."""
        session_id = self.default_session
        cached = self._cache.get(session_id) if session_id is not None else None
        if session_id is None or cached is None or cached.ledger is not self._default:
            return
        try:
            self._run(self._write(session_id, cached))
        except Exception as failure:
            self.not_saved(session_id, failure)
            raise

    # -- handles without a scope -----------------------------------------------------------

    def ledger_for(self, session_id: str) -> Ledger:
        """The cached live ledger of a session, up to date with the store."""
        return self._run(self._ledger_for(session_id))

    async def ledger_for_async(self, session_id: str) -> Ledger:
        """:meth:`ledger_for` awaiting an :class:`~guardrail.stores.AsyncStore`."""
        return await self._run_async(self._ledger_for(session_id))

    def end(self, session_id: str, *, delete: bool) -> None:
        """Write a session and drop it from the cache; ``delete``: from the store too."""
        self._run(self._end(session_id, delete))

    async def end_async(self, session_id: str, *, delete: bool) -> None:
        """:meth:`end` awaiting an :class:`~guardrail.stores.AsyncStore`."""
        await self._run_async(self._end(session_id, delete))

    def expire(self, max_idle: float) -> list[str]:
        """Delete the sessions no one wrote for ``max_idle`` seconds, from the store and cache."""
        _check_idle(max_idle)
        return self._run(self._expire(float(max_idle)))

    async def expire_async(self, max_idle: float) -> list[str]:
        """:meth:`expire` awaiting an :class:`~guardrail.stores.AsyncStore`."""
        _check_idle(max_idle)
        return await self._run_async(self._expire(float(max_idle)))

    def _ledger_for(self, session_id: str) -> _Steps[Ledger]:
        ledger = yield from self._open(session_id, None)
        yield from self._release(session_id)
        return ledger

    def _end(self, session_id: str, delete: bool) -> _Steps[None]:
        cached = self._ending(session_id)
        if delete:
            yield "delete", session_id
        else:  # kept, in a new life: every worker refuses the approval requests of the old one
            ledger = yield from self._open(session_id, None)
            try:
                cached = self._cache.get(session_id)
                if cached is not None and cached.ledger is ledger:
                    state = state_of(ledger)
                    if cached.version or journal.unwritten(state):  # the store holds it, or will
                        renew(state)
                    yield from self._write(session_id, cached)
            finally:
                yield from self._release(session_id)
        self._ended(session_id, cached)

    def _expire(self, max_idle: float) -> _Steps[list[str]]:
        expired: list[str] = yield "expire", max_idle
        for session_id in expired:
            self._drop(session_id)
        return expired

    def _drop(self, session_id: str) -> None:
        """Forget the cached copy of a session the store deleted, writing nothing of it.

        A scope open on it now goes on with its ledger; its write at the end is
        refused (:class:`~guardrail.errors.SessionDeleted`): a deletion wins.
        """
        with self._open_lock:
            cached = self._cache.get(session_id)
        if cached is None:
            return
        with cached.lock:
            self._discard(cached)
        with self._open_lock:
            if cached.scopes <= 0 and self._cache.get(session_id) is cached:
                del self._cache[session_id]

    def _ending(self, session_id: str) -> _Cached | None:
        with self._open_lock:
            cached = self._cache.get(session_id)
            if cached is not None and cached.scopes > 0:
                raise GuardrailUsageError(
                    f"session {session_id!r} is still open in a `with guard.session(...)` "
                    "block; end it after the block"
                )
        return cached

    def _ended(self, session_id: str, cached: _Cached | None) -> None:
        with self._open_lock:
            self.ended[session_id] = None
            while len(self.ended) > _ENDED_KEPT:
                self.ended.popitem(last=False)
            if self._cache.get(session_id) is cached:
                self._cache.pop(session_id, None)
            default = self._default
            if default is not None and cached is not None and cached.ledger is default:
                state_of(default).after_change = None
                self._default = None

    def cached(self) -> list[str]:
        """The ids of the sessions cached now, least recently used first."""
        with self._open_lock:
            return list(self._cache)

    def current(self) -> LedgerState:
        """The ledger state of the innermost open scope, else the default session's."""
        state = self.var.get()
        if state is not None:
            return state
        if self.default_session is None:
            raise GuardrailUsageError(
                "a guarded call ran outside any session. Wrap each conversation in "
                "`with guard.session(conversation_id):` (or `async with`), or build the guard "
                "with Guard(default_session='default') for a single-conversation program."
            )
        default = self._default
        if default is None:
            # Opened as a scope that never ends: one live ledger, shared with any
            # `with guard.session(default_session)`, written after each change.
            default = self.open(self.default_session, None)
            state_of(default).after_change = self._write_default
            self._default = default
        return state_of(default)


class SessionScope:
    """``with guard.session(id) as ledger`` (or ``async with``): makes a ledger current.

    Scopes of one session id open at the same time (threads, tasks) share
    one ledger object. Each scope writes what changed to the guard's store as it ends;
    if the save fails while the block is already leaving by an exception,
    that exception goes on (the failure is logged and added as a note),
    else the :class:`~guardrail.errors.StoreError` is raised.
    """

    def __init__(self, sessions: Sessions, session_id: str, ledger: Ledger | None) -> None:
        self._sessions = sessions
        self.session_id = session_id
        self._given = ledger
        self._tokens: list[tuple[contextvars.Token[LedgerState | None], Ledger]] = []

    def __enter__(self) -> Ledger:
        ledger = self._sessions.open(self.session_id, self._given)
        self._tokens.append((self._sessions.var.set(state_of(ledger)), ledger))
        return ledger

    def __exit__(self, exc_type: object, exc: BaseException | None, traceback: object) -> None:
        token, ledger = self._tokens.pop()
        self._sessions.var.reset(token)
        try:
            self._sessions.close(self.session_id, ledger)
        except Exception as failure:  # never hide the exception the block ends by
            self._not_saved(failure, exc)

    async def __aenter__(self) -> Ledger:
        ledger = await self._sessions.open_async(self.session_id, self._given)
        self._tokens.append((self._sessions.var.set(state_of(ledger)), ledger))
        return ledger

    async def __aexit__(
        self, exc_type: object, exc: BaseException | None, traceback: object
    ) -> None:
        token, ledger = self._tokens.pop()
        self._sessions.var.reset(token)
        try:
            await self._sessions.close_async(self.session_id, ledger)
        except Exception as failure:
            self._not_saved(failure, exc)

    def _not_saved(self, failure: Exception, exc: BaseException | None) -> None:
        """A failed write: raised, unless the block already ends by an exception (noted on it)."""
        self._sessions.not_saved(self.session_id, failure)
        if exc is None:
            raise failure
        add_note = getattr(exc, "add_note", None)  # Python 3.11+
        if add_note is not None:
            add_note(f"guardrail: session {self.session_id!r} was not saved: {failure}")


def check_session_id(session_id: object) -> None:
    """Refuse a session id that is not a non-empty string."""
    if not isinstance(session_id, str) or not session_id:
        raise GuardrailUsageError("a session id is a non-empty string, e.g. a conversation id")


def _check_idle(max_idle: object) -> None:
    if isinstance(max_idle, bool) or not isinstance(max_idle, (int, float)) or max_idle < 0:
        raise GuardrailUsageError(f"max_idle is a number of seconds >= 0, not {max_idle!r}")
