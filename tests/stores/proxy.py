"""A TCP proxy to a real server that a test can stop: the server "goes away" for one client."""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class Proxy:
    """Forwards ``127.0.0.1:port`` to ``host:target``; :meth:`stop` closes every connection.

    Use as a context manager. After ``stop`` the port refuses connections, as
    a stopped server's does, while the real server goes on serving others.
    :meth:`stall` makes the network silent instead (a firewall dropping packets,
    a dead peer): bytes are taken and held, nothing is refused or closed, until
    :meth:`resume` delivers them.
    """

    def __init__(self, host: str, target: int) -> None:
        self._target = (host, target)
        self._flowing = threading.Event()
        self._flowing.set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # stopped
            try:
                server = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += (client, server)
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def stall(self) -> None:
        """Hold every byte from now on, both ways, without a word to either end."""
        self._flowing.clear()

    def resume(self) -> None:
        """Deliver what was held, and forward again."""
        self._flowing.set()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self._flowing.wait()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        """Close the port and every connection through it."""
        self._flowing.set()  # a held pump wakes, and finds its sockets closed
        # Shut down first: it wakes the accepting thread, which a plain close() leaves listening.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def __enter__(self) -> Proxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class Silent:
    """A server that accepts connections and never answers: a stalled process, a black hole.

    Use as a context manager; ``port`` is where it listens on 127.0.0.1.
    """

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._held.append(client)  # kept open, never read from or written to

    def __enter__(self) -> Silent:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for sock in self._held:
            sock.close()
