"""A TCP relay a test can cut: a real network outage between a service and its database.

``Relay(host, port)`` listens on a free local port and forwards every connection to
``host:port``.  :meth:`Relay.cut` closes every relayed connection and refuses new ones until
:meth:`Relay.restore` (what a client sees when the database restarts or the network drops).
"""

from __future__ import annotations

import contextlib
import socket
import threading


class Relay:
    """Forwards connections from a local port to ``host:port`` until cut or closed."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        self.accepted = 0
        self.refused = 0
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    def cut(self) -> None:
        """Close every relayed connection and refuse new ones."""
        with self._lock:
            self._cut = True
            sockets, self._open = self._open, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def restore(self) -> None:
        """Relay new connections again."""
        with self._lock:
            self._cut = False

    def close(self) -> None:
        """Cut and stop listening."""
        self.cut()
        self._closed = True
        self._server.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                refuse = self._cut
            if refuse:
                self.refused += 1
                client.close()
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            self.accepted += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.difference_update((src, dst))
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
