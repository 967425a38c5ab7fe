"""The worker's settings: a TOML file and/or ``MONITOR_*`` environment variables, validated at start.

Precedence: built-in defaults, then the services ``monitor services up`` runs (Kafka's and Redis's
addresses, when the command passes what :func:`monitor.services.found.found_services` found), then the
file (``--config FILE`` or ``MONITOR_CONFIG``), then the environment. Every error names where the
value came from and why it is refused, e.g. ``MONITOR_HTTP_PORT: must be an integer in 0..65535, got
'http'`` or ``monitor.toml: [stream] join_window must be a positive number of seconds, got -5``. The
full list, with defaults, is in docs/worker.md (kept in step with :data:`ENV` by a test).
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import monitor.worker.setting_values as v
from monitor.core.canary import CanaryConfig
from monitor.core.canary.alerts import AlertConfig
from monitor.core.grades import Scale, best_gain, parse_scale
from monitor.core.stream.config import ConfigError, StreamConfig
from monitor.services.found import FoundServices
from monitor.store.keys import DEFAULT_GROUPS
from monitor.worker.security import MECHANISMS, PROTOCOLS, KafkaSecurity, client_ssl_context, redis_options
from monitor.worker.setting_values import SettingsError as SettingsError  # where callers import it from


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
    group_instance_id: str | None = None  # static group membership: a stable name per replica
    http_host: str = "127.0.0.1"
    http_port: int = 9464
    redis_prefix: str = "srm"
    redis_groups: int = DEFAULT_GROUPS
    scale: str = "four-level"
    max_rankers: int = 10
    max_variants: int = 5
    batch_size: int = 2000
    batch_wait: float = 0.05
    alertmanager_url: str | None = field(default=None, repr=False)
    deploy_token: str | None = field(default=None, repr=False)
    log_level: str = "info"
    event_loop: str = "asyncio"
    gc_threshold: int = 50_000
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
    rollup_interval: float = 5.0  # seconds between rollups of what /metrics exports (worker/rollup_lease.py)
    max_rollup_age: float = 30.0  # /readyz is not ready while the rollup is older than this (seconds)
    idle_timeout: float = 60.0  # wall seconds without an impression before a partition counts as quiet
    runbook_base: str | None = None
    dashboard_url: str | None = None
    stream: StreamConfig = field(default_factory=StreamConfig)
    found: tuple[str, ...] = ()  # the settings taken from the running services (found_in: their state.json)
    found_in: str | None = None

    def grade_scale(self) -> Scale:
        return parse_scale(self.scale)

    def kafka_security(self) -> KafkaSecurity:
        """How every Kafka client of this process connects (docs/worker.md, "Security")."""
        return KafkaSecurity(self.kafka_security_protocol, self.kafka_sasl_mechanism,
                             self.kafka_sasl_username, self.kafka_sasl_password, self.kafka_ssl_cafile,
                             self.kafka_ssl_certfile, self.kafka_ssl_keyfile)

    def redis_options(self) -> dict[str, Any]:
        """Keyword arguments for ``connect(self.redis_url, ...)`` (monitor/store/client.py): password, CA,
        client certificate."""
        return redis_options(self.redis_url, self.redis_password, self.redis_ssl_cafile,
                             self.redis_ssl_certfile, self.redis_ssl_keyfile)

    def canary(self) -> CanaryConfig:
        return CanaryConfig(alpha=self.canary_alpha, min_relative_drop=self.canary_min_drop,
                            baseline_window=self.canary_baseline_window,
                            time_matched=self.canary_time_matched, match_slot=self.canary_match_slot,
                            match_period=self.canary_match_period, sticky=self.canary_sticky,
                            adjust_queries=self.canary_adjust_queries,
                            covariate_window=self.canary_covariate_window,
                            covariate_min_sessions=self.canary_covariate_min_sessions,
                            ).with_bounds(self.stream.k, best_gain(self.grade_scale())
                                          ).with_stream(self.stream.join_window, self.stream.idle_after)

    def alerts(self) -> AlertConfig:
        config = AlertConfig(alpha=self.canary_alpha)
        if self.runbook_base is not None:
            config = replace(config, runbook_base=self.runbook_base)
        if self.dashboard_url is not None:
            config = replace(config, dashboard_url=self.dashboard_url)
        return config


# setting → (environment variable, parser); topic settings are "topics.<name>"
ENV: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    "kafka_bootstrap": ("MONITOR_KAFKA_BOOTSTRAP", v.bootstrap),
    "redis_url": ("MONITOR_REDIS_URL", v.redis_url),
    "kafka_security_protocol": ("MONITOR_KAFKA_SECURITY_PROTOCOL", v.choice(*PROTOCOLS)),
    "kafka_sasl_mechanism": ("MONITOR_KAFKA_SASL_MECHANISM", v.choice(*MECHANISMS)),
    "kafka_sasl_username": ("MONITOR_KAFKA_SASL_USERNAME", v.non_empty),
    "kafka_sasl_password": ("MONITOR_KAFKA_SASL_PASSWORD", v.secret),
    "kafka_sasl_password_file": ("MONITOR_KAFKA_SASL_PASSWORD_FILE", v.secret_file),
    "kafka_ssl_cafile": ("MONITOR_KAFKA_SSL_CAFILE", v.file),
    "kafka_ssl_certfile": ("MONITOR_KAFKA_SSL_CERTFILE", v.file),
    "kafka_ssl_keyfile": ("MONITOR_KAFKA_SSL_KEYFILE", v.file),
    "redis_password": ("MONITOR_REDIS_PASSWORD", v.secret),
    "redis_password_file": ("MONITOR_REDIS_PASSWORD_FILE", v.secret_file),
    "redis_ssl_cafile": ("MONITOR_REDIS_SSL_CAFILE", v.file),
    "redis_ssl_certfile": ("MONITOR_REDIS_SSL_CERTFILE", v.file),
    "redis_ssl_keyfile": ("MONITOR_REDIS_SSL_KEYFILE", v.file),
    "topics.impressions": ("MONITOR_TOPIC_IMPRESSIONS", v.non_empty),
    "topics.annotations": ("MONITOR_TOPIC_ANNOTATIONS", v.non_empty),
    "topics.deploys": ("MONITOR_TOPIC_DEPLOYS", v.non_empty),
    "topics.dead_letters": ("MONITOR_TOPIC_DEAD_LETTERS", v.non_empty),
    "topics.requests": ("MONITOR_TOPIC_REQUESTS", v.non_empty),
    "partitions": ("MONITOR_PARTITIONS", v.integer(1, 10_000)),
    "replication_factor": ("MONITOR_REPLICATION_FACTOR", v.integer(1, 10)),
    "app_id": ("MONITOR_APP_ID", v.non_empty),
    "group_instance_id": ("MONITOR_GROUP_INSTANCE_ID", v.non_empty),
    "http_host": ("MONITOR_HTTP_HOST", v.non_empty),
    "http_port": ("MONITOR_HTTP_PORT", v.integer(0, 65535)),
    "redis_prefix": ("MONITOR_REDIS_PREFIX", v.non_empty),
    "redis_groups": ("MONITOR_REDIS_GROUPS", v.integer(1, 4096)),
    "scale": ("MONITOR_SCALE", v.scale),
    "max_rankers": ("MONITOR_MAX_RANKERS", v.integer(1, 1000)),
    "max_variants": ("MONITOR_MAX_VARIANTS", v.integer(1, 1000)),
    "batch_size": ("MONITOR_BATCH_SIZE", v.integer(1, 100_000)),
    "batch_wait": ("MONITOR_BATCH_WAIT", v.seconds),
    "alertmanager_url": ("MONITOR_ALERTMANAGER_URL", v.http_url),
    "deploy_token": ("MONITOR_DEPLOY_TOKEN", v.non_empty),
    "log_level": ("MONITOR_LOG_LEVEL", v.level),
    "event_loop": ("MONITOR_EVENT_LOOP", v.choice("asyncio", "uvloop")),
    "gc_threshold": ("MONITOR_GC_THRESHOLD", v.integer(0, 10_000_000)),
    "datadir": ("MONITOR_DATADIR", v.non_empty),
    "canary_alpha": ("MONITOR_CANARY_ALPHA", v.fraction),
    "canary_min_drop": ("MONITOR_CANARY_MIN_DROP", v.fraction),
    "canary_baseline_window": ("MONITOR_CANARY_BASELINE_WINDOW", v.seconds),
    "canary_time_matched": ("MONITOR_CANARY_TIME_MATCHED", v.boolean),
    "canary_match_slot": ("MONITOR_CANARY_MATCH_SLOT", v.seconds),
    "canary_match_period": ("MONITOR_CANARY_MATCH_PERIOD", v.seconds),
    "canary_sticky": ("MONITOR_CANARY_STICKY", v.boolean),
    "canary_adjust_queries": ("MONITOR_CANARY_ADJUST_QUERIES", v.boolean),
    "canary_covariate_window": ("MONITOR_CANARY_COVARIATE_WINDOW", v.seconds),
    "canary_covariate_min_sessions": ("MONITOR_CANARY_COVARIATE_MIN_SESSIONS", v.integer(1, 1_000_000)),
    "alert_interval": ("MONITOR_ALERT_INTERVAL", v.seconds),
    "rollup_interval": ("MONITOR_ROLLUP_INTERVAL", v.seconds),
    "max_rollup_age": ("MONITOR_MAX_ROLLUP_AGE", v.seconds),
    "idle_timeout": ("MONITOR_IDLE_TIMEOUT", v.seconds),
    "runbook_base": ("MONITOR_RUNBOOK_BASE", v.http_url),
    "dashboard_url": ("MONITOR_DASHBOARD_URL", v.http_url),
}
STREAM_FIELDS = {f.name for f in fields(StreamConfig)}
# a secret's *v.file setting → the setting it fills (the two are one setting: a later source overrides
# either spelling; one source giving both is an error)
SECRET_FILES = {"kafka_sasl_password_file": "kafka_sasl_password", "redis_password_file": "redis_password"}


def _one_spelling(where: str, keys: set[str], *, in_file: bool) -> None:
    for file_key, key in SECRET_FILES.items():
        if file_key in keys and key in keys:
            one, other = (key, file_key) if in_file else (ENV[key][0], ENV[file_key][0])
            raise SettingsError(f"{where}: give {one} or {other}, not both")


def _from_services(services: FoundServices | None) -> dict[str, Any]:
    """The settings the running services give (their addresses; the Kafka cluster's replication)."""
    if services is None:
        return {}
    found = {"kafka_bootstrap": services.kafka_bootstrap, "redis_url": services.redis_url,
             "replication_factor": services.replication_factor}
    return {key: value for key, value in found.items() if value is not None}


def load_settings(env: Mapping[str, str], config_file: Path | None = None,
                  services: FoundServices | None = None) -> WorkerSettings:
    """Settings from ``config_file`` (or ``MONITOR_CONFIG``) and ``env``, over what ``services`` (the
    running local services: :func:`monitor.services.found.found_services`) give; :class:`SettingsError`
    if bad."""
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
    taken = {key: value for key, value in _from_services(services).items() if key not in values}
    if "kafka_bootstrap" not in taken:  # the cluster's replication goes with the cluster's brokers only
        taken.pop("replication_factor", None)
    if taken and services is not None:
        values.update(taken, found=tuple(taken), found_in=str(services.state_file))
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
    if any(redis_files) and urlsplit(s.redis_url).scheme not in v.REDIS_TLS_SCHEMES:
        raise SettingsError("MONITOR_REDIS_SSL_* files are set but MONITOR_REDIS_URL is not rediss:// or "
                            "rediss+cluster:// (TLS)")
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
        "kafka": settings.kafka_bootstrap, "redis": v.hide(settings.redis_url),
        "kafka_security": _describe_kafka(settings.kafka_security()),
        "redis_security": _describe_redis(settings),
        "topics": vars(settings.topics), "partitions": settings.partitions,
        "replication_factor": settings.replication_factor, "app_id": settings.app_id,
        "http": f"{settings.http_host}:{settings.http_port}", "scale": settings.scale,
        "alertmanager": v.hide(settings.alertmanager_url) if settings.alertmanager_url else None,
        "deploy_token": "set" if settings.deploy_token else "unset",
        "k": dict(settings.stream.k), "join_window": settings.stream.join_window,
        "windows": dict(settings.stream.windows), "budget": dict(settings.stream.budget),
        "budget_unit": settings.stream.budget_unit,
        "variants": list(settings.stream.variants) or "any", "ranker_pattern": settings.stream.ranker_pattern,
        "undeclared": settings.stream.undeclared,
        "found": {"settings": list(settings.found), "in": settings.found_in} if settings.found else None,
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
    tls = url.scheme in v.REDIS_TLS_SCHEMES
    shown: dict[str, Any] = {"tls": tls, "cluster": url.scheme in v.REDIS_CLUSTER_SCHEMES,
                             "username": url.username,
                             "password": "set" if settings.redis_password or url.password else "unset"}
    if tls:
        shown.update(cafile=settings.redis_ssl_cafile, certfile=settings.redis_ssl_certfile)
    return shown


def default_hint(settings: WorkerSettings, key: str, services: FoundServices | None) -> str:
    """For an error about ``key`` (``kafka_bootstrap``, ``redis_url``): where its value came from, when it is
    the built-in default, and how to give another (empty when it was given or found)."""
    if key in settings.found or getattr(settings, key) != getattr(WorkerSettings(), key):
        return ""
    where = f" in {services.workdir}" if services is not None else ""
    return (f" (the default: no `monitor services up` running{where} to take it from; start them, or set "
            f"{ENV[key][0]})")


def refused(command: str, error: Exception) -> int:
    """Exit status 2, after ``<command>: <error>`` on stderr: how a sub-command refuses its settings."""
    sys.stderr.write(f"{command}: {error}\n")
    return 2


def with_check(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` with the ``--check`` every long-running sub-command takes (:func:`checked`)."""
    parser.add_argument("--check", action="store_true",
                        help="validate the settings, print them (secrets hidden) and exit")
    return parser


def checked(described: Mapping[str, Any]) -> int:
    """Exit status 0, after the settings as :func:`describe` gives them (secrets hidden) on stdout."""
    sys.stdout.write(json.dumps(described, indent=2, ensure_ascii=False) + "\n")
    return 0
