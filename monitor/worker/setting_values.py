"""Parsers of single setting values for :mod:`monitor.worker.settings`: each takes where the value came
from (``MONITOR_HTTP_PORT``, ``monitor.toml: [stream] join_window``) and the value, and returns it
parsed or raises :class:`SettingsError` naming both. Secrets are never shown in a message."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from monitor.core.errors import MonitorError
from monitor.core.grades import parse_scale


class SettingsError(MonitorError):
    """A setting that cannot be used; the message names it and its source."""


def integer(low: int, high: int) -> Callable[[str, Any], int]:
    def parse(where: str, value: Any) -> int:
        try:
            number = None if isinstance(value, bool | float) else int(str(value).strip())
        except ValueError:
            number = None
        if number is None or not low <= number <= high:
            raise SettingsError(f"{where}: must be an integer in {low}..{high}, got {value!r}")
        return number
    return parse


def seconds(where: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not (math.isfinite(number) and number > 0):
        raise SettingsError(f"{where}: must be a positive number of seconds, got {value!r}")
    return number


def boolean(where: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise SettingsError(f"{where}: must be true or false, got {value!r}")


def fraction(where: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not 0.0 < number < 1.0:
        raise SettingsError(f"{where}: must be a number strictly between 0 and 1, got {value!r}")
    return number


def non_empty(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SettingsError(f"{where}: must be a non-empty string, got {value!r}")
    return value.strip()


def bootstrap(where: str, value: Any) -> str:
    text = non_empty(where, value)
    for server in text.split(","):
        host, _, port = server.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SettingsError(f"{where}: expected host:port[,host:port...], got {value!r}")
    return text


REDIS_TLS_SCHEMES = {"rediss", "rediss+cluster"}
REDIS_CLUSTER_SCHEMES = {"redis+cluster", "rediss+cluster"}


def redis_url(where: str, value: Any) -> str:
    """One Redis (``redis://``, ``rediss://``, ``unix://``) or a Redis Cluster (``redis+cluster://`` or
    ``rediss+cluster://`` and its nodes, ``host:port[,host:port...]``, database 0 only)."""
    text = non_empty(where, value)
    parts = urlsplit(text)
    if parts.scheme not in {"redis", "rediss", "unix", *REDIS_CLUSTER_SCHEMES}:
        raise SettingsError(f"{where}: expected a redis://, rediss://, unix://, redis+cluster:// or "
                            f"rediss+cluster:// URL, got {hide(text)!r}")
    if parts.scheme in REDIS_CLUSTER_SCHEMES:
        for node in parts.netloc.rpartition("@")[2].split(","):
            host, _, port = node.strip().rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise SettingsError(f"{where}: a Redis Cluster URL lists its nodes as "
                                    f"host:port[,host:port...], got {hide(text)!r}")
        if parts.path.strip("/") not in {"", "0"}:
            raise SettingsError(f"{where}: a Redis Cluster has only database 0, got {hide(text)!r}")
    return text


def http_url(where: str, value: Any) -> str:
    text = non_empty(where, value)
    if urlsplit(text).scheme not in {"http", "https"} or not urlsplit(text).netloc:
        raise SettingsError(f"{where}: expected an http:// or https:// URL, got {hide(text)!r}")
    return text.rstrip("/")


def level(where: str, value: Any) -> str:
    text = non_empty(where, value).lower()
    if text not in {"debug", "info", "warning", "error"}:
        raise SettingsError(f"{where}: must be one of debug, info, warning, error, got {value!r}")
    return text


def scale(where: str, value: Any) -> str:
    text = non_empty(where, value)
    try:
        parse_scale(text)
    except MonitorError as error:
        raise SettingsError(f"{where}: {error}") from None
    return text


def choice(*choices: str) -> Callable[[str, Any], str]:
    """One of ``choices``, in any case, as the choice is spelled."""
    spelled = {c.upper(): c for c in choices}

    def parse(where: str, value: Any) -> str:
        text = non_empty(where, value).upper()
        if text not in spelled:
            raise SettingsError(f"{where}: must be one of {', '.join(choices)}, got {value!r}")
        return spelled[text]
    return parse


def secret(where: str, value: Any) -> str:
    """A password as given (not stripped); the messages never show it."""
    if not isinstance(value, str) or not value:
        raise SettingsError(f"{where}: must be a non-empty string")
    return value


def secret_file(where: str, value: Any) -> str:
    """The contents of the file named by ``value``, without a trailing newline (a mounted Secret)."""
    path = Path(non_empty(where, value))
    try:
        secret = path.read_text(encoding="utf-8").rstrip("\r\n")
    except OSError as error:
        raise SettingsError(f"{where}: cannot read {str(path)!r} ({error.strerror})") from None
    except UnicodeDecodeError:
        raise SettingsError(f"{where}: {str(path)!r} is not UTF-8 text") from None
    if not secret:
        raise SettingsError(f"{where}: {str(path)!r} is empty")
    return secret


def file(where: str, value: Any) -> str:
    text = non_empty(where, value)
    if not Path(text).is_file():
        raise SettingsError(f"{where}: no such file {text!r}")
    return text


def hide(url: str) -> str:
    """A URL with its password replaced, for messages (secrets are never logged)."""
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@", 1)
    return url
