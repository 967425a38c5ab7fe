"""What the consumer (:mod:`.app`) and the HTTP server (:mod:`.http`) share in one worker process.

Its own module so that both import it and neither imports the other (``app`` builds the HTTP server).
:class:`RuntimeView` is the HTTP server's view of a ``Runtime`` (:class:`monitor.worker.http.WorkerView`):
the rollup (one Redis read), the consumer's lag and group membership, the exporter's role, the deploys
topic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import faust

from monitor.store.client import RedisClient
from monitor.store.writer import RedisState
from monitor.worker.consumer import BatchConsumer
from monitor.worker.metrics import PipelineView
from monitor.worker.processor import Processor
from monitor.worker.rollup import Rollup
from monitor.worker.rollup_lease import RollupLease
from monitor.worker.settings import WorkerSettings


@dataclass
class Runtime:
    """What the consumer and the HTTP server share in one worker process."""

    settings: WorkerSettings
    app: faust.App
    redis: RedisClient
    state: RedisState
    processor: Processor
    consumer: BatchConsumer
    exporter: RollupLease

    def consuming(self) -> bool:
        """Joined the consumer group (an assignment done) and not rebalancing now."""
        return self.consumer.consuming()


class RuntimeView:
    """The HTTP server's view of a worker process (:class:`monitor.worker.http.WorkerView`)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    async def rollup(self) -> Rollup | None:
        return await self.runtime.exporter.read()

    async def pipeline(self) -> PipelineView:
        runtime = self.runtime
        processor = runtime.processor
        return PipelineView(consumed=dict(processor.consumed), lag=self.lag(), waiting=None,
                            redis_memory=None, redis_retries=processor.retries,
                            quiet_closed=processor.quiet_closed,
                            processing_retries=processor.processing_retries,
                            label_waits=runtime.consumer.label_waits,
                            stage_cpu=dict(runtime.state.cpu), exporter=runtime.exporter.holding,
                            rollups_computed=runtime.exporter.computed)

    def lag(self) -> dict[tuple[str, int], int]:
        """(topic, partition) → messages behind the log end, for the source partitions this worker holds."""
        runtime = self.runtime
        out: dict[tuple[str, int], int] = {}
        sources = runtime.settings.topics.sources()
        for topic, partition in runtime.consumer.assignment():
            end = runtime.consumer.highwater(topic, partition) if topic in sources else None
            if end is None:
                continue
            done = runtime.processor.positions.get((topic, partition), -1) + 1
            out[(topic, partition)] = max(end - done, 0)
        return out

    async def problems(self) -> list[str]:
        problems = []
        try:
            await self.runtime.redis.ping()
            problems.extend(await self.runtime.exporter.problems())
        except Exception as error:
            problems.append(f"redis: {type(error).__name__}")
        if not self.runtime.consuming():
            problems.append("kafka: not in the consumer group yet (or rebalancing)")
        return problems

    async def send_deploy(self, key: bytes, value: bytes) -> tuple[int | None, int | None]:
        runtime = self.runtime
        sink = runtime.app.topic(runtime.settings.topics.deploys, key_type=bytes, value_type=bytes,
                                 key_serializer="raw", value_serializer="raw")
        sent = await sink.send(key=key, value=value)
        metadata: Any = await sent
        return getattr(metadata, "partition", None), getattr(metadata, "offset", None)
