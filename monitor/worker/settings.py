"""The worker's settings: a TOML file and/or ``MONITOR_*`` environment variables, validated at start.

Precedence: built-in defaults, then the file (``--config FILE`` or ``MONITOR_CONFIG``), then the
environment. Every error names where the value came from and why it is refused, e.g.
``MONITOR_HTTP_PORT: must be an integer in 0..65535, got 'http'`` or
``monitor.toml: [stream] join_window must be a positive number of seconds, got -5``. The full list,
with defaults, is in docs/worker.md (kept in step with :data:`ENV` by a test).
"""

from __future__ import annotations

import math
import ssl
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
from monitor.worker.security import MECHANISMS, PROTOCOLS, KafkaSecurity, client_ssl_context, redis_options


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
    kafka_security_protocol: str = "PLAINTEXT"
    kafka_sasl_mechanism: str = "SCRAM-SHA-512"
    kafka_sasl_username: str | None = None
    kafka_sasl_password: str | None = field(default=None, repr=False)
    kafka_ssl_cafile: str | None = None
    kafka_ssl_certfile: str | None = None
    kafka_ssl_keyfile: str | None = None
    redis_password: str | None = field(default=None, repr=False)
    redis_ssl_cafile: str | None = None
    redis_ssl_certfile: str | None = None
    redis_ssl_keyfile: str | None = None
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
    canary_baseline_window: float = 86400.0
    canary_time_matched: bool = True
    canary_match_slot: float = 3600.0
    canary_match_period: float = 86400.0
    canary_sticky: bool = True
    canary_adjust_queries: bool = True
    canary_covariate_window: float = 86400.0
    canary_covariate_min_sessions: int = 1
    alert_interval: float = 15.0
    idle_timeout: float = 60.0  # wall seconds without an impression before a partition counts as quiet
    runbook_base: str | None = None
    dashboard_url: str | None = None
    stream: StreamConfig = field(default_factory=StreamConfig)

    def grade_scale(self) -> Scale:
        return parse_scale(self.scale)

    def kafka_security(self) -> KafkaSecurity:
        """How every Kafka client of this process connects (docs/worker.md, "Security")."""
        return KafkaSecurity(self.kafka_security_protocol, self.kafka_sasl_mechanism,
                             self.kafka_sasl_username, self.kafka_sasl_password, self.kafka_ssl_cafile,
                             self.kafka_ssl_certfile, self.kafka_ssl_keyfile)

    def redis_options(self) -> dict[str, Any]:
        """Keyword arguments for ``Redis.from_url(self.redis_url, ...)``: password, CA, client certificate."""
        return redis_options(self.redis_url, self.redis_password, self.redis_ssl_cafile,
                             self.redis_ssl_certfile, self.redis_ssl_keyfile)

    def canary(self) -> CanaryConfig:
        return CanaryConfig(alpha=self.canary_alpha, min_relative_drop=self.canary_min_drop,
                            baseline_window=self.canary_baseline_window,
                            time_matched=self.canary_time_matched, match_slot=self.canary_match_slot,
                            match_period=self.canary_match_period, sticky=self.canary_sticky,
                            adjust_queries=self.canary_adjust_queries,
                            covariate_window=self.canary_covariate_window,
                            covariate_min_sessions=self.canary_covariate_min_sessions)

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


