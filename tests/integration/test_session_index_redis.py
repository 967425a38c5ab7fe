"""The session index in a real Redis (monitor/store/session_index.py): impressions of sessions without state
read nothing of them, and what another writer, an upgrade or early labels put in Redis is never missed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.counters import Counter
from monitor.store import prefetch as prefetch_module
from monitor.store.batch import Message
from monitor.store.session_index import SINCE
from monitor.store.writer import RedisState
from tests.support.latest_grade import CONFIG, graded, shown

pytestmark = pytest.mark.integration


@pytest.fixture
def read_sessions(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[str]]]:
    """The sessions each batch read (its early-label keys: the same sessions as its records'), for the
    batches that read any."""
    asked: list[list[str]] = []
    original = prefetch_module.queue_mget

    def spy(pipe: Any, keys: list[str]) -> None:
        if any(":e:" in k for k in keys):
            asked.append([k.rsplit(":", 1)[1] for k in keys])
        original(pipe, keys)

    monkeypatch.setattr(prefetch_module, "queue_mget", spy)
    yield asked


class Feed:
    """One partition's messages, with their offsets, to any writer (each a worker of the same state)."""

    def __init__(self) -> None:
        self.offsets = {"impressions": -1, "annotations": -1}

    async def send(self, state: RedisState, *events: tuple[str, bytes, bytes]) -> list[Any]:
        messages = []
        for topic, _, value in events:
            self.offsets[topic] += 1
            messages.append(Message(topic, self.offsets[topic], value))
        return await state.handle_batch(0, messages)


def writer(redis: Redis, prefix: str) -> RedisState:
    return RedisState(redis, CONFIG, FOUR_LEVEL_SCALE, 1, prefix=prefix, clock=lambda: None)


async def test_only_sessions_with_state_are_read_and_another_writers_record_is_seen(
        redis_url: str, read_sessions: list[list[str]]) -> None:
    redis = Redis.from_url(redis_url)
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    try:
        one, other, feed = writer(redis, prefix), writer(redis, prefix), Feed()
        await feed.send(one, shown("s1"))  # the first commit: the index starts (no record before it)
        assert (await redis.hget(one.keys.p(0, "meta"), SINCE)) == b"-1e300"
        await feed.send(one, shown("s2"), shown("s3"))  # read whole once, with the index
        await feed.send(one, shown("s4"), shown("s1", 1001.0), graded("s9", "a", 2, None))
        # s4 is new: not read; s1 has a record: read (a duplicate); an annotation's session: always read
        assert read_sessions[-1] == ["s1", "s9"]
        await feed.send(other, shown("s5"))  # another worker (a rebalance): one knows nothing of s5
        outcomes = await feed.send(one, shown("s5", 1002.0), shown("s9"))
        assert read_sessions[-1] == ["s5", "s9"]  # the commit counter moved: the index read again
        snapshot = await one.snapshot()
        sampled = sum(v for c, v in snapshot.counters.items() if c.name == "sampled")
    finally:
        await redis.aclose()
    assert snapshot.counters[Counter("duplicate_impressions")] == 2  # s1 and s5, each sampled once
    assert sampled == 6  # s1..s5 and s9
    record = outcomes[1].transition.records[0]
    assert record.session_id == "s9" and record.labels == {"a": 2}  # the label that came first joined


async def test_records_written_before_the_index_are_read_until_state_ttl_has_passed(
        redis_url: str, read_sessions: list[list[str]]) -> None:
    redis = Redis.from_url(redis_url)
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    try:
        old, feed = writer(redis, prefix), Feed()
        await feed.send(old, shown("s1"), shown("s2"))
        # as a worker before the index left it: no sxs, no sx
        await redis.hdel(old.keys.p(0, "meta"), SINCE)
        await redis.delete(old.keys.p(0, "sx"))
        new = writer(redis, prefix)
        await feed.send(new, shown("s3", 1010.0))
        assert (await redis.hget(new.keys.p(0, "meta"), SINCE)) == b"1000.0"  # indexed from this watermark
        outcomes = await feed.send(new, shown("s1", 1020.0), shown("s4", 1020.0))
        assert read_sessions[-1] == ["s1", "s4"]  # not trusted yet: every session read
        assert outcomes[0].transition.counters[0][0] == Counter("duplicate_impressions")
        later = 1020.0 + CONFIG.state_ttl + 1.0  # the watermark past sxs + state_ttl: trusted from here on
        await feed.send(new, shown("s5", later))
        await feed.send(new, shown("s6", later))
        await feed.send(new, shown("s7", later), shown("s5", later))
        assert read_sessions[-1] == ["s5"]
        # and the records more than state_ttl behind the watermark left the index in Redis
        indexed = {m.decode() for m in await redis.zrange(new.keys.p(0, "sx"), 0, -1)}
    finally:
        await redis.aclose()
    assert indexed == {"s5", "s6", "s7"}
