"""What a piece of code costs Redis, counted without ``MONITOR``: its round trips (what the client sends, one
``send_packed_command`` per command or pipeline) and the commands the server ran (``INFO commandstats``,
a Lua call's inner commands included). The server's counts are global: measure when nothing else uses it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.connection import Connection

T = TypeVar("T")


class RoundTrips:
    """A client whose connections count what they send (:meth:`client`)."""

    def __init__(self) -> None:
        self.count = 0

    def client(self, url: str) -> Redis:
        counter = self

        class Counting(Connection):
            async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
                counter.count += 1
                await super().send_packed_command(command, check_health)

        return Redis.from_url(url, connection_class=Counting)


async def commands_run(redis: Redis) -> int:
    """Every command the server has run (``INFO commandstats``: the sum of ``calls``)."""
    stats = await redis.info("commandstats")
    return sum(int(row["calls"]) for row in stats.values())


@dataclass(frozen=True)
class Cost:
    round_trips: int
    commands: int


async def measure(redis: Redis, trips: RoundTrips, call: Callable[[], Awaitable[T]]) -> tuple[Cost, T]:
    """``call()``'s round trips through ``trips``'s client and the commands the server ran meanwhile (the
    ``INFO`` that reads them left out: measured on an empty call, once per measurement)."""
    async def nothing() -> None:
        return None

    async def counted(inner: Callable[[], Awaitable[Any]]) -> tuple[int, int, Any]:
        before, sent = await commands_run(redis), trips.count
        result = await inner()
        sent = trips.count - sent
        return await commands_run(redis) - before, sent, result

    idle_commands, idle_trips, _ = await counted(nothing)
    commands, sent, result = await counted(call)
    return Cost(sent - idle_trips, commands - idle_commands), result
