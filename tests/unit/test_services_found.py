"""The worker, produce, canary and annotate find what ``monitor services up`` runs (issue 29): no address
to export, and what is given explicitly still wins."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from monitor.services.found import FoundServices, found_services
from monitor.services.process import start_time
from monitor.worker.settings import WorkerSettings, default_hint, describe, load_settings

ALIVE = {"pid": os.getpid(), "start_time": start_time(os.getpid()), "argv": ["server"]}  # this process
GONE = {"pid": 999_999_999, "start_time": 1, "argv": ["server"]}
CLUSTER = "127.0.0.1:30001,127.0.0.1:30002,127.0.0.1:30003"


def service(name: str, address: str, process: dict[str, Any], at: str = "2026-01-01T00:00:00+00:00",
            nodes: int = 1) -> dict[str, Any]:
    ports = {name: 1} if nodes == 1 else {f"{name}-{i}": 30001 + i for i in range(nodes)}
    return {"pid": process["pid"], "processes": [process] * nodes, "options": {}, "ports": ports,
            "address": address, "log": "x.log", "started_at": at, "ready_seconds": 1.0}


def workdir_with(tmp_path: Path, **services: dict[str, Any]) -> dict[str, str]:
    """A working folder whose ``state.json`` records ``services``; the environment that points at it."""
    folder = tmp_path / "services"
    folder.mkdir(exist_ok=True)
    named = {name.replace("_", "-"): record for name, record in services.items()}
    (folder / "state.json").write_text(json.dumps({"services": named, "last_up": None}))
    return {"MONITOR_SERVICES_DIR": str(folder)}


def test_the_running_single_servers_are_found(tmp_path: Path) -> None:
    env = workdir_with(tmp_path, kafka=service("kafka", "127.0.0.1:40001", ALIVE),
                       redis=service("redis", "redis://127.0.0.1:40002/0", ALIVE))
    found = found_services(env)
    assert found == FoundServices(tmp_path / "services", "127.0.0.1:40001", None, "redis://127.0.0.1:40002/0")
    settings = load_settings(env, services=found)
    assert (settings.kafka_bootstrap, settings.redis_url) == ("127.0.0.1:40001", "redis://127.0.0.1:40002/0")
    assert settings.replication_factor == 1
    assert describe(settings)["found"] == {"settings": ["kafka_bootstrap", "redis_url"],
                                           "in": str(tmp_path / "services" / "state.json")}


def test_the_clusters_are_found_with_their_replication(tmp_path: Path) -> None:
    env = workdir_with(tmp_path, kafka_cluster=service("kafka-cluster", CLUSTER, ALIVE, nodes=3),
                       redis_cluster=service("redis-cluster", f"redis+cluster://{CLUSTER}/0", ALIVE, nodes=3))
    settings = load_settings(env, services=found_services(env))
    assert settings.kafka_bootstrap == CLUSTER and settings.replication_factor == 3
    assert settings.redis_url == f"redis+cluster://{CLUSTER}/0"


def test_of_a_server_and_a_cluster_both_running_the_last_started_is_taken(tmp_path: Path) -> None:
    env = workdir_with(tmp_path, kafka=service("kafka", "127.0.0.1:40001", ALIVE, "2026-01-02T00:00:00+00:00"),
                       kafka_cluster=service("kafka-cluster", CLUSTER, ALIVE, "2026-01-01T00:00:00+00:00", 3))
    found = found_services(env)
    assert found.kafka_bootstrap == "127.0.0.1:40001" and found.replication_factor is None


def test_explicit_settings_come_first(tmp_path: Path) -> None:
    env = workdir_with(tmp_path, kafka_cluster=service("kafka-cluster", CLUSTER, ALIVE, nodes=3),
                       redis=service("redis", "redis://127.0.0.1:40002/0", ALIVE))
    found = found_services(env)
    given = load_settings({**env, "MONITOR_KAFKA_BOOTSTRAP": "kafka.example:9092"}, services=found)
    assert given.kafka_bootstrap == "kafka.example:9092"
    assert given.replication_factor == 1  # the cluster's replication goes with the cluster only
    assert given.redis_url == "redis://127.0.0.1:40002/0" and given.found == ("redis_url",)
    config = tmp_path / "monitor.toml"
    config.write_text('redis_url = "redis://redis.example:6379/0"\nreplication_factor = 2\n')
    from_file = load_settings(env, config, found)
    assert from_file.redis_url == "redis://redis.example:6379/0" and from_file.kafka_bootstrap == CLUSTER
    assert from_file.replication_factor == 2 and from_file.found == ("kafka_bootstrap",)


@pytest.mark.parametrize("state", [None, "not json", json.dumps({"services": {"kafka": {"pid": 1}}}),
                                   json.dumps([1, 2])])
def test_nothing_running_or_no_state_gives_the_defaults(tmp_path: Path, state: str | None) -> None:
    env = workdir_with(tmp_path, kafka=service("kafka", "127.0.0.1:40001", GONE))  # recorded, not running
    if state is not None:
        (tmp_path / "services" / "state.json").write_text(state)
    found = found_services(env)
    assert (found.kafka_bootstrap, found.redis_url) == (None, None)
    settings = load_settings(env, services=found)
    assert settings.kafka_bootstrap == WorkerSettings().kafka_bootstrap and settings.found == ()
    assert describe(settings)["found"] is None
    assert default_hint(settings, "kafka_bootstrap", found) == (
        f" (the default: no `monitor services up` running in {tmp_path / 'services'} to take it from; start "
        "them, or set MONITOR_KAFKA_BOOTSTRAP)")


def test_no_hint_for_an_address_given_or_found(tmp_path: Path) -> None:
    env = workdir_with(tmp_path, redis=service("redis", "redis://127.0.0.1:40002/0", ALIVE))
    found = found_services(env)
    settings = load_settings({**env, "MONITOR_KAFKA_BOOTSTRAP": "kafka.example:9092"}, services=found)
    assert default_hint(settings, "kafka_bootstrap", found) == ""
    assert default_hint(settings, "redis_url", found) == ""


def test_without_services_the_settings_ignore_the_working_folder(tmp_path: Path) -> None:
    env = workdir_with(tmp_path, kafka=service("kafka", "127.0.0.1:40001", ALIVE))
    assert load_settings(env).kafka_bootstrap == WorkerSettings().kafka_bootstrap  # services not passed
