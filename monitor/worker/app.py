"""The Faust app of ``monitor worker``: the batch consumer, the outbox's producer, the periodic checks, HTTP.

Messages of the impression, annotation and deploy topics are taken in batches (``batch_size`` within
``batch_wait`` seconds) by :class:`~monitor.worker.consumer.BatchConsumer` (aiokafka in the consumer
group, inside this app, whose own per-event consumer is off: see that module for why), handed to
:class:`~monitor.worker.processor.Processor` (each partition's messages committed to Redis with their
offsets in one transaction, the partitions of a batch concurrently), then the batch's outbox entries
(dead letters, annotation requests, fan-out annotations) are produced and awaited before the offsets are
committed to Kafka. One consumer for all three topics, and one batch at a time, means one partition's
impressions and annotations are never handled concurrently.

Offsets in Redis make redelivery harmless; Kafka's committed offsets only decide where a restart resumes.
Redis's offsets are the truth (docs/worker.md, "Failure and recovery"): when Redis is behind what a batch
needs (it lost acknowledged writes), the processor reads the missing messages from Kafka again with
:func:`~monitor.worker.reread.fetch_range` and applies them first; every ``VERIFY_INTERVAL`` seconds
:meth:`~monitor.worker.processor.Processor.verify` makes the same check for partitions without traffic;
a rebalance makes the processor forget what it knew of the partitions. The same round closes the due
sessions of partitions without an impression for ``idle_timeout`` seconds (quiet partitions: see
:func:`~monitor.core.stream.join.quiet_horizon`). Producing the outbox waits out a Kafka outage (retried
with backoff) instead of failing the consumer. Every worker also runs the exporter's loop
(:mod:`~monitor.worker.rollup_lease`): the one holding its lease computes the rollup of what ``/metrics``
exports, which every worker's HTTP server and alert loop read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import tempfile
from collections.abc import Sequence
from pathlib import Path

import faust

from monitor.alerting.alertmanager import AlertmanagerClient
from monitor.store.batch import LayoutError
from monitor.store.client import connect
from monitor.store.writer import RedisState
from monitor.worker.backoff import Backoff
from monitor.worker.consumer import BatchConsumer, NoConsumer
from monitor.worker.http import HttpServer
from monitor.worker.outbox import Entry
from monitor.worker.processor import Consumed, Processor
from monitor.worker.reread import committed_offsets, fetch_range
from monitor.worker.rollup_lease import RollupLease
from monitor.worker.runtime import Runtime, RuntimeView
from monitor.worker.settings import WorkerSettings
from monitor.worker.verdicts import Verdicts, alert_loop

log = logging.getLogger("monitor.worker")


class App(faust.App):
    """A Faust app that does not consume by itself (:class:`~monitor.worker.consumer.NoConsumer`)."""

    BootStrategy = NoConsumer

VERIFY_INTERVAL = 5.0
"""Seconds between checks that Redis still holds what this worker applied (Processor.verify)."""

FIRST_ROUND_WAIT = 30.0
"""Seconds the HTTP server waits, at most, for the exporter's first round before it starts."""


def client_name() -> str:
    """The name of this process's Redis connections (``CLIENT LIST``, ``SLOWLOG``): which worker sent what."""
    return f"monitor-worker:{socket.gethostname()}:{os.getpid()}"


async def checked_layout(state: RedisState) -> None:
    """The state's layout checked before the first message (``RedisState.check_layout``): a worker whose
    MONITOR_REDIS_GROUPS differs from the state's, or state from before groups, stops with the reason."""
    backoff = Backoff(1.0, 30.0)
    while True:
        try:
            await state.check_layout()
            return
        except LayoutError as error:
            log.critical("%s", error)
            os._exit(2)  # nothing consumed or committed yet; the supervisor sees the refusal
        except Exception as error:  # Redis unreachable: wait for it, as the consumer would
            log.warning("cannot check Redis's layout (%s: %s); retrying in %.0f s", type(error).__name__,
                        error, backoff.delay)
            await backoff.pause()


