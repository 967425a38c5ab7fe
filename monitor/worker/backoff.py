"""The worker's one retry pause: doubling from a first delay up to a cap (Redis or Kafka unreachable, an
outbox that cannot be produced, a message that failed once). Each caller keeps its own loop, since what
it retries on and logs differs; this holds the arithmetic and the sleep, so they cannot drift apart.

>>> backoff = Backoff(0.5, 3.0)
>>> [backoff.advance() for _ in range(5)]
[0.5, 1.0, 2.0, 3.0, 3.0]
"""

from __future__ import annotations

import asyncio


class Backoff:
    """Pauses of ``first``, then twice the previous, at most ``most`` seconds."""

    def __init__(self, first: float, most: float) -> None:
        if not 0 < first <= most:
            raise ValueError(f"a backoff needs 0 < first <= most, got {first} and {most}")
        self.delay, self.most = first, most

    def advance(self) -> float:
        """The pause to take now (:attr:`delay`); the next one doubles, up to ``most``."""
        delay = self.delay
        self.delay = min(2 * delay, self.most)
        return delay

    async def pause(self) -> None:
        """Sleep :attr:`delay` seconds (what the caller just logged), then double it."""
        await asyncio.sleep(self.advance())
