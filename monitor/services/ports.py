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


def free_port(below: int = 65536) -> int:
    """Return a loopback TCP port that is free now, below ``below`` (a base port others are derived from,
    such as a Redis Cluster node's bus port, ``port + 10000``), and was not returned before by this
    process."""
    with _lock:
        for _ in range(1000):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((LOOPBACK, 0))
                port = int(sock.getsockname()[1])
            if port not in _handed_out and port < below:
                _handed_out.add(port)
                return port
    raise RuntimeError(f"no free loopback port below {below} found after 1000 tries")


def port_in_use(port: int, host: str = LOOPBACK) -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0
