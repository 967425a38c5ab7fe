"""The worker past one machine, on real clusters (issue 17): a stream of the end-to-end test's shape
(``make_run`` of tests/support/worker_e2e.py, 2,000 sessions: about 32,000 messages with late, corrected,
query-level and never-coming labels, deploys and 2% invalid events) through real ``monitor worker``
processes, each run ending in the state every end-to-end test requires (``finish``: every relevance and
canary gauge equal (1e-9) to what the in-process core exports, the 24h window equal to the offline
recomputation from the simulator's truth, dead letters exactly once in the state and every one on the
topic):

* on a Redis Cluster of three primaries, one replica each (the partitions' keys on all three);
* on the same cluster, the primary holding two of the four partitions killed (SIGKILL) a third of the way
  through: its replica is promoted and the same worker process follows (connection errors, CLUSTERDOWN
  and MOVED waited out), losing nothing;
* on three Kafka brokers with replication factor 3 and ``min.insync.replicas`` 2, the broker leading a
  source partition killed a third of the way through and restarted 5 s later: nothing lost, nothing
  counted twice.

A last test shows the guard underneath a failover that does lose writes: the replica of a partition's
primary is behind (it was down) when the primary dies and is promoted without the last commits; the next
batch finds Redis behind its offsets and the messages are read again from Kafka and applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from redis.crc import key_slot

from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.services.kafka_cluster import KafkaClusterServer
from monitor.services.process import ServiceError
from monitor.services.redis_cluster import RedisClusterNode, RedisClusterServer
from monitor.sim.records import SimEvent
from monitor.store.client import connect
from monitor.store.writer import RedisState
from monitor.worker.processor import Consumed, Processor
from monitor.worker.produce import produce
from monitor.worker.reread import fetch_range
from monitor.worker.settings import Topics
from monitor.worker.topics import ensure_topics
from tests.fixtures.services import ClusterHandle
from tests.support.kafka_admin import partition_layout
from tests.support.worker_e2e import Progress, Run, finish, make_run, new_group
from tests.support.worker_harness import Group, parse_metrics

pytestmark = pytest.mark.integration

CLUSTER_SESSIONS = 2000
BROKER_DOWN = 5.0


@pytest.fixture(scope="module")
def run(kafka_bootstrap: str) -> Run:
    return make_run(kafka_bootstrap, CLUSTER_SESSIONS, seed=24)


def metric(worker_metrics: str, name: str) -> float:
    return sum(v for (n, _), v in parse_metrics(worker_metrics).items() if n == name)


def redis_cluster(handle: ClusterHandle) -> RedisClusterServer:
    cluster = handle.group
    assert isinstance(cluster, RedisClusterServer)
    return cluster


def wait_for(condition: Callable[[], bool], seconds: float, what: str,
             why: Callable[[], str] = lambda: "") -> float:
    """Seconds until ``condition`` holds; fails after ``seconds`` saying ``what`` and ``why()``."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < seconds, f"{what} within {seconds:.0f} s {why()}"
        time.sleep(0.1)
    return time.monotonic() - started


def serving(cluster: RedisClusterServer, slot: int) -> int | None:
    """The port of the live primary serving ``slot``, or None while none does (mid-failover)."""
    try:
        return cluster.primary_for_slot(slot).port
    except ServiceError:
        return None


def restore(cluster: RedisClusterServer) -> None:
    """Start the nodes a test stopped or killed (a former primary rejoins as a replica) and wait until the
    whole cluster is healthy, for the tests after it."""
    for node in cluster.redis_nodes:
        if node.process is None or not node.process.alive():
            node.start(die_with_parent=True)
            node.wait_ready()
    wait_for(cluster.answers, 60, "the cluster whole again", cluster.why_not)


