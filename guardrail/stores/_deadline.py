"""A deadline on a call that waits for a server: past it, the connection's socket is shut down.

A server-side timeout cannot fire when the server never sees the query (a
firewall dropping packets, a dead peer), and a client library blocked in
``poll`` on its socket waits for as long as TCP does, which is minutes. Shutting
the socket down wakes it at once, whatever it waits in (a thread's ``poll`` or
an event loop's reader): the read ends, the client sees a lost connection, and
its pool discards it. The call's error then says the deadline passed
(:attr:`Watch.fired`).

:class:`Watchdog` does it for threads (one thread a store, started on first
use); :func:`watch_async` for asyncio (a timer on the running loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator


class Watch:
    """One call being watched: its deadline, how to reach its socket, and whether it fired."""

    __slots__ = ("deadline", "fileno", "fired")

    def __init__(self, deadline: float, fileno: Callable[[], int]) -> None:
        self.deadline = deadline
        self.fileno = fileno
        self.fired = False

    def cut(self) -> None:
        """Shut the socket down (both ways): whatever waits on it wakes with the connection lost."""
        self.fired = True
        # A duplicate descriptor: shutting it down ends the connection for every descriptor
        # of the socket, and closing it leaves the client's own open. Already closed: nothing
        # waits on it.
        with (
            contextlib.suppress(Exception),
            socket.socket(fileno=os.dup(self.fileno())) as sock,
        ):
            sock.shutdown(socket.SHUT_RDWR)


class Watchdog:
    """Cuts the connection of any call still running past its deadline: one thread for all.

    Every call waits the same number of seconds, so a call registered later never
    has an earlier deadline than one already watched: the thread sleeps until the
    earliest, and is woken only when it had nothing to watch.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._condition = threading.Condition()
        self._watched: set[Watch] = set()
        self._thread: threading.Thread | None = None
        self._stopped = False

    @contextlib.contextmanager
    def watching(
        self, seconds: float, fileno: Callable[[], int], close: Callable[[], object]
    ) -> Iterator[Watch]:
        """Watch the block: if it runs past ``seconds``, the socket ``fileno()`` is shut down.

        A block that ended well although the cut came (just as its answer did) calls
        ``close``: its connection must not go back to a pool that would hand it out.
        """
        watch = Watch(time.monotonic() + seconds, fileno)
        with self._condition:
            if self._thread is None or not self._thread.is_alive() or self._stopped:
                # first use, after stop(), or in a forked child (threads are not forked)
                self._stopped = False
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            if not self._watched:
                self._condition.notify()
            self._watched.add(watch)
        try:
            yield watch
        finally:
            # Under the lock: a cut in progress ends before the connection goes back to its pool.
            with self._condition:
                self._watched.discard(watch)
        if watch.fired:
            close()

    def stop(self) -> None:
        """End the thread (a later call starts it again)."""
        with self._condition:
            self._stopped = True
            self._condition.notify()

    def _run(self) -> None:
        with self._condition:
            while not self._stopped and self._thread is threading.current_thread():
                now = time.monotonic()
                for watch in [w for w in self._watched if w.deadline <= now]:
                    self._watched.discard(watch)
                    watch.cut()
                wait = min((w.deadline for w in self._watched), default=None)
                self._condition.wait(None if wait is None else wait - now)


@contextlib.asynccontextmanager
async def watch_async(
    seconds: float, fileno: Callable[[], int], close: Callable[[], Awaitable[object]]
) -> AsyncIterator[Watch]:
    """:meth:`Watchdog.watching` for asyncio: a timer on the running loop does the cut."""
    watch = Watch(time.monotonic() + seconds, fileno)
    timer = asyncio.get_running_loop().call_later(seconds, watch.cut)
    try:
        yield watch
    finally:
        timer.cancel()
    if watch.fired:
        await close()