def build(settings: WorkerSettings) -> Runtime:
    topics = settings.topics
    default_dir = Path(tempfile.gettempdir()) / "search-relevance-monitor" / settings.app_id
    datadir = Path(settings.datadir or default_dir)
    datadir.mkdir(parents=True, exist_ok=True)
    app = App(
        settings.app_id,
        broker=f"kafka://{settings.kafka_bootstrap}",
        broker_credentials=settings.kafka_security().faust_credentials(),  # SASL and/or TLS, or None
        store="memory://",
        datadir=str(datadir),
        web_enabled=False,
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        producer_acks=-1,
    )
    redis = connect(settings.redis_url, socket_timeout=10, socket_connect_timeout=5,
                    health_check_interval=30, client_name=client_name(), **settings.redis_options())
    state = RedisState(redis, settings.stream, settings.grade_scale(), settings.partitions,
                       prefix=settings.redis_prefix, groups=settings.redis_groups)
    kafka_options = settings.kafka_security().aiokafka_options()

    async def fetch(topic: str, partition: int, start: int, end: int, limit: int) -> list[Consumed]:
        return await fetch_range(settings.kafka_bootstrap, kafka_options, topic, partition, start, end, limit)

    processor = Processor(state, topics, fetch=fetch, catch_up_size=settings.batch_size)

    async def send(entries: Sequence[Entry]) -> None:
        """Produce outbox entries and wait for the broker's acks; a failure (Kafka down longer than the
        producer waits) sends them all again after a pause: at least once, never dropped."""
        backoff = Backoff(1.0, 30.0)
        while True:
            try:
                pending = [await app.producer.send(e.topic, e.key, e.value, None, None, list(e.headers))
                           for e in entries]  # Faust's producer, without a topic's per-message layers
                await asyncio.gather(*pending)
                return
            except Exception as error:
                log.warning("cannot produce %d outbox entries (%s: %s); retrying in %.0f s", len(entries),
                            type(error).__name__, error, backoff.delay)
                await backoff.pause()

    consumer = BatchConsumer(settings, processor, send)
    exporter = RollupLease(state, settings.canary(), settings.rollup_interval,
                           max_age=settings.max_rollup_age)
    runtime = Runtime(settings, app, redis, state, processor, consumer, exporter)

    @app.task  # type: ignore[untyped-decorator]
    async def consume() -> None:
        loop = type(asyncio.get_running_loop())
        log.info("event loop: %s.%s (MONITOR_EVENT_LOOP=%s)", loop.__module__, loop.__qualname__,
                 settings.event_loop)
        await checked_layout(state)
        await consumer.run()

    async def verify() -> None:
        """Redis's applied offsets against what this worker applied (or, for a partition it has had no
        message of, the group's committed offset): what Redis lost is applied again and published."""
        if not runtime.consuming():
            return
        sources = topics.sources()
        assigned = [(topic, partition) for topic, partition in consumer.assignment() if topic in sources]
        unknown = [key for key in assigned if key not in processor.positions]
        committed = {} if not unknown else await committed_offsets(settings.kafka_bootstrap, kafka_options,
                                                                   settings.app_id, unknown)
        caught_up = await processor.verify(assigned, committed)
        if caught_up:
            await processor.drain(caught_up, send)
        closed = await processor.close_quiet({p for t, p in assigned if t == topics.impressions},
                                             settings.idle_timeout)
        if closed:
            log.info("closed %d sessions of quiet partitions", closed)

    @app.task  # type: ignore[untyped-decorator]
    async def verify_redis() -> None:
        while True:
            await asyncio.sleep(VERIFY_INTERVAL)
            try:
                await verify()
            except Exception as error:  # Kafka or Redis unreachable: the next round tries again
                log.warning("checking Redis's offsets failed (%s: %s); next try in %.0f s",
                            type(error).__name__, error, VERIFY_INTERVAL)

    server = HttpServer(RuntimeView(runtime), settings)

    @app.task  # type: ignore[untyped-decorator]
    async def export() -> None:
        await exporter.run()

    if settings.alertmanager_url:
        client = AlertmanagerClient(settings.alertmanager_url)

        async def verdicts() -> Verdicts | None:
            rollup = await exporter.read()
            return None if rollup is None else rollup.shared.verdicts

        @app.task  # type: ignore[untyped-decorator]
        async def send_alerts() -> None:
            await alert_loop(verdicts, client, settings.alerts(), settings.alert_interval)

    @app.task  # type: ignore[untyped-decorator]
    async def serve_http() -> None:
        # after the exporter's first round (bounded): a worker that serves /metrics has a rollup to export
        # as soon as one exists (it computed it, or another worker had)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(exporter.started.wait(), timeout=FIRST_ROUND_WAIT)
        await server.start()

    return runtime
