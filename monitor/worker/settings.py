"""The worker's settings: a TOML file and/or ``MONITOR_*`` environment variables, validated at start.

Precedence: built-in defaults, then the file (``--config FILE`` or ``MONITOR_CONFIG``), then the
environment. Every error names where the value came from and why it is refused, e.g.
``MONITOR_HTTP_PORT: must be an integer in 0..65535, got 'http'`` or
``monitor.toml: [stream] join_window must be a positive number of seconds, got -5``. The full list,
with defaults, is in docs/worker.md (kept in step with :data:`ENV` by a test).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from monitor.core.canary import CanaryConfig
from monitor.core.canary.alerts import AlertConfig
from monitor.core.errors import MonitorError
from monitor.core.grades import Scale, parse_scale
from monitor.core.stream.config import ConfigError, StreamConfig


class SettingsError(MonitorError):
    """A setting that cannot be used; the message names it and its source."""


@dataclass(frozen=True)
class Topics:
    impressions: str = "impressions"
    annotations: str = "annotations"
    deploys: str = "deploys"
    dead_letters: str = "monitor-dead-letters"
    requests: str = "annotation-requests"

    def sources(self) -> dict[str, str]:
        """Topic name → role, for the three topics the worker consumes."""
        return {self.impressions: "impressions", self.annotations: "annotations", self.deploys: "deploys"}


@dataclass(frozen=True)
class WorkerSettings:
    kafka_bootstrap: str = "127.0.0.1:9092"
    redis_url: str = field(default="redis://127.0.0.1:6379/0", repr=False)  # may hold a password
    topics: Topics = field(default_factory=Topics)
    partitions: int = 4
    replication_factor: int = 1
    app_id: str = "search-relevance-monitor"
    http_host: str = "127.0.0.1"
    http_port: int = 9464
    redis_prefix: str = "srm"
    scale: str = "seed"
    max_rankers: int = 10
    max_variants: int = 5
    batch_size: int = 500
    batch_wait: float = 0.05
    alertmanager_url: str | None = field(default=None, repr=False)
    deploy_token: str | None = field(default=None, repr=False)
    log_level: str = "info"
    datadir: str | None = None
    canary_alpha: float = 0.05
    canary_min_drop: float = 0.02
    alert_interval: float = 15.0
    runbook_base: str | None = None
    dashboard_url: str | None = None
    stream: StreamConfig = field(default_factory=StreamConfig)

    def grade_scale(self) -> Scale:
        return parse_scale(self.scale)

    def canary(self) -> CanaryConfig:
        return CanaryConfig(alpha=self.canary_alpha, min_relative_drop=self.canary_min_drop)

    def alerts(self) -> AlertConfig:
        config = AlertConfig(alpha=self.canary_alpha)
        if self.runbook_base is not None:
            config = replace(config, runbook_base=self.runbook_base)
        if self.dashboard_url is not None:
            config = replace(config, dashboard_url=self.dashboard_url)
        return config


def _integer(low: int, high: int) -> Callable[[str, Any], int]:
    def parse(where: str, value: Any) -> int:
        try:
            number = None if isinstance(value, bool | float) else int(str(value).strip())
        except ValueError:
            number = None
        if number is None or not low <= number <= high:
            raise SettingsError(f"{where}: must be an integer in {low}..{high}, got {value!r}")
        return number
    return parse


def _seconds(where: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not (math.isfinite(number) and number > 0):
        raise SettingsError(f"{where}: must be a positive number of seconds, got {value!r}")
    return number


def _fraction(where: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not 0.0 < number < 1.0:
        raise SettingsError(f"{where}: must be a number strictly between 0 and 1, got {value!r}")
    return number


def _text(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SettingsError(f"{where}: must be a non-empty string, got {value!r}")
    return value.strip()


def _bootstrap(where: str, value: Any) -> str:
    text = _text(where, value)
    for server in text.split(","):
        host, _, port = server.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SettingsError(f"{where}: expected host:port[,host:port...], got {value!r}")
    return text


def _redis_url(where: str, value: Any) -> str:
    text = _text(where, value)
    if urlsplit(text).scheme not in {"redis", "rediss", "unix"}:
        raise SettingsError(f"{where}: expected a redis://, rediss:// or unix:// URL, got {_hide(text)!r}")
    return text


def _http_url(where: str, value: Any) -> str:
    text = _text(where, value)
    if urlsplit(text).scheme not in {"http", "https"} or not urlsplit(text).netloc:
        raise SettingsError(f"{where}: expected an http:// or https:// URL, got {_hide(text)!r}")
    return text.rstrip("/")


def _level(where: str, value: Any) -> str:
    text = _text(where, value).lower()
    if text not in {"debug", "info", "warning", "error"}:
        raise SettingsError(f"{where}: must be one of debug, info, warning, error, got {value!r}")
    return text


def _scale(where: str, value: Any) -> str:
    text = _text(where, value)
    try:
        parse_scale(text)
    except MonitorError as error:
        raise SettingsError(f"{where}: {error}") from None
    return text


def _hide(url: str) -> str:
    """A URL with its password replaced, for messages (secrets are never logged)."""
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@", 1)
    return url


# setting → (environment variable, parser); topic settings are "topics.<name>"
ENV: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    "kafka_bootstrap": ("MONITOR_KAFKA_BOOTSTRAP", _bootstrap),
    "redis_url": ("MONITOR_REDIS_URL", _redis_url),
    "topics.impressions": ("MONITOR_TOPIC_IMPRESSIONS", _text),
    "topics.annotations": ("MONITOR_TOPIC_ANNOTATIONS", _text),
    "topics.deploys": ("MONITOR_TOPIC_DEPLOYS", _text),
    "topics.dead_letters": ("MONITOR_TOPIC_DEAD_LETTERS", _text),
    "topics.requests": ("MONITOR_TOPIC_REQUESTS", _text),
    "partitions": ("MONITOR_PARTITIONS", _integer(1, 10_000)),
    "replication_factor": ("MONITOR_REPLICATION_FACTOR", _integer(1, 10)),
    "app_id": ("MONITOR_APP_ID", _text),
    "http_host": ("MONITOR_HTTP_HOST", _text),
    "http_port": ("MONITOR_HTTP_PORT", _integer(0, 65535)),
    "redis_prefix": ("MONITOR_REDIS_PREFIX", _text),
    "scale": ("MONITOR_SCALE", _scale),
    "max_rankers": ("MONITOR_MAX_RANKERS", _integer(1, 1000)),
    "max_variants": ("MONITOR_MAX_VARIANTS", _integer(1, 1000)),
    "batch_size": ("MONITOR_BATCH_SIZE", _integer(1, 100_000)),
    "batch_wait": ("MONITOR_BATCH_WAIT", _seconds),
    "alertmanager_url": ("MONITOR_ALERTMANAGER_URL", _http_url),
    "deploy_token": ("MONITOR_DEPLOY_TOKEN", _text),
    "log_level": ("MONITOR_LOG_LEVEL", _level),
    "datadir": ("MONITOR_DATADIR", _text),
    "canary_alpha": ("MONITOR_CANARY_ALPHA", _fraction),
    "canary_min_drop": ("MONITOR_CANARY_MIN_DROP", _fraction),
    "alert_interval": ("MONITOR_ALERT_INTERVAL", _seconds),
    "runbook_base": ("MONITOR_RUNBOOK_BASE", _http_url),
    "dashboard_url": ("MONITOR_DASHBOARD_URL", _http_url),
}
STREAM_FIELDS = {f.name for f in fields(StreamConfig)}


def load_settings(env: Mapping[str, str], config_file: Path | None = None) -> WorkerSettings:
    """Settings from ``config_file`` (or ``MONITOR_CONFIG``) and ``env``; :class:`SettingsError` if bad."""
    path = config_file or (Path(env["MONITOR_CONFIG"]) if env.get("MONITOR_CONFIG") else None)
    values: dict[str, Any] = {}
    stream: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        try:
            document = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as error:
            raise SettingsError(f"{path}: cannot read the config file ({error.strerror})") from None
        except tomllib.TOMLDecodeError as error:
            raise SettingsError(f"{path}: not valid TOML ({error})") from None
        stream = dict(document.pop("stream", {}) or {})
        topics = document.pop("topics", {}) or {}
        if not isinstance(topics, dict) or not isinstance(stream, dict):
            raise SettingsError(f"{path}: [topics] and [stream] must be tables")
        flat = {**document, **{f"topics.{k}": v for k, v in topics.items()}}
        for key, value in flat.items():
            if key not in ENV:
                raise SettingsError(f"{path}: unknown setting {key!r}; accepted: {', '.join(sorted(ENV))}")
            values[key] = ENV[key][1](f"{path}: {key}", value)
        unknown = sorted(set(stream) - STREAM_FIELDS)
        if unknown:
            raise SettingsError(f"{path}: unknown [stream] settings {unknown}; accepted: "
                                f"{', '.join(sorted(STREAM_FIELDS))}")
    for key, (name, parse) in ENV.items():
        if env.get(name, "").strip():
            values[key] = parse(name, env[name])
    try:
        config = StreamConfig(**stream)
    except ConfigError as error:
        raise SettingsError(f"{source}: [stream] {error}") from None
    except TypeError as error:
        raise SettingsError(f"{source}: [stream] {error}") from None
    topics = replace(Topics(), **{k.split(".", 1)[1]: v for k, v in values.items()
                                  if k.startswith("topics.")})
    names = [topics.impressions, topics.annotations, topics.deploys, topics.dead_letters, topics.requests]
    if len(set(names)) != len(names):
        raise SettingsError(f"topics must be five different names, got {names}")
    plain = {k: v for k, v in values.items() if not k.startswith("topics.")}
    return WorkerSettings(topics=topics, stream=config, **plain)


def describe(settings: WorkerSettings) -> dict[str, Any]:
    """The settings for the start-up log line, with secrets hidden."""
    return {
        "kafka": settings.kafka_bootstrap, "redis": _hide(settings.redis_url),
        "topics": vars(settings.topics), "partitions": settings.partitions, "app_id": settings.app_id,
        "http": f"{settings.http_host}:{settings.http_port}", "scale": settings.scale,
        "alertmanager": _hide(settings.alertmanager_url) if settings.alertmanager_url else None,
        "deploy_token": "set" if settings.deploy_token else "unset",
        "k": dict(settings.stream.k), "join_window": settings.stream.join_window,
        "windows": dict(settings.stream.windows), "budget": dict(settings.stream.budget),
    }
