"""The Faust adapter: one agent (concurrency 1) over the impression, annotation and deploy topics.

Messages are taken in batches (``batch_size`` within ``batch_wait`` seconds), handled one by one in
offset order through :class:`~monitor.worker.processor.Processor` (each one's state and offset committed
to Redis in one transaction), then the batch's outbox entries (dead letters, annotation requests,
fan-out annotations) are produced and awaited before Faust acknowledges the batch. One agent for all
three topics means one partition's impressions and annotations are never handled concurrently.

Offsets in Redis make redelivery harmless; Faust's own commits only decide where a restart resumes.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faust
from redis.asyncio import Redis

from monitor.alerting.alertmanager import AlertmanagerClient
from monitor.pipeline.redis_state import RedisState
from monitor.worker.canary import alert_loop
from monitor.worker.http import HttpServer
from monitor.worker.processor import Consumed, Entry, Processor
from monitor.worker.settings import WorkerSettings

log = logging.getLogger("monitor.worker")


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


def build(settings: WorkerSettings) -> Runtime:
    topics = settings.topics
    default_dir = Path(tempfile.gettempdir()) / "search-relevance-monitor" / settings.app_id
    datadir = Path(settings.datadir or default_dir)
    datadir.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        settings.app_id,
        broker=f"kafka://{settings.kafka_bootstrap}",
        store="memory://",
        datadir=str(datadir),
        web_enabled=False,
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
    )
    raw: dict[str, Any] = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw",
                           "value_serializer": "raw", "partitions": settings.partitions}
    source = app.topic(topics.impressions, topics.annotations, topics.deploys, **raw)
    sinks = {name: app.topic(name, **raw)
             for name in (topics.dead_letters, topics.requests, topics.annotations)}
    redis = Redis.from_url(settings.redis_url, socket_timeout=10, socket_connect_timeout=5,
                           health_check_interval=30)
    state = RedisState(redis, settings.stream, settings.grade_scale(), settings.partitions,
                       prefix=settings.redis_prefix)
    runtime = Runtime(settings, app, redis, state, Processor(state, topics), sinks)

    async def send(entries: Sequence[Entry]) -> None:
        pending = [await sinks[e.topic].send(key=e.key, value=e.value, headers=list(e.headers))
                   for e in entries]
        await asyncio.gather(*pending)

    @app.agent(source, concurrency=1)
    async def process(stream: faust.StreamT[bytes]) -> None:
        batches = stream.take_events(settings.batch_size, within=settings.batch_wait)  # type: ignore[attr-defined]
        async for batch in batches:
            consumed = [Consumed(e.message.topic, e.message.partition, e.message.offset, e.message.key,
                                 e.message.value) for e in batch]
            await runtime.processor.handle_batch(consumed)
            await runtime.processor.drain([c.partition for c in consumed], send)

    server = HttpServer(runtime)

    if settings.alertmanager_url:
        client = AlertmanagerClient(settings.alertmanager_url)

        @app.task  # type: ignore[untyped-decorator]
        async def send_alerts() -> None:
            await alert_loop(state, settings.canary(), client, settings.alerts(), settings.alert_interval)

    @app.task  # type: ignore[untyped-decorator]
    async def serve_http() -> None:
        await server.start()

    return runtime
