"""Loopback ports: find a free one, check whether one is taken.

Every server this package starts binds ``127.0.0.1`` only. A free port is found by binding port 0 and
reading back what the kernel chose; the port is released before the server binds it, so a race with
another process is possible but unlikely, and a port is never handed out twice by one process.
"""

from __future__ import annotations

import socket
import threading

LOOPBACK = "127.0.0.1"

_handed_out: set[int] = set()
_lock = threading.Lock()


def free_port() -> int:
    """Return a loopback TCP port that is free now and was not returned before by this process."""
    with _lock:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((LOOPBACK, 0))
                port = int(sock.getsockname()[1])
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise RuntimeError("no free loopback port found after 100 tries")


def port_in_use(port: int, host: str = LOOPBACK) -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0
