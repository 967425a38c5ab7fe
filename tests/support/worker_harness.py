"""Run real ``monitor worker`` processes against the test services, feed them, wait for them to drain.

A :class:`Group` is one consumer group (its own app id, Redis key prefix and output topics) over shared
source topics; :meth:`Group.start` adds a worker process to it. Draining means the group's committed
offsets reached the end of every source partition and stayed there (the worker commits a batch only
after its state and outbox are written, so committed means processed), and then that every worker of the
group exports a rollup (what ``/metrics`` exports of the shared state, computed by the group's exporter
every ``rollup_interval``) whose reads began after the drain was first seen: the numbers of the drained
state, not of a rollup computed just before the last batch.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from prometheus_client.parser import text_string_to_metric_families

from monitor.core.stream.partition import partition_for
from monitor.services.ports import free_port
from monitor.sim.records import SimEvent
from monitor.worker.produce import produce
from monitor.worker.security import KafkaSecurity
from monitor.worker.settings import Topics
from monitor.worker.topics import ensure_topics

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass
class Stream:
    """Source topics shared by the groups of one test module."""

    bootstrap: str
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    partitions: int = 4
    security: KafkaSecurity | None = None
    """How the harness's own Kafka clients connect (SASL, TLS); the workers get theirs from ``extra_env``."""
    replication: int = 1
    """Replicas of the topics the harness and the workers create (3 on a Kafka cluster)."""

    def kafka_options(self) -> dict[str, Any]:
        """Keyword arguments of aiokafka clients for :attr:`security` (plaintext when it is None)."""
        return (self.security or KafkaSecurity()).aiokafka_options()

    @property
    def topics(self) -> dict[str, str]:
        return {role: f"e2e-{self.tag}-{role}" for role in ("impressions", "annotations", "deploys")}

    def send(self, events: Iterable[SimEvent]) -> int:
        """Create the topics with ``partitions`` (as the worker would), then produce ``events`` in order."""
        t = self.topics
        outputs = Topics(t["impressions"], t["annotations"], t["deploys"], f"e2e-{self.tag}-unused-dead-letters",
                         f"e2e-{self.tag}-unused-requests")
        asyncio.run(ensure_topics(self.bootstrap, outputs, self.partitions, self.replication,
                                  security=self.security))
        return asyncio.run(produce(self.bootstrap, self.topics, events, security=self.security))


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=30) as response:
            return response.read().decode()

    def rollup_at(self) -> float | None:
        """When the reads of the rollup this worker exports began (``None``: no rollup, or no answer)."""
        try:
            samples = parse_metrics(self.metrics_text())
        except OSError:
            return None
        return samples.get(("search_relevance_rollup_timestamp_seconds", ()))

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=5) as response:
                return response.status == 200
        except OSError:
            return False

    def gone(self, tail: int = 4000) -> str | None:
        """Why this worker is not running, with the end of its log; None while it runs."""
        if self.process.poll() is None:
            return None
        return f"a worker exited ({self.process.returncode}):\n{self.log.read_text()[-tail:]}"

    def failures(self, context: int = 40) -> str:
        """The log's lines around each failed message ("processing ... failed", with its traceback), to
        show why a test found a ``processing_error``: the log is gone once the run's folder is."""
        lines = self.log.read_text(errors="replace").splitlines()
        hits = [i for i, line in enumerate(lines) if "processing " in line and " failed" in line]
        return "\n".join("\n".join(lines[i:i + context]) for i in hits[:5]) or "(no failed message in the log)"

    @property
    def url(self) -> str:
        """Base URL of this worker's HTTP endpoints."""
        return f"http://127.0.0.1:{self.port}"

    def request(self, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
                method: str | None = None, timeout: float = 30.0) -> Response:
        """One HTTP request to this worker (GET, or POST with ``body``); any status, never raised."""
        return http_request(f"{self.url}{path}", body, headers, method, timeout)


