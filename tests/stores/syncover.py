"""An asyncio store behind the sync protocol, so the conformance suite runs on it too."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from guardrail.stores import AsyncStore
from guardrail.stores.protocol import Change, Snapshot, Written

T = TypeVar("T")


class SyncOverAsync:
    """A sync :class:`~guardrail.stores.Store` that runs an async store on a loop thread of its own.

    ``build`` makes the async store; it is called on the loop, so a store
    whose client binds to the running loop binds to this one.
    """

    def __init__(self, build: Callable[[], AsyncStore]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

        async def make() -> AsyncStore:
            return build()

        self.store = self._run(make())

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=60)

    def __repr__(self) -> str:
        return repr(self.store)

    def load(self, session_id: str) -> Snapshot | None:
        return self._run(self.store.load(session_id))

    def apply(self, session_id: str, change: Change) -> Written:
        return self._run(self.store.apply(session_id, change))

    def changes_since(self, session_id: str, version: int) -> Snapshot | None:
        return self._run(self.store.changes_since(session_id, version))

    def delete(self, session_id: str) -> None:
        self._run(self.store.delete(session_id))

    def expire(self, max_idle: float) -> list[str]:
        return self._run(self.store.expire(max_idle))

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self.store.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()
