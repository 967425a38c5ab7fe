"""The stream core with its state in a real Redis: the same numbers as in process, and redelivery-safe."""

from __future__ import annotations

import json
import math
import random
import uuid

import pytest
from redis.asyncio import Redis

from monitor.core.canary import CanaryConfig
from monitor.core.events import Deploy
from monitor.core.grades import SEED_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.pipeline.memory import MemoryPipeline, partition_of
from monitor.pipeline.redis_state import Message, RedisState
from tests.unit.test_stream_core import interleave, random_stream

pytestmark = pytest.mark.integration

CONFIG = StreamConfig(join_window=300, min_coverage=0.6, budget={"head": 1e9, "torso": 1e9, "tail": 1e9})


def with_query_labels(events: list[tuple[str, bytes, bytes]]) -> list[tuple[str, bytes, bytes]]:
    """Add query-level judgments for two queries (fanned out to their sessions in the join)."""
    out = list(events)
    for sid in ("s3", "s7"):
        grades = [{"doc_id": f"d{sid[1:]}-{j}", "grade": j % 4} for j in range(50)]
        out.append(("annotations", f"q-{sid}".encode(),
                    json.dumps({"type": "annotation", "query": f"q-{sid}", "grades": grades}).encode()))
    return out


async def run_through_redis(state: RedisState, events: list[tuple[str, bytes, bytes]], partitions: int,
                            redeliver: bool = False, batch: int = 1) -> None:
    offsets: dict[tuple[int, str], int] = {}
    delivered: list[tuple[int, str, int, bytes]] = []
    for topic, key, value in events:
        partition = partition_of(key, partitions)
        offset = offsets.get((partition, topic), -1) + 1
        offsets[(partition, topic)] = offset
        delivered.append((partition, topic, offset, value))
    rng = random.Random(batch)
    at = 0
    while at < len(delivered):  # batches of up to ``batch`` messages of one partition, as the worker takes them
        partition = delivered[at][0]
        size = rng.randint(1, batch)
        chunk = []
        while at < len(delivered) and len(chunk) < size and delivered[at][0] == partition:
            chunk.append(delivered[at])
            at += 1
        outcomes = await state.handle_batch(partition, [Message(t, o, v) for _, t, o, v in chunk])
        for outcome in outcomes:
            for session_id, annotation in outcome.fan_out:  # the worker republishes these, keyed by session
                await state.apply_event(partition_of(session_id.encode(), partitions), annotation)
    if redeliver:  # a restart after a crash re-reads from the last commit: everything again
        for partition, topic, offset, value in delivered:
            assert (await state.handle(partition, topic, offset, value)).skipped
    await state.advance(math.inf)


@pytest.mark.parametrize(("partitions", "batch"), [(1, 1), (3, 1), (3, 40)])
async def test_redis_state_equals_in_process_and_ignores_redelivery(redis_url: str, partitions: int,
                                                                    batch: int) -> None:
    events = with_query_labels(interleave(random_stream(11, sessions=150)[0], random.Random(5)))
    events.append(("impressions", b"bad", b'{"type": "impression", "schema": 3}'))
    memory = MemoryPipeline(CONFIG, SEED_SCALE, partitions=partitions)
    for topic, key, value in events:
        memory.submit(topic, key, value)
    memory.advance(math.inf)
    expected = memory.snapshot()

    redis = Redis.from_url(redis_url)
    try:
        state = RedisState(redis, CONFIG, SEED_SCALE, partitions, prefix=f"test-{uuid.uuid4().hex[:8]}")
        await run_through_redis(state, events, partitions, redeliver=True, batch=batch)
        got = await state.snapshot()
        everything = [Deploy("canary_start", "any", -1e12)]  # a period from the start: every epoch read
        history = await state.history(everything, CanaryConfig(baseline_window=1.0))
    finally:
        await redis.aclose()

    assert got.watermark == expected.watermark
    assert set(got.windows) == set(expected.windows)
    for key, stats in expected.windows.items():
        for name, value in stats.items():
            assert got.windows[key].get(name, 0.0) == pytest.approx(value, abs=1e-9), (key, name)
    assert {k: v for k, v in got.counters.items() if v} == pytest.approx(
        {k: v for k, v in expected.counters.items() if v})
    assert expected.counters[("", "dead_letter:unknown_schema")] == 1
    assert sum(s.get("sessions", 0.0) for s in expected.windows.values()) > 100

    # the canary history: the same epochs (whose sum is the net totals) and the same first/last sightings
    wanted = memory.history()
    assert history.seen == wanted.seen and {arm for arm, _ in wanted.seen} == {"plain", "canary"}
    assert set(history.epochs) == set(wanted.epochs) and len(wanted.epochs) > 1
    for index, groups in wanted.epochs.items():
        for group, stats in groups.items():
            assert history.epochs[index][group] == pytest.approx(stats, abs=1e-9), (index, group)
    summed, totals = wanted.totals(), expected.totals()
    assert set(summed) == set(totals)
    for group, stats in totals.items():
        assert summed[group] == pytest.approx(stats, abs=1e-9), group