@dataclass
class Group:
    stream: Stream
    redis_url: str
    workdir: Path
    name: str
    config: str = ""
    workers: list[Worker] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)
    """More environment for this group's workers and CLI runs (e.g. ``MONITOR_ALERTMANAGER_URL``,
    ``MONITOR_ALERT_INTERVAL``, ``MONITOR_DEPLOY_TOKEN``); it overrides the harness's own settings."""
    args: tuple[str, ...] = ()
    """More arguments of ``monitor worker`` (e.g. ``--processes 2``)."""
    source: Path | None = None
    """Run the workers from this checkout of the project (a benchmark's baseline), not this one."""

    @property
    def app_id(self) -> str:
        return f"e2e-{self.stream.tag}-{self.name}"

    @property
    def outputs(self) -> Topics:
        topics = self.stream.topics
        return Topics(topics["impressions"], topics["annotations"], topics["deploys"],
                      f"{self.app_id}-dead-letters", f"{self.app_id}-requests")

    def env(self, port: int) -> dict[str, str]:
        out = self.outputs
        config = self.workdir / f"{self.name}.toml"
        config.write_text(self.config)
        return {**os.environ, "MONITOR_KAFKA_BOOTSTRAP": self.stream.bootstrap, "MONITOR_REDIS_URL": self.redis_url,
                "MONITOR_REDIS_PREFIX": self.app_id, "MONITOR_APP_ID": self.app_id,
                "MONITOR_TOPIC_IMPRESSIONS": out.impressions, "MONITOR_TOPIC_ANNOTATIONS": out.annotations,
                "MONITOR_TOPIC_DEPLOYS": out.deploys, "MONITOR_TOPIC_DEAD_LETTERS": out.dead_letters,
                "MONITOR_TOPIC_REQUESTS": out.requests, "MONITOR_PARTITIONS": str(self.stream.partitions),
                "MONITOR_REPLICATION_FACTOR": str(self.stream.replication),
                "MONITOR_HTTP_PORT": str(port), "MONITOR_CONFIG": str(config),
                "MONITOR_DATADIR": str(self.workdir / f"{self.name}-{port}"), "MONITOR_LOG_LEVEL": "warning",
                **self.extra_env}

    def start(self, timeout: float = 90.0, port: int | None = None) -> Worker:
        """Start one more worker and wait until it is ready; its HTTP port is ``port``, or a free one."""
        port = free_port() if port is None else port
        log = self.workdir / f"{self.name}-{port}.log"
        process = self._popen(port, log)
        worker = Worker(process, port, log)
        deadline = time.monotonic() + timeout
        while not worker.ready():
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise AssertionError(f"worker {self.name} did not become ready:\n{log.read_text()[-4000:]}")
            time.sleep(0.3)
        self.workers.append(worker)
        return worker

    def spawn(self, port: int | None = None) -> Worker:
        """Start a worker process without waiting for it to become ready (``start`` waits); it joins
        :attr:`workers`, so :meth:`stop` ends it. Its HTTP port is ``port``, or a free one."""
        port = free_port() if port is None else port
        log = self.workdir / f"{self.name}-{port}.log"
        worker = Worker(self._popen(port, log), port, log)
        self.workers.append(worker)
        return worker

    def _popen(self, port: int, log: Path) -> subprocess.Popen[bytes]:
        # ``-m monitor`` imports the package from the working folder first: ``source``'s, if given
        return subprocess.Popen([sys.executable, "-m", "monitor", "worker", *self.args], env=self.env(port),
                                stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=self.source)

    def cli(self, *args: str, timeout: float = 60.0,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``monitor <args>`` with this group's settings (same ``MONITOR_*`` environment as its workers,
        then ``env`` over them)."""
        return subprocess.run([sys.executable, "-m", "monitor", *args], env={**self.env(0), **(env or {})},
                              capture_output=True, text=True, timeout=timeout)

    def kill(self, worker: Worker) -> None:
        worker.process.send_signal(signal.SIGKILL)
        worker.process.wait(timeout=30)
        self.workers.remove(worker)

    def stop(self) -> None:
        for worker in self.workers:
            worker.process.terminate()
        for worker in self.workers:
            try:
                worker.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.process.kill()
        self.workers.clear()

    def drain(self, timeout: float = 900.0, settle: float = 3.0) -> None:
        asyncio.run(_drained(self.stream, self.app_id, timeout, settle, self.workers))

    def restarts_seen(self) -> list[int]:
        """Exit codes of workers that stopped by themselves (none expected)."""
        return [w.process.returncode for w in self.workers if w.process.poll() is not None]


async def _positions(stream: Stream, group: str) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=stream.bootstrap, **stream.kafka_options())
    consumer = AIOKafkaConsumer(bootstrap_servers=stream.bootstrap, **stream.kafka_options())
    await admin.start()
    await consumer.start()
    try:
        partitions = [TopicPartition(t, p) for t in stream.topics.values() for p in range(stream.partitions)]
        ends = await consumer.end_offsets(partitions)
        committed = {tp: meta.offset for tp, meta in (await admin.list_consumer_group_offsets(group)).items()}
        return ends, committed
    finally:
        await consumer.stop()
        await admin.close()


async def _drained(stream: Stream, group: str, timeout: float, settle: float, workers: list[Worker]) -> None:
    deadline = time.monotonic() + timeout
    last: dict[TopicPartition, int] | None = None
    since, since_wall = math.inf, math.inf
    while True:
        ends, committed = await _positions(stream, group)
        behind = {tp: end - committed.get(tp, 0) for tp, end in ends.items() if end > committed.get(tp, 0)}
        now = time.monotonic()
        if not behind:
            if last == ends and now - since >= settle:
                await _rollups_since(since_wall, workers, deadline)
                return
            if last != ends:
                last, since, since_wall = dict(ends), now, time.time()
        else:
            last, since = None, math.inf
        for worker in workers:
            if (why := worker.gone()) is not None:
                raise AssertionError(why)
        if now > deadline:
            raise AssertionError(f"{group} did not drain in {timeout:.0f} s; behind: {behind}")
        await asyncio.sleep(0.5)


async def _rollups_since(since: float, workers: list[Worker], deadline: float) -> None:
    """Wait until every worker exports a rollup whose reads began at ``since`` (wall clock) or later."""
    for worker in workers:
        while (at := await asyncio.to_thread(worker.rollup_at)) is None or at < since:
            if worker.process.poll() is not None:
                raise AssertionError(f"a worker exited ({worker.process.returncode}):\n"
                                     f"{worker.log.read_text()[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no rollup computed after the drain ({since:.1f}): the last began at {at}")
            await asyncio.sleep(0.2)


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        return json.loads(self.body)


def http_request(url: str, body: bytes | None = None, headers: dict[str, str] | None = None,
                 method: str | None = None, timeout: float = 30.0) -> Response:
    """GET ``url`` (POST when there is a ``body``) and return the status and body, error statuses too."""
    request = urllib.request.Request(url, data=body, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Response(response.status, response.read(), dict(response.headers.items()))
    except urllib.error.HTTPError as error:
        return Response(error.code, error.read(), dict(error.headers.items()))


def parse_metrics(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def flush_events(stream: Stream, ts: float, prefix: str = "flush") -> list[SimEvent]:
    """One impression per partition at ``ts``: moves every partition's watermark past the stream's
    deadlines, as later traffic would, so every session of the stream is closed."""
    out: list[SimEvent] = []
    partition, n = 0, 0
    while partition < stream.partitions:
        sid = f"{prefix}-{n}"
        n += 1
        if partition_for(sid.encode(), stream.partitions) != partition:
            continue
        value = json.dumps({"type": "impression", "session_id": sid, "query": f"{prefix} query {partition}",
                            "query_bucket": "head", "ranker": "flush", "variant": "control", "ts": ts,
                            "results": [{"doc_id": "flush-doc", "position": 1, "score": 1.0}]}).encode()
        out.append(SimEvent("impressions", sid.encode(), value, ts))
        partition += 1
    return out


async def _read_topic(bootstrap: str, topic: str, timeout: float = 30.0,
                      security: KafkaSecurity | None = None) -> list[tuple[bytes | None, bytes, dict[str, bytes]]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                                **(security or KafkaSecurity()).aiokafka_options())
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in (consumer.partitions_for_topic(topic) or set())]
        if not partitions:
            await consumer._client.force_metadata_update()
            partitions = [TopicPartition(topic, p) for p in (consumer.partitions_for_topic(topic) or set())]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        out = []
        deadline = time.monotonic() + timeout
        async def behind() -> bool:
            return any([await consumer.position(tp) < end for tp, end in ends.items()])

        while await behind():
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                out.extend((r.key, r.value, {k: v for k, v in r.headers}) for r in records)
            if time.monotonic() > deadline:
                raise AssertionError(f"could not read {topic} to its end")
        return out
    finally:
        await consumer.stop()


def read_topic(bootstrap: str, topic: str,
               security: KafkaSecurity | None = None) -> list[tuple[bytes | None, bytes, dict[str, bytes]]]:
    """Every message of ``topic`` (``security``: how to connect; plaintext by default)."""
    return asyncio.run(_read_topic(bootstrap, topic, security=security))
