"""Redis stores: sessions shared by every worker process that reaches one Redis server.

Each session is three keys under one hash tag, ``{prefix:session}``, so a
Redis Cluster keeps them on one node and a script may touch all three:

- ``{prefix:session}:s``, a hash: ``version``, ``created``, ``written``
  (server time of the last write, in microseconds), ``meta`` (JSON) and
  ``meta_version``;
- ``{prefix:session}:r``, a hash of record name -> record JSON;
- ``{prefix:session}:z``, a sorted set of record name -> the version that wrote it,
  so "what changed since version v" is one range read.

Writes and reads are Lua scripts, each one atomic and one round trip. A
write whose records (or meta) another writer changed since the writer's
base version is not applied: the script returns the rows at stake, the
store merges them with :func:`~guardrail.stores.merge_record` (the one merge
rule every store follows) and sends the merged change again, based on the
version it just saw. So a record costs one round trip, and two when it
meets a concurrent writer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, Union

from guardrail._data.rows import from_row, is_row
from guardrail.errors import GuardrailUsageError, StoreError
from guardrail.stores._json import decode_rows, encode_record, has_surrogates
from guardrail.stores._redis_lua import APPLY, CHANGES, DELETE, EXPIRE
from guardrail.stores._steps import Steps, run, run_async
from guardrail.stores.protocol import (
    Change,
    Meta,
    Record,
    Snapshot,
    Written,
    checked_ttl,
    damaged,
    deleted,
    merge_meta,
    merge_record,
)

try:
    import redis
    import redis.asyncio
except ImportError as exc:  # pragma: no cover - exercised by a test with redis hidden
    raise ImportError(
        f"RedisStore needs the redis client ({exc}): pip install 'guardrail-ids[redis]'"
    ) from exc

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript, Script

_SyncClient = Union["redis.Redis", "redis.RedisCluster"]
_AsyncClient = Union["redis.asyncio.Redis", "redis.asyncio.RedisCluster"]

# A session's hash, records, versions and mark.
_Keys = tuple[str | bytes, str | bytes, str | bytes, str | bytes]
_DELETED = (b"deleted", "deleted")  # the apply script's answer to a change of a deleted session
_LOST = (b"lost", "lost")  # the scripts' answer for a session whose acknowledged writes are gone
#: How long a deleted (or expired) session's mark is kept: a session missing without it, that
#: a worker had read, lost its writes (a server restarted without persistence).
DELETE_MARK_MS = 7 * 24 * 3600 * 1000
_MAX_ATTEMPTS = 100  # rounds of merge-and-retry before a write gives up (each one progresses)


#: How long a store's own client waits for Redis: each command, and each connection.
SOCKET_TIMEOUT, CONNECT_TIMEOUT = 5.0, 3.0
_ASYNC_CLIENTS = (redis.asyncio.Redis, redis.asyncio.RedisCluster)
_Store = TypeVar("_Store", bound="_RedisBase")


def _text(value: bytes | str) -> str:
    # surrogatepass: a name or key written by _wire reads back as the text it was.
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else value


def _wire(text: str) -> str | bytes:
    """A key or record name as sent: text, or the bytes of text holding a lone surrogate.

    The client encodes text as strict UTF-8, which refuses a lone surrogate
    (half an emoji a JSON request cut off); its ``surrogatepass`` bytes are
    what no valid text encodes to, so they name no other session or id.
    """
    return text.encode("utf-8", "surrogatepass") if has_surrogates(text) else text


class _RedisBase:
    """What the sync and the asyncio store share: the client, keys, arguments, merging, errors."""

    #: The client class :meth:`_from_url` builds; the error for a client of the other kind.
    _client_class: ClassVar[type[Any]]
    _wrong_client: ClassVar[str]

    def __init__(
        self,
        client: Any,
        *,
        prefix: str,
        ttl: float | None,
        replicas: int = 0,
        replica_timeout: float = 1.0,
    ) -> None:
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise GuardrailUsageError(
                f"replicas is how many replicas must hold a write before it counts as done "
                f"(an int >= 0), not {replicas!r}"
            )
        if isinstance(replica_timeout, bool) or not isinstance(replica_timeout, (int, float)):
            raise GuardrailUsageError(f"replica_timeout is seconds > 0, not {replica_timeout!r}")
        if not 0 < replica_timeout < math.inf:
            raise GuardrailUsageError(f"replica_timeout is seconds > 0, not {replica_timeout!r}")
        self.replicas = replicas
        self.replica_timeout = float(replica_timeout)
        if not isinstance(prefix, str) or not prefix or set(prefix) & set("{}:*?[]\\"):
            # A session's keys are "{prefix:session}:...": a prefix with ':' could name another
            # prefix's sessions, one with braces would cut the hash tag short.
            raise GuardrailUsageError(
                f"prefix must be a non-empty name without any of {{ }} : * ? [ ] \\, not "
                f"{prefix!r}: it starts every key of the store's sessions, inside their hash tag"
            )
        self.prefix = prefix
        self.ttl = checked_ttl(ttl, "no one used")
        self._ttl_ms = 0 if self.ttl is None else max(1, round(self.ttl * 1000))
        # The sync store refuses an asyncio client, the asyncio store takes nothing else.
        if isinstance(client, _ASYNC_CLIENTS) is not issubclass(self._client_class, _ASYNC_CLIENTS):
            raise GuardrailUsageError(self._wrong_client)
        self._client = client
        self._owns_client = False
        self._apply = client.register_script(APPLY)
        self._changes = client.register_script(CHANGES)
        self._expire = client.register_script(EXPIRE)
        self._delete = client.register_script(DELETE)

    @classmethod
    def _from_url(
        cls: type[_Store],
        url: str,
        prefix: str,
        ttl: float | None,
        options: dict[str, Any],
        **replication: Any,
    ) -> _Store:
        """A store with a client of its own for ``url``; socket timeouts set unless given."""
        options = {
            "socket_timeout": SOCKET_TIMEOUT,
            "socket_connect_timeout": CONNECT_TIMEOUT,
            **options,
        }
        client = cls._client_class.from_url(url, **options)
        store = cls(client, prefix=prefix, ttl=ttl, **replication)
        store._owns_client = True
        return store

    # -- keys and arguments ---------------------------------------------------------------

    def _keys(self, session_id: str) -> _Keys:
        """The session hash, records hash, versions set and mark of ``session_id``, one hash tag."""
        if not isinstance(session_id, str):
            raise GuardrailUsageError(f"a session id is a string, not {session_id!r}")
        tag = f"{{{self.prefix}:{session_id}}}"
        return (_wire(f"{tag}:s"), _wire(f"{tag}:r"), _wire(f"{tag}:z"), _wire(f"{tag}:m"))

    def _session_of(self, key: bytes | str) -> str:
        """The session id a session hash key names."""
        return _text(key)[len(self.prefix) + 2 : -3]

    @staticmethod
    def _name(record: Record) -> str:
        """A record's field name: its kind and key, length-prefixed so no two collide."""
        kind, key = record["kind"], record["key"]
        return f"{len(kind)}:{kind}{key}"

    def _encode(
        self, session_id: str, change: Change
    ) -> tuple[dict[str, Record], list[str | bytes]]:
        """The change's records by name, and the script's arguments: nothing sent if one is bad."""
        try:
            records = {self._name(record): record for record in change.records}
            args = self._args(change.base, records, change.meta, change.pruned, change.base)
        except GuardrailUsageError:
            raise
        except (TypeError, ValueError, KeyError) as exc:
            raise StoreError(
                f"{self._where()}: session {session_id!r} was not written: a record or the meta "
                f"cannot be stored as JSON ({exc}); nothing of the change was written",
                session_id=session_id,
            ) from exc
        if len(records) != len(change.records):
            raise GuardrailUsageError(
                "a change holds at most one record per (kind, key); merge them before applying"
            )
        return records, args

    def _merged(
        self,
        session_id: str,
        change: Change,
        originals: Mapping[str, Record],
        sending: tuple[dict[str, Record], Meta | None],
        stake: Sequence[Any],
    ) -> tuple[dict[str, Record], Meta | None]:
        """What to send again: rows at stake merged anew with the change's own, the rest kept.

        A row at stake is merged with the record the change brought, not with what
        an earlier attempt merged: the held row already holds what should survive of
        the rows before it (a writer that replaced one had seen it).
        """
        records, meta = dict(sending[0]), sending[1]
        for i in range(0, len(stake), 2):
            name, row = _text(stake[i]), stake[i + 1]
            if name == "":
                held_meta = self._parse(session_id, row, "the meta")
                assert change.meta is not None  # the script asks about the meta only when sent
                meta = merge_meta(held_meta, change.meta, concurrent=True)
            else:
                held = self._parse(session_id, row, f"record {name!r}", record=True)
                records[name] = merge_record(held, originals[name], concurrent=True)
        return records, meta

    def _args(
        self,
        base: int,
        records: Mapping[str, Record],
        meta: Meta | None,
        pruned: Sequence[tuple[str, str]] = (),
        own_base: int = 0,
    ) -> list[str | bytes]:
        # Lone surrogates are escaped (json.dumps writes ASCII, encode_record escapes them).
        args: list[str | bytes] = [str(base), str(self._ttl_ms), "", str(len(pruned)), "0"]
        if meta is not None:
            args[2] = json.dumps(meta, separators=(",", ":"))
        args[4] = str(own_base)
        args += [_wire(self._name({"kind": kind, "key": key})) for kind, key in pruned]
        for name, record in records.items():
            args += (_wire(name), encode_record(record))
        return args

    def _applying(self, session_id: str, change: Change) -> Steps[Written]:
        """apply, for both stores: yields each run of the apply script (for ``_call``).

        Rows another writer changed since the base come back unwritten: they
        are merged here by the protocol's rule and the change sent again,
        based on the version the script saw.
        """
        keys = self._keys(session_id)
        originals, args = self._encode(session_id, change)
        records, meta = originals, change.meta
        for attempt in range(_MAX_ATTEMPTS):
            reply = yield self._apply, session_id, "written", keys, args
            if reply[1] in _DELETED:
                raise deleted(self._where(), session_id)
            if reply[1] in _LOST:
                raise self._lost(session_id)
            if not isinstance(reply[1], list):  # written; a merge means someone else wrote
                if self.replicas:
                    wait = (self.replicas, max(1, round(self.replica_timeout * 1000)))
                    held = yield self._wait_replicas, session_id, "written", keys, wait
                    if int(held) < self.replicas:
                        raise self._unreplicated(session_id, int(held))
                return Written(int(reply[0]), attempt == 0 and reply[1] == 1)
            records, meta = self._merged(session_id, change, originals, (records, meta), reply[1])
            args = self._args(int(reply[0]), records, meta, change.pruned, change.base)
        raise StoreError(
            f"{self._where()}: session {session_id!r} was not written: other writers changed "
            f"it {_MAX_ATTEMPTS} times while this change was merged; retry",
            session_id=session_id,
        )

    # -- replies --------------------------------------------------------------------------

    def _parse(
        self, session_id: str, row: bytes | str | None, what: str, *, record: bool = False
    ) -> dict[str, Any]:
        """A stored JSON object (or row, for a ``record``); else a StoreError naming the session."""
        if row is None:
            raise self._corrupt(session_id, f"{what} is missing from the records hash")
        try:
            value = json.loads(row)
        except ValueError as exc:
            raise self._corrupt(session_id, f"{what} is not JSON ({exc})") from None
        if record and is_row(value):
            return from_row(value)  # type: ignore[no-any-return]
        if not isinstance(value, dict):
            raise self._corrupt(session_id, f"{what} is {type(value).__name__}, not an object")
        return value

    def _snapshot(self, session_id: str, reply: Sequence[Any], since: int) -> Snapshot | None:
        """A changes script's reply as the protocol's answer to changes_since(since)."""
        if len(reply) == 2 and reply[1] in _LOST:
            raise self._lost(session_id)
        version = int(reply[0])
        if version == 0:
            return None if since == 0 else Snapshot(0)
        if len(reply) == 1:
            return None
        complete, meta_row, rows = bool(reply[1]), reply[2], reply[3]
        try:  # each row alone, by the fast parser
            records: Sequence[Record] = decode_rows(rows)
        except ValueError:  # the row at fault, named
            records = [self._parse(session_id, row, "a record", record=True) for row in rows]
        meta = None if meta_row is None else self._parse(session_id, meta_row, "the meta")
        return Snapshot(version, records, meta, complete)

    # -- a whole session, read without a script ------------------------------------------------

    def _reads_in_a_transaction(self) -> bool:
        """Whether :meth:`load` may read with MULTI/EXEC (a cluster client: the script)."""
        return not isinstance(self._client, (redis.RedisCluster, redis.asyncio.RedisCluster))

    def _queue_load(self, pipe: Any, keys: _Keys) -> None:
        """A whole session's read, queued in one MULTI/EXEC: atomic as the script is.

        The changes script builds every row into a Lua table before it
        answers; plain commands send them as they are, in a third of the time
        at 10,000 records.
        """
        session, records, versions, mark = keys
        pipe.hmget(session, "version", "created", "meta")
        pipe.hlen(records)
        pipe.zcard(versions)
        pipe.hvals(records)
        pipe.get(mark)
        if self._ttl_ms:  # each use starts the count again, as the script does
            for key in keys[:3]:
                pipe.pexpire(key, self._ttl_ms)

    def _loaded(
        self,
        session_id: str,
        keys: _Keys,
        replies: Sequence[Any],
    ) -> Snapshot | None:
        """:meth:`_queue_load`'s replies as the whole session, or None.

        Checked as the script checks them, with the same errors.
        """
        (version, created, meta_row), count, written, rows, mark = replies[:5]
        if mark in _LOST:
            raise self._lost(session_id)
        if version is None:
            return None
        for name, value in (("version", version), ("created", created)):
            try:
                int(value)
            except (TypeError, ValueError):
                problem = f"guardrail: {name} of {_text(keys[0])} is not a number"
                raise self._failed("read", session_id, redis.ResponseError(problem)) from None
        if count != written:  # both are written by every write: a short hash is damage
            problem = f"guardrail: the records of {_text(keys[0])} are missing"
            raise self._failed("read", session_id, redis.ResponseError(problem))
        return self._snapshot(session_id, [version, 1, meta_row, rows], 0)

    # -- errors ---------------------------------------------------------------------------

    def _where(self) -> str:
        """The store as a message names it: its class, server and prefix."""
        pool = getattr(self._client, "connection_pool", None)
        options = getattr(pool, "connection_kwargs", {}) if pool is not None else {}
        if "path" in options:
            server = f"unix:{options['path']}"
        elif "host" in options:
            server = f"{options['host']}:{options.get('port', 6379)}/{options.get('db', 0)}"
        else:
            server = "its Redis server"
        return f"{type(self).__name__} at {server} (prefix {self.prefix!r})"

    def _failed(self, action: str, session_id: str | None, exc: Exception) -> StoreError:
        """A Redis error as a StoreError that names the store, the session and what to do."""
        what = "sessions" if session_id is None else f"session {session_id!r}"
        if isinstance(exc, redis.ResponseError) and "guardrail:" in str(exc):
            advice = (
                f"the stored session is damaged: {exc}; delete it (store.delete(session_id)) "
                "or restore it from a backup"
            )
        elif isinstance(exc, (redis.exceptions.AskError, redis.exceptions.TryAgainError)) or (
            isinstance(exc, redis.ResponseError) and str(exc).startswith("CLUSTERDOWN")
        ):
            advice = (
                f"the server answered with a Redis Cluster redirect ({type(exc).__name__}: {exc}): "
                "it is a node of a cluster, and a plain redis.Redis client does not follow "
                "redirects. Build the store on a cluster client: "
                "RedisStore(redis.RedisCluster(host=..., port=...)), or "
                "AsyncRedisStore(redis.asyncio.RedisCluster(...)) for asyncio"
            )
        elif isinstance(exc, redis.TimeoutError):
            advice = (
                f"Redis did not answer within the client's timeout ({exc}: socket_timeout, or "
                "socket_connect_timeout while connecting); check the server, then retry (the "
                "ledger in memory is intact)"
            )
            if action == "written":
                advice += (
                    ". The write may have been applied or not (the server may run it after "
                    "the client gave up): the ledger in memory keeps the change and sends it "
                    "again, and the next read of the session settles it"
                )
        elif isinstance(exc, redis.ConnectionError):
            advice = (
                f"Redis is not reachable: {exc}; check that the server is running and "
                "reachable, then retry (the ledger in memory is intact)"
            )
        else:
            advice = f"Redis failed: {exc}; retry, and check the server's log"
        return StoreError(
            f"{self._where()}: {what} was not {action}: {advice}", session_id=session_id
        )

    def _corrupt(self, session_id: str, problem: str) -> StoreError:
        return damaged(self._where(), session_id, problem)

    def _wait_replicas(self, keys: _Keys, args: tuple[int, int]) -> Any:
        """WAIT on the server holding ``keys``: how many replicas hold the writes before it."""
        if isinstance(self._client, (redis.RedisCluster, redis.asyncio.RedisCluster)):
            node = self._client.get_node_from_key(_text(keys[0]))
            return self._client.execute_command("WAIT", *args, target_nodes=node)
        return self._client.execute_command("WAIT", *args)

    def _unreplicated(self, session_id: str, held: int) -> StoreError:
        """The error of a write that fewer replicas than asked for acknowledged in time."""
        return StoreError(
            f"{self._where()}: session {session_id!r} was written on the master, but only "
            f"{held} of the {self.replicas} replicas asked for (replicas=) acknowledged it "
            f"within {self.replica_timeout:g}s (replica_timeout=): a failover now could lose "
            "it, so it does not count as done. The ledger in memory keeps the change and "
            "sends it again; check the replicas and their link to the master",
            session_id=session_id,
        )

    def _lost(self, session_id: str) -> StoreError:
        """The error of a session whose acknowledged writes Redis no longer holds."""
        return StoreError(
            f"{self._where()}: session {session_id!r} cannot be used: writes were lost. Redis "
            "no longer holds writes it acknowledged (the session is behind a version a worker "
            "wrote or read, or gone although no one deleted it): the server restarted without "
            "persistence, or a replica that was behind took over. No worker allows or records "
            "anything on this session until an operator acknowledges the loss by deleting it "
            "(store.delete(session_id), or guard.end_session(session_id, delete=True)), which "
            "starts the conversation over; give Redis an append-only file and replicas to "
            "wait for (docs/stores.md, Redis persistence)",
            session_id=session_id,
        )