def test_a_worker_on_a_redis_cluster_equals_in_process_and_offline(
        run: Run, redis_cluster_url: str, tmp_path: Path, group_factory: list[Group]) -> None:
    group = new_group(run, redis_cluster_url, tmp_path, group_factory, "cluster")
    started = time.monotonic()
    worker = group.start()
    twice = finish(run, group, worker)
    elapsed = time.monotonic() - started
    assert twice == 0  # nothing went wrong: no dead letter was published twice
    shown = worker.metrics_text()
    assert metric(shown, "search_relevance_redis_retries_total") == 0
    assert metric(shown, "search_relevance_redis_memory_bytes") > 0  # INFO summed over the primaries
    assert group.restarts_seen() == []
    canary = group.cli("canary", "--json")  # monitor canary reads the cluster too
    assert canary.returncode in (0, 1), canary.stderr  # 1: a regression (the stream has one), 2: failure
    rows = json.loads(canary.stdout)
    exported = {(dict(labels)["bucket"], dict(labels)["metric"]) for (name, labels), _ in run.expected.items()
                if name == "search_relevance_canary_estimate"}
    assert {(r["bucket"], r["metric"]) for r in rows} == exported and exported
    print(f"\n{run.messages} messages through one worker on a 3-primary Redis Cluster in {elapsed:.1f} s "
          f"({run.messages / elapsed:.0f}/s)")


def test_a_primary_killed_mid_stream_is_replaced_by_its_replica_and_nothing_is_lost(
        run: Run, redis_cluster_service: ClusterHandle, tmp_path: Path, group_factory: list[Group]) -> None:
    cluster = redis_cluster(redis_cluster_service)
    slot = key_slot(b"{g2}")  # partitions 2 and 3 (groups {g2} and {g3}) share the first primary's slots
    victim = cluster.primary_for_slot(slot)
    assert victim is cluster.primary_for_slot(key_slot(b"{g3}"))
    victim_id = next(v.id for v in cluster.topology() if v.port == victim.port)
    replicas = {v.port for v in cluster.topology() if v.primary_id == victim_id}
    group = new_group(run, redis_cluster_service.address, tmp_path, group_factory, "failover")
    progress = Progress(redis_cluster_service.address, group)
    worker = group.start()
    try:
        before = progress.wait(run.messages / 3)
        victim.kill()
        promoted = wait_for(lambda: serving(cluster, slot) in replicas, 30, "a replica promoted")
        finish(run, group, worker)
    finally:
        restore(cluster)
    assert before < run.messages
    shown = worker.metrics_text()
    assert metric(shown, "search_relevance_redis_retries_total") > 0  # the worker did see its primary go
    assert metric(shown, "search_relevance_processing_retries_total") == 0  # and never took it for a bug
    assert worker.process.poll() is None and group.restarts_seen() == []
    print(f"\nprimary of {{g2}},{{g3}} killed at {before} of {run.messages} messages; replica promoted "
          f"{promoted:.1f} s later")


def test_a_kafka_broker_killed_mid_stream_and_restarted_loses_and_doubles_nothing(
        kafka_cluster_service: ClusterHandle, redis_url: str, tmp_path: Path, group_factory: list[Group]) -> None:
    brokers = kafka_cluster_service.group
    assert isinstance(brokers, KafkaClusterServer)
    run = make_run(kafka_cluster_service.address, CLUSTER_SESSIONS, seed=25, replication=3)
    group = new_group(run, redis_url, tmp_path, group_factory, "broker-killed")
    progress = Progress(redis_url, group)
    layout = asyncio.run(partition_layout(run.stream.bootstrap, run.stream.topics["impressions"]))
    assert all(replicas == [1, 2, 3] == isr for _, replicas, isr in layout.values())
    victim = brokers.kafka_nodes[layout[0][0] - 1]  # the leader of impressions partition 0
    worker = group.start()
    before = progress.wait(run.messages / 3)
    victim.kill()
    try:
        time.sleep(BROKER_DOWN)
        during = progress.applied()
    finally:
        victim.start(die_with_parent=True)
        victim.wait_ready()
    finish(run, group, worker)
    assert before <= during < run.messages  # killed mid-stream
    assert worker.process.poll() is None and group.restarts_seen() == []  # the same process, no help
    for topic in (run.stream.topics["impressions"], group.outputs.dead_letters):
        wait_for(lambda t=topic: all(isr == [1, 2, 3] for _, _, isr in asyncio.run(
            partition_layout(run.stream.bootstrap, t)).values()), 60, f"{topic} fully in sync again")
    print(f"\nbroker {victim.node_id} killed at {before} of {run.messages} messages, back {BROKER_DOWN:.0f} s later")


