"""Redis, for real: a round trip, and data that survives a restart of redis-server (AOF persistence)."""

from __future__ import annotations

import uuid

import pytest
import redis
import redis.asyncio

from tests.fixtures.services import ServiceHandle

pytestmark = pytest.mark.integration


async def test_round_trip(redis_url: str) -> None:
    client = redis.asyncio.Redis.from_url(redis_url)
    prefix = f"test:{uuid.uuid4().hex[:8]}"
    try:
        await client.set(f"{prefix}:string", "日志 ok", ex=60)
        await client.hset(f"{prefix}:hash", mapping={"sessions": 3, "dcg_sum": 6.5})
        await client.hincrbyfloat(f"{prefix}:hash", "dcg_sum", 1.25)
        assert await client.get(f"{prefix}:string") == "日志 ok".encode()
        assert await client.hgetall(f"{prefix}:hash") == {b"sessions": b"3", b"dcg_sum": b"7.75"}
        assert 0 < await client.ttl(f"{prefix}:string") <= 60
    finally:
        await client.aclose()


def test_data_survives_a_restart_of_redis_server(redis_service: ServiceHandle) -> None:
    prefix = f"test:{uuid.uuid4().hex[:8]}"
    before = redis.Redis.from_url(redis_service.address)
    try:
        assert before.config_get("appendonly") == {"appendonly": "yes"}
        run_id_before = before.info("server")["run_id"]
        for bucket in ("head", "torso", "tail"):
            before.hset(f"{prefix}:{{w1}}:{bucket}", mapping={"sessions": 10, "dcg_sum": 21.5})
            before.hincrby(f"{prefix}:{{w1}}:{bucket}", "sessions", 5)
        before.rpush(f"{prefix}:list", *range(100))
    finally:
        before.close()

    redis_service.restart()

    after = redis.Redis.from_url(redis_service.address)
    try:
        assert after.info("server")["run_id"] != run_id_before, "redis-server was not really restarted"
        for bucket in ("head", "torso", "tail"):
            assert after.hgetall(f"{prefix}:{{w1}}:{bucket}") == {b"sessions": b"15", b"dcg_sum": b"21.5"}
        assert after.lrange(f"{prefix}:list", 0, -1) == [str(i).encode() for i in range(100)]
    finally:
        after.close()