class RedisStore(_RedisBase):
    """Sessions in Redis, shared by every worker process and machine that reaches it.

    Built from a ``redis.Redis`` (or ``redis.RedisCluster``) client, or from
    a URL with :meth:`from_url`. Each session's keys share the hash tag
    ``{prefix:session_id}``, so they stay on one node of a cluster. With
    ``ttl``, Redis drops a session no one used for ``ttl`` seconds (each
    read or write starts the count again). Every change is applied
    atomically by a script: a check of a cached, up-to-date session is one
    round trip, a record one (two when another worker wrote the same ids
    meanwhile: their rows are merged, never overwritten). A server that
    cannot be reached, or a session holding data that is not what the store
    wrote, is a :class:`~guardrail.errors.StoreError`.

    With ``replicas=N``, a write counts as done only once N replicas hold it
    (Redis's ``WAIT``, up to ``replica_timeout`` seconds); fewer is a
    StoreError, and the guard keeps the change to send again. A session whose
    acknowledged writes Redis no longer holds (a restart without persistence,
    a failover to a replica that was behind) is a StoreError saying writes
    were lost, for every worker, until it is deleted.
    """

    _client_class = redis.Redis
    _wrong_client = (
        "RedisStore takes a redis.Redis client; for a redis.asyncio client use AsyncRedisStore"
    )
    _apply: Script
    _changes: Script
    _expire: Script
    _delete: Script

    def __init__(
        self,
        client: _SyncClient,
        *,
        prefix: str = "guardrail",
        ttl: float | None = None,
        replicas: int = 0,
        replica_timeout: float = 1.0,
    ) -> None:
        super().__init__(
            client, prefix=prefix, ttl=ttl, replicas=replicas, replica_timeout=replica_timeout
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = "guardrail",
        ttl: float | None = None,
        replicas: int = 0,
        replica_timeout: float = 1.0,
        **options: Any,
    ) -> RedisStore:
        """A store with a client of its own for ``url`` (``redis://host:6379/0``), closed by close.

        ``options`` go to ``redis.Redis.from_url``. The client gives up on a server
        that does not answer: ``socket_timeout`` (each command, 5 s unless given) and
        ``socket_connect_timeout`` (3 s) are set explicitly, never left unbounded.
        """
        return cls._from_url(
            url, prefix, ttl, options, replicas=replicas, replica_timeout=replica_timeout
        )

    @property
    def client(self) -> _SyncClient:
        """The Redis client the store uses."""
        return self._client  # type: ignore[no-any-return]

    def load(self, session_id: str) -> Snapshot | None:
        """The whole session, or None."""
        if not self._reads_in_a_transaction():
            return self.changes_since(session_id, 0)
        keys = self._keys(session_id)
        try:
            with self._client.pipeline(transaction=True) as pipe:
                self._queue_load(pipe, keys)
                replies = pipe.execute()
        except redis.RedisError as exc:
            raise self._failed("read", session_id, exc) from exc
        return self._loaded(session_id, keys, replies)

    def apply(self, session_id: str, change: Change) -> Written:
        """Write ``change`` atomically, merging rows other writers wrote since ``change.base``."""
        return run(self._applying(session_id, change), self._call)

    def changes_since(self, session_id: str, version: int) -> Snapshot | None:
        """None if the session is still at ``version``; else what was written since."""
        keys = self._keys(session_id)
        reply = self._call(self._changes, session_id, "read", keys, (version, self._ttl_ms))
        return self._snapshot(session_id, reply, version)

    def _call(self, script: Script, session_id: str, action: str, keys: _Keys, args: Any) -> Any:
        """A script's reply; a Redis error is a StoreError saying the session was not ``action``."""
        try:
            return script(keys=keys, args=args)
        except redis.RedisError as exc:
            raise self._failed(action, session_id, exc) from exc

    def delete(self, session_id: str) -> None:
        """Forget a session."""
        try:
            self._delete(keys=self._keys(session_id), args=(DELETE_MARK_MS,))
        except redis.RedisError as exc:
            raise self._failed("deleted", session_id, exc) from exc

    def expire(self, max_idle: float) -> list[str]:
        """Delete the sessions no one wrote for ``max_idle`` seconds; their ids."""
        gone = []
        try:
            for key in self._client.scan_iter(match=f"{{{self.prefix}:*}}:s", count=1000):
                session_id = self._session_of(key)
                if self._expire(keys=self._keys(session_id), args=(max_idle, DELETE_MARK_MS)):
                    gone.append(session_id)
        except redis.RedisError as exc:
            raise self._failed("expired", None, exc) from exc
        return gone

    def close(self) -> None:
        """Close the client if the store made it (from_url); a client passed in stays open."""
        if self._owns_client:
            self._client.close()

    def __repr__(self) -> str:
        return f"<{self._where()}>"


