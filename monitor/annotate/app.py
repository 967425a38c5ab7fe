"""The running bridge: HTTP endpoints, set-up and reconciliation, the request consumer, the webhook queue.

Start order: the HTTP endpoints answer first (``/healthz`` says whether the project is known yet); then
the project and its webhook are set up and every task of the project is reconciled (each retried while
Label Studio is down); then the worker's topics are made as the worker makes them (``MONITOR_PARTITIONS``:
a bridge started before the worker no longer leaves a one-partition requests topic behind); only then are
requests read, so a task created just before a crash is known before its request is read again.
Reconciliation repeats every ``reconcile_interval`` seconds. While it reads, the bridge exports its
backlog and the age of the oldest request it holds (:mod:`monitor.annotate.metrics`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # type: ignore[import-untyped]
from aiokafka.errors import CommitFailedError, IllegalStateError  # type: ignore[import-untyped]
from prometheus_client import CollectorRegistry

from monitor.annotate.bridge import Bridge
from monitor.annotate.client import LabelStudio, LabelStudioError
from monitor.annotate.metrics import BridgeMetrics
from monitor.annotate.settings import AnnotateSettings
from monitor.annotate.webhook import BridgeHttp
from monitor.store.client import connect
from monitor.worker.topics import ensure_topics

log = logging.getLogger("monitor.annotate")
T = TypeVar("T")


async def _until_done(what: str, call: Callable[[], Awaitable[T]], metrics: BridgeMetrics) -> T:
    pause = 0.5
    while True:
        try:
            return await call()
        except LabelStudioError as error:
            metrics.label_studio_errors.inc()
            log.warning("%s: %s; retrying in %.1f s", what, error, pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 30.0)


async def _lag(consumer: AIOKafkaConsumer) -> int:
    """Requests in the topic past the consumer's position on its partitions (as of the last fetch)."""
    lag = 0
    for tp in consumer.assignment():
        high = consumer.highwater(tp)
        if high is not None:
            with contextlib.suppress(IllegalStateError):  # unassigned meanwhile
                lag += max(0, high - await consumer.position(tp))
    return lag


async def _consume(bridge: Bridge, consumer: AIOKafkaConsumer) -> None:
    metrics = bridge.metrics
    while True:
        batch = await consumer.getmany(timeout_ms=1000, max_records=500)
        records = [record for records in batch.values() for record in records if record.value is not None]
        stamps = [record.timestamp for record in records if record.timestamp > 0]  # -1: none recorded
        if stamps:
            metrics.holding(min(stamps) / 1000.0)
        metrics.backlog.set(len(records) + await _lag(consumer))
        if records:
            await bridge.handle_requests([record.value for record in records])
        metrics.holding(None)
        if batch:
            try:
                await consumer.commit()
            except (CommitFailedError, IllegalStateError) as error:  # a rebalance: read again, harmlessly
                log.warning("request offsets not committed (%s); the batch will be read again",
                            type(error).__name__)
        metrics.backlog.set(await _lag(consumer))


async def _reconcile_every(bridge: Bridge, seconds: float) -> None:
    while True:
        await asyncio.sleep(seconds)
        try:
            produced = await bridge.reconcile()
        except LabelStudioError as error:
            bridge.metrics.label_studio_errors.inc()
            log.warning("reconciliation: %s; next one in %.0f s", error, seconds)
            continue
        except Exception as error:  # Kafka or Redis: the next walk makes up for this one
            log.warning("reconciliation failed (%s); next one in %.0f s", type(error).__name__, seconds)
            continue
        if produced:
            log.info("reconciliation produced %d grades missed by webhooks", produced)


async def run(settings: AnnotateSettings) -> None:
    """Run the bridge until SIGTERM or SIGINT."""
    worker = settings.worker
    kafka = worker.kafka_security().aiokafka_options()
    registry = CollectorRegistry()
    metrics = BridgeMetrics(registry)
    redis = connect(worker.redis_url, socket_timeout=10, socket_connect_timeout=5, **worker.redis_options())
    producer = AIOKafkaProducer(bootstrap_servers=worker.kafka_bootstrap, acks="all",
                                enable_idempotence=True, **kafka)
    consumer = AIOKafkaConsumer(worker.topics.requests, bootstrap_servers=worker.kafka_bootstrap,
                                group_id=settings.consumer_group, enable_auto_commit=False,
                                auto_offset_reset="earliest",
                                # a batch waits for Label Studio as long as it is down: stay in the group
                                max_poll_interval_ms=24 * 3600 * 1000, **kafka)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    async def send(key: bytes, value: bytes) -> None:
        await producer.send_and_wait(worker.topics.annotations, value, key=key)

    await producer.start()
    runner: web.AppRunner | None = None
    jobs: list[asyncio.Task[None]] = []
    try:
        async with LabelStudio(settings.label_studio_url, settings.label_studio_token) as ls:
            bridge = Bridge(settings, ls, redis, send, metrics)
            http = BridgeHttp(bridge, registry, settings.secret)
            runner = web.AppRunner(http.app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, settings.host, settings.port).start()
            jobs.append(asyncio.create_task(http.drain()))
            jobs.append(asyncio.create_task(bridge.apply_overlaps()))
            await _until_done("set-up", bridge.setup, metrics)
            produced = await _until_done("reconciliation", bridge.reconcile, metrics)
            log.info("ready: project %s, %d grades produced by the start-up reconciliation",
                     bridge.project, produced)
            # the requests topic with the worker's partitions, whichever of the two starts first
            await ensure_topics(worker.kafka_bootstrap, worker.topics, worker.partitions,
                                worker.replication_factor, security=worker.kafka_security())
            await consumer.start()
            jobs.append(asyncio.create_task(_consume(bridge, consumer)))
            jobs.append(asyncio.create_task(_reconcile_every(bridge, settings.reconcile_interval)))
            waiting = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait([waiting, *jobs], return_when=asyncio.FIRST_COMPLETED)
            for job in done:
                if job is not waiting and job.exception() is not None:
                    raise job.exception()  # type: ignore[misc]
    finally:
        for job in jobs:
            job.cancel()
        for job in jobs:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await job
        if runner is not None:
            await runner.cleanup()
        with contextlib.suppress(Exception):
            await consumer.stop()
        await producer.stop()
        await redis.aclose()