async def test_a_promoted_replica_without_the_last_commits_is_caught_up_from_kafka(
        kafka_bootstrap: str, redis_cluster_service: ClusterHandle) -> None:
    cluster = redis_cluster(redis_cluster_service)
    tag = uuid.uuid4().hex[:8]
    topics = Topics(f"lost-{tag}-i", f"lost-{tag}-a", f"lost-{tag}-d", f"lost-{tag}-dead", f"lost-{tag}-req")
    await ensure_topics(kafka_bootstrap, topics, 1)
    deploys = [SimEvent("deploys", f"r{n}".encode(), json.dumps(
        {"type": "deploy", "kind": "deploy", "ranker": f"r{n}", "ts": 100.0 + n}).encode(), 100.0 + n)
        for n in range(60)]
    assert await produce(kafka_bootstrap, {"deploys": topics.deploys}, deploys) == 60
    consumed = await fetch_range(kafka_bootstrap, {}, topics.deploys, 0, 0, 60, 100)
    assert [c.offset for c in consumed] == list(range(60))

    async def fetch(topic: str, partition: int, start: int, end: int, limit: int) -> list[Consumed]:
        return await fetch_range(kafka_bootstrap, {}, topic, partition, start, end, limit)

    client = connect(cluster.address, socket_timeout=5, socket_connect_timeout=2)
    state = RedisState(client, StreamConfig(budget={"head": 1e9, "torso": 1e9, "tail": 1e9}), FOUR_LEVEL_SCALE, 1,
                       prefix=f"lost-{tag}", clock=lambda: None)
    processor = Processor(state, topics, retry_delay=0.1, fetch=fetch)
    slot = key_slot(b"{g0}")  # the one partition's group
    primary = cluster.primary_for_slot(slot)
    primary_id = next(v.id for v in cluster.topology() if v.port == primary.port)
    replica = next(n for n in cluster.redis_nodes
                   if n.port in {v.port for v in cluster.topology() if v.primary_id == primary_id})
    try:
        for at in range(0, 20, 5):
            await processor.handle_batch(consumed[at:at + 5])
        wait_for(lambda: cluster.healthy([replica]) is None and _synced(primary, replica), 10, "replica in sync")
        replica.stop()  # its copy now ends at offset 19
        for at in range(20, 40, 5):  # acknowledged by the primary alone
            await processor.handle_batch(consumed[at:at + 5])
        primary.kill()
        replica.start(die_with_parent=True)
        replica.wait_ready()
        replica.call("CONFIG", "SET", "cluster-replica-validity-factor", "0")  # promote it, however old
        wait_for(lambda: serving(cluster, slot) == replica.port, 30, "the stale replica promoted")
        assert await state.applied(0) == {topics.deploys: 19}  # Redis lost acknowledged commits
        await processor.handle_batch(consumed[40:60])
        assert processor.replayed == 20  # offsets 20..39 read again from Kafka
        assert await state.applied(0) == {topics.deploys: 59}
        assert [d.ranker for d in await state.deploys()] == [f"r{n}" for n in range(60)]  # each once
    finally:
        await client.aclose()
        with contextlib.suppress(OSError, ServiceError):
            replica.call("CONFIG", "SET", "cluster-replica-validity-factor", "10")
        restore(cluster)


def _synced(primary: RedisClusterNode, replica: RedisClusterNode) -> bool:
    """True if the replica has acknowledged everything its primary has written."""
    info = primary.info("replication")
    offsets = [v for k, v in info.items() if k.startswith("slave") and f"port={replica.port}," in v]
    return bool(offsets) and offsets[0].split("offset=")[1].split(",")[0] == info["master_repl_offset"]
