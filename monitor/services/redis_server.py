"""``redis-server`` (the Debian package) on its own loopback port, with append-only-file persistence.

The configuration binds 127.0.0.1 only, keeps protected mode on, turns the AOF on (``appendfsync
everysec``, Redis's recommended trade-off) and RDB snapshots off, so what survives a restart is what the
AOF kept. Readiness is a RESP ``PING`` answered by ``+PONG``.
"""

from __future__ import annotations

import socket
from typing import ClassVar

from monitor.services.install import require_binary
from monitor.services.ports import LOOPBACK
from monitor.services.server import LocalServer


def ping(host: str, port: int, timeout: float = 1.0) -> bool:
    """True if the Redis server at ``host:port`` answers ``PING`` with ``+PONG``."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer(LocalServer):
    """One ``redis-server`` whose data (the AOF) lives in ``<workdir>/redis/data``."""

    name: ClassVar[str] = "redis"

    @property
    def address(self) -> str:
        return f"redis://{self.host_port}/0"

    def config(self) -> str:
        """The contents of ``redis.conf``."""
        return "\n".join(
            [
                "# Written by monitor.services.redis_server.",
                f"bind {LOOPBACK}",
                f"port {self.port}",
                "protected-mode yes",
                "daemonize no",
                'logfile ""',
                f"dir {self.dir / 'data'}",
                "appendonly yes",
                "appendfsync everysec",
                'save ""',
                "",
            ]
        )

    def write_config(self) -> None:
        (self.dir / "data").mkdir(exist_ok=True)
        (self.dir / "redis.conf").write_text(self.config())

    def argv(self) -> list[str]:
        return [require_binary("redis-server"), str(self.dir / "redis.conf")]

    def answers(self) -> bool:
        return ping(LOOPBACK, self.port)
