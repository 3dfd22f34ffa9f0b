"""Free-port picking on the loopback interface.

A port is handed out only if nothing listens on it when asked, and never twice by the same
process: two servers started one after the other before either binds must not get the same
port.
"""

from __future__ import annotations

import socket
import threading

from sagacity.errors import DevStackError, PortInUseError

HOST = "127.0.0.1"

_lock = threading.Lock()
_handed_out: set[int] = set()


def port_is_free(port: int, host: str = HOST) -> bool:
    """Whether ``port`` can be bound on ``host`` right now (nothing listens on it).

    Asked with ``SO_REUSEADDR``, as the servers bind: connections a stopped server left in
    TIME_WAIT do not keep it off its own port when it restarts; only a listener does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def port_answers(port: int, host: str = HOST, timeout: float = 0.5) -> bool:
    """Whether a TCP connection to ``host:port`` is accepted."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def pick_free_port(*, avoid: frozenset[int] = frozenset(), attempts: int = 50) -> int:
    """Return a port free on 127.0.0.1 that this process has not handed out before.

    Args:
        avoid: further ports not to return (for example ports recorded for another server).
        attempts: how many ports the kernel is asked for before giving up.

    Raises:
        DevStackError: no suitable port was found.
    """
    with _lock:
        for _ in range(attempts):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((HOST, 0))
                port = int(sock.getsockname()[1])
            if port in _handed_out or port in avoid:
                continue
            _handed_out.add(port)
            return port
    raise DevStackError(f"no free port found on {HOST} after {attempts} attempts")


def claim_port(port: int) -> int:
    """Check that an explicitly requested ``port`` is free and record it as handed out.

    Raises:
        PortInUseError: something listens on ``port``.
    """
    if not port_is_free(port):
        raise PortInUseError(port)
    with _lock:
        _handed_out.add(port)
    return port
