"""What the agent (:mod:`.app`) and the HTTP server (:mod:`.http`) share in one worker process.

Its own module so that both import it and neither imports the other (``app`` builds the HTTP server).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import faust
from redis.asyncio import Redis

from monitor.pipeline.redis_state import RedisState
from monitor.worker.processor import Processor
from monitor.worker.settings import WorkerSettings


@dataclass
class Runtime:
    """What the agent and the HTTP server share in one worker process."""

    settings: WorkerSettings
    app: faust.App
    redis: Redis
    state: RedisState
    processor: Processor
    sinks: dict[str, Any]

    def consuming(self) -> bool:
        """Joined the consumer group (first rebalance done) and not rebalancing now."""
        return bool(self.app.rebalancing_count > 0 and not self.app.rebalancing)
