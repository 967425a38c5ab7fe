"""``RedisState`` on a real Redis Cluster (three primaries, one replica each) against one redis-server: the
same stream, fed the same way, leaves the same keys and reads back the same snapshot, history, deploys
and health, to the last bit.

The partitions' keys (in their groups' slots, ``{g<G>}``) and the queries' (``{q:<hash>}``) land on all
three primaries, so every kind of write and read crosses shards: the commit script (one slot: the
partition's keys and its group's totals), the batch's prefetch pipeline with its MGETs, the per-query
writes with their merge scripts (queued as EVAL in a cluster pipeline), the readers' pipelines over all
groups, INFO over the primaries, and SCAN over every primary.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from redis.asyncio import RedisCluster

from monitor.core.canary import CanaryConfig
from monitor.core.events import Deploy
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.counters import dead_letter
from monitor.core.stream.history import History
from monitor.core.stream.snapshot import Snapshot
from monitor.store.client import connect
from monitor.store.writer import RedisState
from tests.support.redis_runs import in_process, run_through_redis, with_query_labels
from tests.support.shared_grades import CONFIG as SHARED_CONFIG
from tests.support.shared_grades import shared_stream
from tests.support.streams import interleave, random_stream

pytestmark = pytest.mark.integration

CONFIG = StreamConfig(join_window=300, min_coverage=0.6, budget={"head": 1e9, "torso": 1e9, "tail": 1e9})
PARTITIONS = 6  # in 4 groups: {g2} and {g3} on the first primary's slots, {g0} on the second's, {g1} on the
# third's; partitions 4 and 5 share groups 0 and 1 with partitions 0 and 1
Events = list[tuple[str, bytes, bytes]]


DEPLOYS = [Deploy("deploy", "r2", 1200.0), Deploy("canary_start", "r3", 1500.0, share=0.1),
           Deploy("canary_share", "r3", 1650.0, share=0.25), Deploy("deploy", "r4", 1800.0)]


def deploys(events: Events) -> Events:
    """Two deploys, a canary start and a change of its share among ``events`` (recorded per partition,
    read by ``deploys()``)."""
    out = list(events)
    for n, d in enumerate(DEPLOYS):
        value = {"type": "deploy", "kind": d.kind, "ranker": d.ranker, "ts": d.ts}
        if d.share is not None:
            value["share"] = d.share
        out.insert((n + 1) * len(out) // (len(DEPLOYS) + 1), ("deploys", d.ranker.encode(),
                                                              json.dumps(value).encode()))
    return out


def plain_stream() -> tuple[Events, StreamConfig]:
    events = with_query_labels(interleave(random_stream(11, sessions=100)[0], random.Random(5)))
    events.append(("impressions", b"bad", b'{"type": "impression", "schema": 3}'))
    return deploys(events), CONFIG


def shared() -> tuple[Events, StreamConfig]:
    return interleave(shared_stream(21, sessions=80)[0], random.Random(8)), SHARED_CONFIG


def unbucketed() -> tuple[Events, StreamConfig]:
    """Every other impression without ``query_bucket``: its bucket is estimated from the partition's
    sketch (the sketch-read script, queued in the batch's read pipeline)."""
    events, config = plain_stream()
    out: Events = []
    for n, (topic, key, value) in enumerate(events):
        if topic == "impressions" and n % 2 == 0 and key != b"bad":
            event = json.loads(value)
            event.pop("query_bucket", None)
            value = json.dumps(event).encode()
        out.append((topic, key, value))
    return out, config


@dataclass
class Read:
    """Everything the readers and the key space say after a run."""

    snapshot: Snapshot
    history: History
    deploys: list[Deploy]
    waiting: int
    memory: int
    keys: set[str]
    requests: list[tuple[str, tuple[str, ...], int]]
    primaries: int  # how many primaries hold keys of the run (one server: 1)


async def run(url: str, events: Events, config: StreamConfig) -> Read:
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    client = connect(url, socket_timeout=10)
    try:
        state = RedisState(client, config, FOUR_LEVEL_SCALE, PARTITIONS, prefix=prefix, clock=lambda: None)
        requests = await run_through_redis(state, events, PARTITIONS, redeliver=True, batch=40)
        snapshot = await state.snapshot()
        recorded = await state.deploys()
        everything = [Deploy("canary_start", "any", -1e12)]  # a period from the start: every epoch read
        history = await state.history(everything, CanaryConfig(baseline_window=1.0))
        waiting, memory = await state.health()
        keys = {k.decode() async for k in client.scan_iter(match=f"{prefix}:*", count=500)}
        primaries = 1
        if isinstance(client, RedisCluster):
            primaries = len({client.get_node_from_key(k).name for k in keys})
    finally:
        await client.aclose()
    stripped = {k.removeprefix(prefix) for k in keys}
    return Read(snapshot, history, recorded, waiting, memory, stripped,
                sorted((r.session_id, tuple(r.docs), r.judged) for r in requests), primaries)


@pytest.mark.parametrize("make", [plain_stream, shared, unbucketed],
                         ids=["query-judgments", "shared-grades", "sketch-estimated-buckets"])
async def test_redis_state_on_a_cluster_equals_one_redis_server(
        redis_url: str, redis_cluster_url: str, make: Callable[[], tuple[Events, StreamConfig]]) -> None:
    events, config = make()
    one = await run(redis_url, events, config)
    cluster = await run(redis_cluster_url, events, config)

    assert cluster.primaries == 3  # the run's keys are on every shard
    assert cluster.keys == one.keys and len(one.keys) > 100  # SCAN visited every primary
    assert cluster.requests == one.requests
    assert cluster.snapshot.watermark == one.snapshot.watermark
    assert cluster.snapshot.windows == one.snapshot.windows  # the same float operations in the same order
    assert cluster.snapshot.counters == one.snapshot.counters
    assert (cluster.snapshot.added, cluster.snapshot.removed) == (one.snapshot.added, one.snapshot.removed)
    assert cluster.history.epochs == one.history.epochs and one.history.epochs
    assert cluster.history.queries == one.history.queries
    assert cluster.history.seen == one.history.seen
    assert cluster.deploys == one.deploys
    assert cluster.waiting == one.waiting
    assert cluster.memory > 0 and one.memory > 0

    # and both are the in-process core's numbers
    expected = in_process(events, config, PARTITIONS).snapshot()
    assert set(cluster.snapshot.windows) == set(expected.windows)
    scored = 0.0
    for key, stats in expected.windows.items():
        scored += stats.get("sessions", 0.0)
        for name, value in stats.items():
            if name != "join_lag":  # when shared-grade refreshes came depends on the batches
                assert cluster.snapshot.windows[key].get(name, 0.0) == pytest.approx(value, abs=1e-9), (key, name)
    assert scored > 50
    if make is not shared:
        assert cluster.deploys == DEPLOYS
        assert cluster.snapshot.counters[dead_letter("unknown_schema")] == 1
        assert math.isfinite(cluster.snapshot.watermark)
