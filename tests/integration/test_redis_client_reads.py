"""monitor/store/client.py's reads against a real Redis: a reply already read whole is taken without arming
the read timeout (a pipeline's replies, after the first), and every reply, error and timeout is what
redis-py's own client gives."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio.connection as redis_connection
from redis.asyncio import Redis
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from monitor.store.client import connect

pytestmark = pytest.mark.integration


def counting_timeouts(monkeypatch: pytest.MonkeyPatch) -> list[float | None]:
    """Every read timeout redis-py's connections arm from now on."""
    armed: list[float | None] = []
    original: Callable[..., Any] = redis_connection.async_timeout

    def counted(delay: float | None) -> Any:
        armed.append(delay)
        return original(delay)

    monkeypatch.setattr(redis_connection, "async_timeout", counted)
    return armed


async def a_pipeline(client: Redis, prefix: str) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    pipe.set(f"{prefix}:s", "text")
    pipe.hset(f"{prefix}:h", mapping={"a": 1, "b": "two"})
    pipe.rpush(f"{prefix}:l", *range(30))
    for i in range(40):
        pipe.get(f"{prefix}:s" if i % 2 else f"{prefix}:missing")
        pipe.hgetall(f"{prefix}:h")
    pipe.incr(f"{prefix}:s")  # an error reply (not an integer), in the middle
    pipe.mget([f"{prefix}:s", f"{prefix}:missing", f"{prefix}:s"])
    pipe.lrange(f"{prefix}:l", 0, -1)
    pipe.eval("return {1, 'x', {2, 'y'}}", 0)
    pipe.delete(f"{prefix}:s", f"{prefix}:h", f"{prefix}:l")
    return list(await pipe.execute(raise_on_error=False))


def same(one: list[Any], other: list[Any]) -> bool:
    """Replies equal, error replies by type and message."""
    def plain(value: Any) -> Any:
        return (type(value), str(value)) if isinstance(value, Exception) else value
    return [plain(v) for v in one] == [plain(v) for v in other]


async def test_a_pipelines_replies_are_taken_without_a_timeout_each_and_equal_redis_pys(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ours, theirs = connect(redis_url, socket_timeout=5.0), Redis.from_url(redis_url, socket_timeout=5.0)
    try:
        armed = counting_timeouts(monkeypatch)
        got = await a_pipeline(ours, f"t:{uuid.uuid4().hex}")
        ours_armed = len(armed)
        armed.clear()
        expected = await a_pipeline(theirs, f"t:{uuid.uuid4().hex}")
        assert len(expected) == 88
        assert len(armed) >= len(expected)  # redis-py: one per reply
        # ours: only while a reply is not all there yet (the first; where the server's writes split them)
        assert ours_armed <= len(expected) // 4
        assert same(got, expected)
        assert isinstance(got[83], ResponseError)
        assert got[84] == [b"text", None, b"text"]
        assert got[86] == [1, b"x", [2, b"y"]]
    finally:
        await ours.aclose()
        await theirs.aclose()


async def test_an_error_reply_raises_and_the_connection_goes_on(redis_url: str) -> None:
    client = connect(redis_url, socket_timeout=5.0)
    key = f"t:{uuid.uuid4().hex}"
    try:
        await client.set(key, "text")
        with pytest.raises(ResponseError, match="not an integer"):
            await client.incr(key)
        pipe = client.pipeline(transaction=False)
        pipe.incr(key)
        pipe.get(key)
        with pytest.raises(ResponseError, match="not an integer"):
            await pipe.execute()
        assert await client.get(key) == b"text"  # (the same connection, its replies in step)
        assert await client.delete(key) == 1
    finally:
        await client.aclose()


async def test_a_reply_that_does_not_come_still_times_out(redis_url: str) -> None:
    client = connect(redis_url, socket_timeout=0.3)
    try:
        with pytest.raises(RedisTimeoutError):
            await client.blpop([f"t:{uuid.uuid4().hex}"], timeout=3)  # blocks past the socket timeout
        assert await client.ping() is True  # a new connection in its place
    finally:
        await client.aclose()
