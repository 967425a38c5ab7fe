"""The clusters of ``monitor services``, for real: a Redis Cluster (three primaries, a replica each) that
serves every slot and replicates, three Kafka brokers whose topics (as the worker creates them) have three
replicas all in sync and ``min.insync.replicas`` 2, and ``monitor services up --redis-cluster
--redis-replicas 1 --kafka-cluster`` / ``status`` / ``down`` on free ports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from redis.asyncio import RedisCluster

from monitor.services.kafka import metadata_brokers
from monitor.services.process import start_time
from monitor.services.redis_cluster import SLOTS, RedisClusterServer, slot_ranges
from monitor.services.resp import call, fields
from monitor.store.client import connect
from monitor.worker.settings import Topics
from monitor.worker.topics import ensure_topics
from tests.fixtures.services import ClusterHandle
from tests.support.kafka_admin import partition_layout, topic_config

pytestmark = pytest.mark.integration


async def test_the_redis_cluster_serves_every_slot_and_replicates(redis_cluster_service: ClusterHandle) -> None:
    cluster = redis_cluster_service.group
    assert isinstance(cluster, RedisClusterServer)
    views = cluster.topology()
    primaries = sorted((v for v in views if v.primary), key=lambda v: v.slots)
    assert [v.slots for v in primaries] == [(r,) for r in slot_ranges()]
    assert sorted(v.primary_id for v in views if not v.primary) == sorted(v.id for v in primaries)  # one each

    client = connect(redis_cluster_service.address, socket_timeout=5)
    prefix = f"test:{uuid.uuid4().hex[:8]}"
    keys = [f"{prefix}:{{p{p}}}:meta" for p in range(8)]
    try:
        assert isinstance(client, RedisCluster)
        for number, key in enumerate(keys):
            await client.hset(key, mapping={"wm": number, "off:i": 10 * number})
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(key)
        assert await pipe.execute() == [{b"wm": str(n).encode(), b"off:i": str(10 * n).encode()}
                                        for n in range(8)]
        shards = {client.get_node_from_key(key).name for key in keys}
        assert len(shards) == 3  # the eight partitions' tags spread over the three primaries
        info = await client.cluster_info()
        assert info["cluster_state"] == "ok" and int(info["cluster_slots_ok"]) == SLOTS
    finally:
        await client.aclose()
    deadline = time.monotonic() + 10  # each replica holds what its primary holds
    while True:
        sizes = {v.port: call("127.0.0.1", v.port, "DBSIZE") for v in views}
        replicated = all(sizes[v.port] == sizes[next(p.port for p in primaries if p.id == v.primary_id)]
                         for v in views if not v.primary)
        if replicated:
            break
        assert time.monotonic() < deadline, sizes
        time.sleep(0.1)
    for view in views:
        role = fields(str(call("127.0.0.1", view.port, "INFO", "replication")))
        assert role["role"] == ("master" if view.primary else "slave")
        assert view.primary or role["master_link_status"] == "up"


async def test_the_kafka_cluster_creates_the_workers_topics_with_three_in_sync_replicas(
        kafka_cluster_bootstrap: str) -> None:
    assert all(len(metadata_brokers("127.0.0.1", int(hp.rsplit(":", 1)[1]))) == 3
               for hp in kafka_cluster_bootstrap.split(","))
    tag = uuid.uuid4().hex[:8]
    topics = Topics(*(f"cluster-{tag}-{role}" for role in ("imp", "ann", "dep", "dead", "req")))
    assert await ensure_topics(kafka_cluster_bootstrap, topics, 4, replication=3) == 4
    for name in (topics.impressions, topics.dead_letters):
        layout = await partition_layout(kafka_cluster_bootstrap, name)
        assert sorted(layout) == [0, 1, 2, 3]
        assert all(replicas == [1, 2, 3] == isr for _, replicas, isr in layout.values()), layout
        assert len({leader for leader, _, _ in layout.values()}) > 1  # leadership spread over brokers
        assert (await topic_config(kafka_cluster_bootstrap, name))["min.insync.replicas"] == "2"


def monitor(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MONITOR_SERVICES_DIR": str(workdir)}
    return subprocess.run([sys.executable, "-m", "monitor", "services", *args], capture_output=True, text=True,
                          env=env, timeout=300, check=False)


def test_services_up_starts_both_clusters_and_down_stops_every_node(tmp_path: Path) -> None:
    workdir = tmp_path / "services"
    started = monitor(workdir, "up", "--free-ports", "--only", "kafka,redis", "--redis-cluster",
                      "--redis-replicas", "1", "--kafka-cluster")
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        shown = monitor(workdir, "status", "--json")
        assert shown.returncode == 0, shown.stdout + shown.stderr
        services = json.loads(shown.stdout)["services"]
        assert sorted(services) == ["kafka-cluster", "redis-cluster"]
        assert all(s["answers"] and s["running"] for s in services.values())
        redis, kafka = services["redis-cluster"], services["kafka-cluster"]
        assert len(redis["processes"]) == 6 and len(kafka["processes"]) == 3
        assert redis["address"].startswith("redis+cluster://127.0.0.1:") and redis["options"]["redis_replicas"] == 1
        assert len(kafka["address"].split(",")) == 3
        ports = [port for role, port in redis["ports"].items() if "-bus-" not in role]
        assert all(fields(str(call("127.0.0.1", p, "CLUSTER", "INFO")))["cluster_state"] == "ok" for p in ports)
        first = int(kafka["address"].split(",")[0].rsplit(":", 1)[1])
        assert len(metadata_brokers("127.0.0.1", first)) == 3
        pids = [p["pid"] for s in services.values() for p in s["processes"]]
    finally:
        stopped = monitor(workdir, "down")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert all(start_time(pid) is None for pid in pids)  # every node is gone
    assert monitor(workdir, "status").stdout.startswith("nothing started")
