"""``redis-server`` (the Debian package) on its own loopback port, with append-only-file persistence.

The configuration binds 127.0.0.1 only, keeps protected mode on, turns the AOF on and RDB snapshots off, so
what survives a restart is what the AOF kept. ``appendfsync always``: Redis fsyncs the AOF before it
answers a write, so nothing the worker was told is committed can be lost, even by a machine crash (with
``everysec`` up to a second could be, while Kafka's offsets may already be past it; the worker would then
re-read those messages from Kafka, docs/worker.md "Failure and recovery"). The worker's writes are a few
calls per batch, so the fsyncs cost little. Readiness is a RESP ``PING`` answered by ``+PONG``.

:class:`SecureRedisServer` is the same server reachable over TLS only, where every client must log in as
an ACL user (the default user is off); readiness is then ``AUTH`` and ``PING`` over TLS.
"""

from __future__ import annotations

import hashlib
import re
import socket
import ssl
from pathlib import Path
from typing import ClassVar

from monitor.services.install import require_binary
from monitor.services.ports import LOOPBACK
from monitor.services.process import ServiceError
from monitor.services.server import LocalServer
from monitor.services.tls import TlsFiles, make_tls_files


def ping(host: str, port: int, timeout: float = 1.0) -> bool:
    """True if the Redis server at ``host:port`` answers ``PING`` with ``+PONG``."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _command(*words: str) -> bytes:
    return f"*{len(words)}\r\n".encode() + b"".join(
        f"${len(w.encode())}\r\n".encode() + w.encode() + b"\r\n" for w in words)


def ping_tls(host: str, port: int, context: ssl.SSLContext, username: str, password: str,
             timeout: float = 1.0) -> bool:
    """True if the Redis server at ``host:port`` takes a TLS connection (verified by ``context``), accepts
    ``AUTH username password`` and answers ``PING`` with ``+PONG``."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, \
                context.wrap_socket(raw, server_hostname=host) as sock:
            sock.sendall(_command("AUTH", username, password) + _command("PING"))
            answer = b""
            while answer.count(b"\r\n") < 2:
                chunk = sock.recv(256)
                if not chunk:
                    return False
                answer += chunk
            return answer.startswith(b"+OK\r\n+PONG")
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
                "appendfsync always",
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


# What ``monitor worker`` (and ``monitor canary``) need, besides their key pattern: reads and writes of
# keys (not the dangerous ones: FLUSHALL, KEYS, SORT...), the commit script (EVALSHA, then SCRIPT LOAD or
# EVAL), PING and SELECT, INFO for search_relevance_redis_memory_bytes, and on a Redis Cluster CLUSTER
# SLOTS (which node serves which slot; WAIT is in @connection). docs/worker.md quotes it.
WORKER_ACL = ("resetchannels -@all +@read +@write +@connection -@dangerous "
              "+evalsha +eval +script|load +script|exists +info +cluster|slots")
_NAME = re.compile(r"[A-Za-z0-9_.~-]+")


def check_secured(username: str, password: str, key_pattern: str, client_auth: str) -> None:
    """:class:`ServiceError` unless the user and password are plain words (they go in ``redis.conf`` and
    in URLs), ``key_pattern`` one pattern and ``client_auth`` a value of ``tls-auth-clients``."""
    if not (_NAME.fullmatch(username) and _NAME.fullmatch(password)):
        raise ServiceError("redis: the username and password may only hold A-Z a-z 0-9 _ . ~ -")
    if client_auth not in {"yes", "optional", "no"} or not key_pattern or " " in key_pattern:
        raise ServiceError(f"redis: bad client_auth {client_auth!r} or key_pattern {key_pattern!r}")


def acl_user(username: str, password: str, rules: str) -> str:
    """The ``redis.conf`` line of an ACL user: on, its password as a SHA-256 hash (never the password
    itself), and ``rules`` (keys and commands)."""
    return f"user {username} on #{hashlib.sha256(password.encode()).hexdigest()} {rules}"


def tls_only(plain: str, port: int, tls: TlsFiles, client_auth: str) -> str:
    """``plain`` (a ``redis.conf`` listening on ``port``) on a TLS port only: ``port 0`` and ``tls-port``,
    the certificates of ``tls``, ``tls-auth-clients client_auth``, and the default user off (the ACL
    users follow)."""
    return plain.replace(f"port {port}\n", "port 0\n") + "\n".join([
        f"tls-port {port}",
        f"tls-cert-file {tls.cert}",
        f"tls-key-file {tls.key}",
        f"tls-ca-cert-file {tls.ca}",
        f"tls-auth-clients {client_auth}",
        "user default off",
        "",
    ])


class SecureRedisServer(RedisServer):
    """``redis-server`` on a TLS port only (``port 0``), the default user off, one ACL user.

    ``username`` logs in with ``password`` and has :data:`WORKER_ACL` on the keys matching
    ``key_pattern``. The certificates come from the throwaway CA of :mod:`.tls` (in ``<dir>/tls``);
    ``client_auth`` is ``tls-auth-clients``: ``"yes"`` (a client certificate signed by that CA is
    required, on top of the password), ``"optional"`` or ``"no"``.
    """

    def __init__(self, workdir: Path, port: int, *, password: str, username: str = "monitor",
                 key_pattern: str = "*", client_auth: str = "yes") -> None:
        super().__init__(workdir, port)
        check_secured(username, password, key_pattern, client_auth)
        self.username = username
        self.password = password
        self.key_pattern = key_pattern
        self.client_auth = client_auth
        self.tls = TlsFiles(self.dir / "tls")

    @property
    def address(self) -> str:
        """``rediss://<username>@127.0.0.1:<port>/0``: without the password, so it can be shown."""
        return f"rediss://{self.username}@{self.host_port}/0"

    @property
    def passwords(self) -> list[str]:
        """Every password of this server: the ACL user's."""
        return [self.password]

    def client_url(self) -> str:
        """The URL with the password in it (``rediss://user:password@...``): never print it."""
        return f"rediss://{self.username}:{self.password}@{self.host_port}/0"

    def client_ssl_context(self) -> ssl.SSLContext:
        """Trusts this server's CA and presents the client certificate (needed when client_auth is yes)."""
        return self.tls.client_context()

    def config(self) -> str:
        """``redis.conf``: the plain one with ``port 0``, plus TLS and the ACL user (its password hashed)."""
        return tls_only(super().config(), self.port, self.tls, self.client_auth) + acl_user(
            self.username, self.password, f"~{self.key_pattern} {WORKER_ACL}") + "\n"

    def write_config(self) -> None:
        make_tls_files(self.tls.folder)
        super().write_config()

    def answers(self) -> bool:
        return ping_tls(LOOPBACK, self.port, self.client_ssl_context(), self.username, self.password)
