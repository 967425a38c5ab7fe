"""The services ``monitor services up`` runs, as the other commands find them (no address to export).

``monitor worker``, ``produce``, ``canary`` and ``annotate`` read the working folder's ``state.json``
(``$MONITOR_SERVICES_DIR``, else ``.services/`` in the repository, where ``up`` puts it) and take, for
each setting not given explicitly (``MONITOR_*`` variables, ``--config``, options), the address of the
service that runs there now: Kafka's bootstrap list (one broker, or the cluster's three, with
replication factor 3) and Redis's URL (one server, or the cluster's ``redis+cluster://`` URL). When
both the single server and the cluster of a kind run, the one started last is taken. Nothing running
there: the settings' own defaults (Kafka ``127.0.0.1:9092``, Redis ``redis://127.0.0.1:6379/0``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from monitor.services.kafka_cluster import REPLICATION
from monitor.services.stack import State, default_workdir


@dataclass(frozen=True)
class FoundServices:
    """What runs in ``workdir``: Kafka's bootstrap list and Redis's URL (None: not running there)."""

    workdir: Path
    kafka_bootstrap: str | None = None
    replication_factor: int | None = None  # the cluster's, when the brokers are the Kafka cluster
    redis_url: str | None = None

    @property
    def state_file(self) -> Path:
        return self.workdir / "state.json"


def _latest(state: State, names: tuple[str, ...]) -> str | None:
    """Of ``names``, the service that runs now and was started last (None if none runs)."""
    running = [name for name in names if name in state.services and state.alive(name)]
    return max(running, key=lambda name: str(state.services[name].get("started_at", "")), default=None)


def found_services(env: Mapping[str, str]) -> FoundServices:
    """The services running in ``env``'s working folder (``MONITOR_SERVICES_DIR``, else ``.services/``);
    none if the folder has no readable ``state.json``."""
    workdir = default_workdir(env)
    try:
        state = State.load(workdir)
        kafka, redis = _latest(state, ("kafka", "kafka-cluster")), _latest(state, ("redis", "redis-cluster"))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):  # unreadable, or not up's: none
        return FoundServices(workdir)
    return FoundServices(
        workdir,
        kafka_bootstrap=None if kafka is None else str(state.services[kafka]["address"]),
        replication_factor=REPLICATION if kafka == "kafka-cluster" else None,
        redis_url=None if redis is None else str(state.services[redis]["address"]),
    )