class AsyncRedisStore(_RedisBase):
    """:class:`RedisStore` for asyncio, on a ``redis.asyncio.Redis`` client; the same keys.

    A sync and an async store with the same prefix on one server share
    their sessions.
    """

    _client_class = redis.asyncio.Redis
    _wrong_client = (
        "AsyncRedisStore takes a redis.asyncio.Redis client; for a redis.Redis client use "
        "RedisStore"
    )
    _apply: AsyncScript
    _changes: AsyncScript
    _expire: AsyncScript
    _delete: AsyncScript

    def __init__(
        self,
        client: _AsyncClient,
        *,
        prefix: str = "guardrail",
        ttl: float | None = None,
        replicas: int = 0,
        replica_timeout: float = 1.0,
    ) -> None:
        super().__init__(
            client, prefix=prefix, ttl=ttl, replicas=replicas, replica_timeout=replica_timeout
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = "guardrail",
        ttl: float | None = None,
        replicas: int = 0,
        replica_timeout: float = 1.0,
        **options: Any,
    ) -> AsyncRedisStore:
        """A store with an asyncio client of its own for ``url``, closed by close().

        Timeouts as :meth:`RedisStore.from_url` sets them.
        """
        return cls._from_url(
            url, prefix, ttl, options, replicas=replicas, replica_timeout=replica_timeout
        )

    @property
    def client(self) -> _AsyncClient:
        """The Redis client the store uses."""
        return self._client  # type: ignore[no-any-return]

    async def load(self, session_id: str) -> Snapshot | None:
        """The whole session, or None."""
        if not self._reads_in_a_transaction():
            return await self.changes_since(session_id, 0)
        keys = self._keys(session_id)
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                self._queue_load(pipe, keys)
                replies = await pipe.execute()
        except redis.RedisError as exc:
            raise self._failed("read", session_id, exc) from exc
        return self._loaded(session_id, keys, replies)

    async def apply(self, session_id: str, change: Change) -> Written:
        """Write ``change`` atomically, merging rows other writers wrote since ``change.base``."""
        return await run_async(self._applying(session_id, change), self._call)

    async def changes_since(self, session_id: str, version: int) -> Snapshot | None:
        """None if the session is still at ``version``; else what was written since."""
        keys = self._keys(session_id)
        reply = await self._call(self._changes, session_id, "read", keys, (version, self._ttl_ms))
        return self._snapshot(session_id, reply, version)

    async def _call(
        self, script: AsyncScript, session_id: str, action: str, keys: _Keys, args: Any
    ) -> Any:
        """:meth:`RedisStore._call`, awaited."""
        try:
            return await script(keys=keys, args=args)
        except redis.RedisError as exc:
            raise self._failed(action, session_id, exc) from exc

    async def delete(self, session_id: str) -> None:
        """Forget a session."""
        try:
            await self._delete(keys=self._keys(session_id), args=(DELETE_MARK_MS,))
        except redis.RedisError as exc:
            raise self._failed("deleted", session_id, exc) from exc

    async def expire(self, max_idle: float) -> list[str]:
        """Delete the sessions no one wrote for ``max_idle`` seconds; their ids."""
        gone = []
        try:
            async for key in self._client.scan_iter(match=f"{{{self.prefix}:*}}:s", count=1000):
                session_id = self._session_of(key)
                if await self._expire(keys=self._keys(session_id), args=(max_idle, DELETE_MARK_MS)):
                    gone.append(session_id)
        except redis.RedisError as exc:
            raise self._failed("expired", None, exc) from exc
        return gone

    async def close(self) -> None:
        """Close the client if the store made it (from_url); a client passed in stays open."""
        if self._owns_client:
            await self._client.aclose()

    def __repr__(self) -> str:
        return f"<{self._where()}>"
