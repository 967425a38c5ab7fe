"""A few words of RESP, Redis's protocol, over a plain socket: enough to set up and probe a local Redis
Cluster without a client library (``CLUSTER INFO``, ``CLUSTER MEET``, ``INFO replication``, ...).

:func:`call` sends one command and reads one reply: a simple string or a bulk string as ``str``, an
integer as ``int``, an array as a ``list``, a null as ``None``; an error reply raises :class:`RespError`
(a :class:`~monitor.services.process.ServiceError`). :func:`fields` reads the ``name:value`` lines of
``INFO`` and ``CLUSTER INFO``. Given an SSL context and a user, it speaks TLS and logs in first (``AUTH``), as
a secured node (:class:`~monitor.services.redis_cluster.SecureRedisClusterServer`) requires.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

from monitor.services.process import ServiceError


class RespError(ServiceError):
    """Redis answered an error reply (``-ERR ...``)."""


def encode(*words: str) -> bytes:
    """One command as a RESP array of bulk strings."""
    return f"*{len(words)}\r\n".encode() + b"".join(
        f"${len(w.encode())}\r\n".encode() + w.encode() + b"\r\n" for w in words)


def _reply(stream: Any) -> Any:
    line = stream.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError("Redis closed the connection mid-reply")
    kind, body = line[:1], line[1:-2].decode()
    if kind == b"+":
        return body
    if kind == b"-":
        raise RespError(body)
    if kind == b":":
        return int(body)
    if kind == b"$":
        if int(body) < 0:
            return None
        data: bytes = stream.read(int(body) + 2)
        return data[:-2].decode()
    if kind == b"*":
        return None if int(body) < 0 else [_reply(stream) for _ in range(int(body))]
    raise ConnectionError(f"not a RESP reply: {line[:40]!r}")


def call(host: str, port: int, *words: str, timeout: float = 2.0, tls: ssl.SSLContext | None = None,
         auth: tuple[str, str] | None = None) -> Any:
    """Send ``words`` as one command to the Redis at ``host:port`` and return its reply (see the module
    docstring); over TLS verified by ``tls`` if given, after ``AUTH user password`` if ``auth`` is;
    :class:`RespError` for an error reply (a refused login too), ``OSError`` if it cannot be reached."""
    with socket.create_connection((host, port), timeout=timeout) as raw, \
            (tls.wrap_socket(raw, server_hostname=host) if tls else raw) as sock, \
            sock.makefile("rb") as stream:
        if auth is not None:
            sock.sendall(encode("AUTH", *auth))
            _reply(stream)
        sock.sendall(encode(*words))
        return _reply(stream)


def fields(text: str) -> dict[str, str]:
    """The ``name:value`` lines of an ``INFO`` or ``CLUSTER INFO`` reply."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and not name.startswith("#"):
            out[name.strip()] = value.strip()
    return out