def _boolean(where: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise SettingsError(f"{where}: must be true or false, got {value!r}")


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


def _choice(*choices: str) -> Callable[[str, Any], str]:
    def parse(where: str, value: Any) -> str:
        text = _text(where, value).upper()
        if text not in choices:
            raise SettingsError(f"{where}: must be one of {', '.join(choices)}, got {value!r}")
        return text
    return parse


def _secret(where: str, value: Any) -> str:
    """A password as given (not stripped); the messages never show it."""
    if not isinstance(value, str) or not value:
        raise SettingsError(f"{where}: must be a non-empty string")
    return value


def _secret_file(where: str, value: Any) -> str:
    """The contents of the file named by ``value``, without a trailing newline (a mounted Secret)."""
    path = Path(_text(where, value))
    try:
        secret = path.read_text(encoding="utf-8").rstrip("\r\n")
    except OSError as error:
        raise SettingsError(f"{where}: cannot read {str(path)!r} ({error.strerror})") from None
    except UnicodeDecodeError:
        raise SettingsError(f"{where}: {str(path)!r} is not UTF-8 text") from None
    if not secret:
        raise SettingsError(f"{where}: {str(path)!r} is empty")
    return secret


def _file(where: str, value: Any) -> str:
    text = _text(where, value)
    if not Path(text).is_file():
        raise SettingsError(f"{where}: no such file {text!r}")
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
    "kafka_security_protocol": ("MONITOR_KAFKA_SECURITY_PROTOCOL", _choice(*PROTOCOLS)),
    "kafka_sasl_mechanism": ("MONITOR_KAFKA_SASL_MECHANISM", _choice(*MECHANISMS)),
    "kafka_sasl_username": ("MONITOR_KAFKA_SASL_USERNAME", _text),
    "kafka_sasl_password": ("MONITOR_KAFKA_SASL_PASSWORD", _secret),
    "kafka_sasl_password_file": ("MONITOR_KAFKA_SASL_PASSWORD_FILE", _secret_file),
    "kafka_ssl_cafile": ("MONITOR_KAFKA_SSL_CAFILE", _file),
    "kafka_ssl_certfile": ("MONITOR_KAFKA_SSL_CERTFILE", _file),
    "kafka_ssl_keyfile": ("MONITOR_KAFKA_SSL_KEYFILE", _file),
    "redis_password": ("MONITOR_REDIS_PASSWORD", _secret),
    "redis_password_file": ("MONITOR_REDIS_PASSWORD_FILE", _secret_file),
    "redis_ssl_cafile": ("MONITOR_REDIS_SSL_CAFILE", _file),
    "redis_ssl_certfile": ("MONITOR_REDIS_SSL_CERTFILE", _file),
    "redis_ssl_keyfile": ("MONITOR_REDIS_SSL_KEYFILE", _file),
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
    "canary_baseline_window": ("MONITOR_CANARY_BASELINE_WINDOW", _seconds),
    "canary_time_matched": ("MONITOR_CANARY_TIME_MATCHED", _boolean),
    "canary_match_slot": ("MONITOR_CANARY_MATCH_SLOT", _seconds),
    "canary_match_period": ("MONITOR_CANARY_MATCH_PERIOD", _seconds),
    "canary_sticky": ("MONITOR_CANARY_STICKY", _boolean),
    "canary_adjust_queries": ("MONITOR_CANARY_ADJUST_QUERIES", _boolean),
    "canary_covariate_window": ("MONITOR_CANARY_COVARIATE_WINDOW", _seconds),
    "canary_covariate_min_sessions": ("MONITOR_CANARY_COVARIATE_MIN_SESSIONS", _integer(1, 1_000_000)),
    "alert_interval": ("MONITOR_ALERT_INTERVAL", _seconds),
    "idle_timeout": ("MONITOR_IDLE_TIMEOUT", _seconds),
    "runbook_base": ("MONITOR_RUNBOOK_BASE", _http_url),
    "dashboard_url": ("MONITOR_DASHBOARD_URL", _http_url),
}
STREAM_FIELDS = {f.name for f in fields(StreamConfig)}
# a secret's *_file setting → the setting it fills (the two are one setting: a later source overrides
# either spelling; one source giving both is an error)
SECRET_FILES = {"kafka_sasl_password_file": "kafka_sasl_password", "redis_password_file": "redis_password"}


def _one_spelling(where: str, keys: set[str], *, in_file: bool) -> None:
    for file_key, key in SECRET_FILES.items():
        if file_key in keys and key in keys:
            one, other = (key, file_key) if in_file else (ENV[key][0], ENV[file_key][0])
            raise SettingsError(f"{where}: give {one} or {other}, not both")


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
        _one_spelling(str(path), set(flat), in_file=True)
        for key, value in flat.items():
            if key not in ENV:
                raise SettingsError(f"{path}: unknown setting {key!r}; accepted: {', '.join(sorted(ENV))}")
            values[SECRET_FILES.get(key, key)] = ENV[key][1](f"{path}: {key}", value)
        unknown = sorted(set(stream) - STREAM_FIELDS)
        if unknown:
            raise SettingsError(f"{path}: unknown [stream] settings {unknown}; accepted: "
                                f"{', '.join(sorted(STREAM_FIELDS))}")
    _one_spelling("environment", {key for key, (name, _) in ENV.items() if env.get(name, "").strip()},
                  in_file=False)
    for key, (name, parse) in ENV.items():
        if env.get(name, "").strip():
            values[SECRET_FILES.get(key, key)] = parse(name, env[name])
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
    settings = WorkerSettings(topics=topics, stream=config, **plain)
    try:
        settings.canary()
    except ValueError as error:
        raise SettingsError(f"{source}: canary settings: {error}") from None
    _check_security(settings)
    return settings


def _check_security(s: WorkerSettings) -> None:
    """Settings that only make sense together, and TLS files that load (a CA, a certificate with its key)."""
    kafka = s.kafka_security()
    protocol = f"MONITOR_KAFKA_SECURITY_PROTOCOL is {kafka.protocol}"
    if kafka.sasl and not (kafka.sasl_username and kafka.sasl_password):
        raise SettingsError(f"{protocol}: set MONITOR_KAFKA_SASL_USERNAME and MONITOR_KAFKA_SASL_PASSWORD "
                            f"(or MONITOR_KAFKA_SASL_PASSWORD_FILE)")
    if not kafka.sasl and (kafka.sasl_username or kafka.sasl_password):
        raise SettingsError(f"MONITOR_KAFKA_SASL_USERNAME/PASSWORD are set but {protocol}: use SASL_SSL "
                            f"(or SASL_PLAINTEXT) to send them")
    files = (kafka.ssl_cafile, kafka.ssl_certfile, kafka.ssl_keyfile)
    if not kafka.tls and any(files):
        raise SettingsError(f"MONITOR_KAFKA_SSL_* files are set but {protocol}: use SSL or SASL_SSL")
    _tls_files("MONITOR_KAFKA_SSL", *files)
    redis_files = (s.redis_ssl_cafile, s.redis_ssl_certfile, s.redis_ssl_keyfile)
    if any(redis_files) and urlsplit(s.redis_url).scheme != "rediss":
        raise SettingsError("MONITOR_REDIS_SSL_* files are set but MONITOR_REDIS_URL is not rediss:// (TLS)")
    _tls_files("MONITOR_REDIS_SSL", *redis_files)
    if s.redis_password is not None and urlsplit(s.redis_url).password:
        raise SettingsError("MONITOR_REDIS_PASSWORD: MONITOR_REDIS_URL holds a password already; give one")


def _tls_files(prefix: str, cafile: str | None, certfile: str | None, keyfile: str | None) -> None:
    if keyfile and not certfile:
        raise SettingsError(f"{prefix}_KEYFILE: needs {prefix}_CERTFILE (the client certificate)")
    try:
        client_ssl_context(cafile)
    except (ssl.SSLError, OSError) as error:
        raise SettingsError(f"{prefix}_CAFILE: not a usable CA certificate file ({error})") from None
    try:
        client_ssl_context(cafile, certfile, keyfile)
    except (ssl.SSLError, OSError, ValueError) as error:
        raise SettingsError(f"{prefix}_CERTFILE/{prefix}_KEYFILE: not a usable certificate and key "
                            f"({error})") from None


def describe(settings: WorkerSettings) -> dict[str, Any]:
    """The settings for the start-up log line, with secrets hidden."""
    return {
        "kafka": settings.kafka_bootstrap, "redis": _hide(settings.redis_url),
        "kafka_security": _describe_kafka(settings.kafka_security()),
        "redis_security": _describe_redis(settings),
        "topics": vars(settings.topics), "partitions": settings.partitions, "app_id": settings.app_id,
        "http": f"{settings.http_host}:{settings.http_port}", "scale": settings.scale,
        "alertmanager": _hide(settings.alertmanager_url) if settings.alertmanager_url else None,
        "deploy_token": "set" if settings.deploy_token else "unset",
        "k": dict(settings.stream.k), "join_window": settings.stream.join_window,
        "windows": dict(settings.stream.windows), "budget": dict(settings.stream.budget),
        "budget_unit": settings.stream.budget_unit,
        "variants": list(settings.stream.variants) or "any", "ranker_pattern": settings.stream.ranker_pattern,
        "undeclared": settings.stream.undeclared,
    }


def _describe_kafka(kafka: KafkaSecurity) -> dict[str, Any]:
    shown: dict[str, Any] = {"protocol": kafka.protocol}
    if kafka.sasl:
        shown.update(sasl_mechanism=kafka.sasl_mechanism, sasl_username=kafka.sasl_username,
                     sasl_password="set" if kafka.sasl_password else "unset")
    if kafka.tls:
        shown.update(cafile=kafka.ssl_cafile, certfile=kafka.ssl_certfile)
    return shown


def _describe_redis(settings: WorkerSettings) -> dict[str, Any]:
    url = urlsplit(settings.redis_url)
    shown: dict[str, Any] = {"tls": url.scheme == "rediss", "username": url.username,
                             "password": "set" if settings.redis_password or url.password else "unset"}
    if url.scheme == "rediss":
        shown.update(cafile=settings.redis_ssl_cafile, certfile=settings.redis_ssl_certfile)
    return shown
