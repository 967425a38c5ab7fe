"""What the stream benchmarks share: the services, clean-up, draining a backlog with a worker or raw
aiokafka, and the CPU each part of the system spends (a process tree's from /proc, Redis's from INFO)."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from redis.asyncio import Redis

from monitor.core.events import encode_annotation
from monitor.store.batch import Message
from monitor.store.keys import Keys
from monitor.store.memory import partition_of
from monitor.store.writer import RedisState
from monitor.worker.settings import WorkerSettings
from tests.support.worker_harness import Group, Stream, Worker, parse_metrics

PARTITIONS = 4
STARTED = time.monotonic()
TICKS = os.sysconf("SC_CLK_TCK")


def say(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


# -- services and clean-up ----------------------------------------------------------------------------
def services_status() -> dict:
    done = subprocess.run([sys.executable, "-m", "monitor", "services", "status", "--json"],
                          capture_output=True, text=True, check=False)
    try:
        return json.loads(done.stdout)["services"]
    except (ValueError, KeyError, TypeError):
        return {}


def services(bootstrap: str | None, redis_url: str | None) -> tuple[str, str]:
    """The options, else MONITOR_KAFKA_BOOTSTRAP / MONITOR_REDIS_URL, else ``monitor services status``."""
    bootstrap = bootstrap or os.environ.get("MONITOR_KAFKA_BOOTSTRAP")
    redis_url = redis_url or os.environ.get("MONITOR_REDIS_URL")
    if bootstrap and redis_url:
        return bootstrap, redis_url
    found = services_status()
    try:
        if not (found["kafka"]["answers"] and found["redis"]["answers"]):
            raise KeyError("answers")
        return bootstrap or found["kafka"]["address"], redis_url or found["redis"]["address"]
    except (KeyError, TypeError):
        raise SystemExit("no Kafka and Redis: run `monitor services up` (or pass --bootstrap and --redis-url)"
                         ) from None


def broker_pid() -> int | None:
    """The pid of the Kafka broker that ``monitor services`` started (None if not ours: no figure)."""
    try:
        return int(services_status()["kafka"]["pid"])
    except (KeyError, TypeError, ValueError):
        return None


async def drop_prefix(redis_url: str, prefix: str) -> int:
    redis = Redis.from_url(redis_url)
    try:
        keys = [k async for k in redis.scan_iter(match=f"{prefix}:*", count=5000)]
        for first in range(0, len(keys), 1000):
            await redis.unlink(*keys[first:first + 1000])
        return len(keys)
    finally:
        await redis.aclose()


async def drop_topics(bootstrap: str, names: list[str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        doomed = [n for n in names if n in existing]
        if doomed:
            await admin.delete_topics(doomed)
    finally:
        await admin.close()


@dataclass
class Cleanup:
    bootstrap: str
    redis_url: str
    prefixes: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)

    def group(self, group: Group) -> Group:
        self.groups.append(group)
        self.prefixes.append(group.app_id)
        self.topics.extend([group.outputs.dead_letters, group.outputs.requests,
                            f"{group.app_id}-__assignor-__leader"])  # a baseline's Faust consumer makes it
        return group

    def stream(self, stream: Stream) -> Stream:
        self.topics.extend([*stream.topics.values(), f"e2e-{stream.tag}-unused-dead-letters",
                            f"e2e-{stream.tag}-unused-requests"])  # Stream.send creates them too
        return stream

    def run(self) -> None:
        for group in self.groups:
            group.stop()
        keys = sum(asyncio.run(drop_prefix(self.redis_url, p)) for p in dict.fromkeys(self.prefixes))
        try:
            asyncio.run(drop_topics(self.bootstrap, list(dict.fromkeys(self.topics))))
        except Exception as error:  # the numbers are printed already; say so and go on
            say(f"could not delete the topics ({type(error).__name__}: {error})")
        say(f"cleaned up: {keys} Redis keys, {len(set(self.topics))} topics")


# -- the core and Redis without Kafka ------------------------------------------------------------------
@dataclass
class Queues:
    """Each partition's messages in order with their offsets, as Kafka would hold them (keys hashed with its
    default partitioner)."""

    partitions: int
    messages: list[list[Message]] = field(default_factory=list)
    offsets: dict[tuple[int, str], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.messages = [[] for _ in range(self.partitions)]

    def add(self, topic: str, key: bytes, value: bytes) -> None:
        """Append a message to its partition, at the topic's next offset there."""
        partition = partition_of(key, self.partitions)
        offset = self.offsets.get((partition, topic), -1) + 1
        self.offsets[(partition, topic)] = offset
        self.messages[partition].append(Message(topic, offset, value, topic))


def partition_queues(events: Iterable[tuple[str, bytes, bytes]], partitions: int) -> Queues:
    """``events`` (topic, key, value) as Kafka's partitions would hold them."""
    queues = Queues(partitions)
    for topic, key, value in events:
        queues.add(topic, key, value)
    return queues


def round_robin_arguments(parser: argparse.ArgumentParser, sessions: int) -> None:
    """The options of a benchmark that drives :func:`apply_round_robin` over a simulated stream."""
    parser.add_argument("--sessions", type=int, default=sessions, help="simulated sessions per run")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch", type=int, default=WorkerSettings().batch_size,
                        help="messages of a partition per batch at most (default: the worker's batch_size)")
    parser.add_argument("--repeats", type=int, default=3)


async def apply_round_robin(state: RedisState, queues: Queues, batch: int) -> int:
    """Apply ``queues`` through ``state``, a batch of at most ``batch`` messages of each partition in turn
    (as a worker takes them); the fan-out annotations a batch publishes join their partition's queue, as
    the worker consumes them from the annotations topic. Returns how many fan-outs there were."""
    partitions, messages = queues.partitions, queues.messages
    positions = [0] * partitions
    fan_outs = 0
    while any(positions[p] < len(messages[p]) for p in range(partitions)):
        for p in range(partitions):
            chunk = messages[p][positions[p]:positions[p] + batch]
            positions[p] += len(chunk)
            if not chunk:
                continue
            for outcome in await state.handle_batch(p, chunk):
                for session_id, annotation in outcome.fan_out:
                    queues.add("annotations", session_id.encode(), encode_annotation(annotation))
                    fan_outs += 1
    return fan_outs


# -- CPU and memory -----------------------------------------------------------------------------------
def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        pass
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its living descendants (``--processes N``: the children)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS + sum(cpu_seconds(c) for c in _children(pid))


async def redis_cpu(redis: Redis) -> float:
    info = await redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def applied(redis: Redis, prefix: str, partitions: int = PARTITIONS) -> dict[tuple[str, int], int]:
    """(topic, partition) -> next offset to apply, from the worker's per-partition offsets in Redis (in the
    groups' layout, or in the one before groups: a baseline worker checked out from before issue 31)."""
    pipe = redis.pipeline(transaction=False)
    for partition in range(partitions):
        pipe.hgetall(Keys(prefix).p(partition, "meta"))
        pipe.hgetall(f"{prefix}:{{p{partition}}}:meta")
    out: dict[tuple[str, int], int] = {}
    metas = await pipe.execute()
    for partition in range(partitions):
        for meta in metas[2 * partition:2 * partition + 2]:
            for name, value in meta.items():
                name = name.decode()
                if name.startswith("off:"):
                    out[(name[4:], partition)] = max(out.get((name[4:], partition), 0), int(value) + 1)
    return out


def scrape(worker: Worker) -> tuple[dict, float]:
    started = time.perf_counter()
    text = worker.metrics_text()
    return parse_metrics(text), time.perf_counter() - started


def stage_cpu(samples: dict) -> dict[str, float]:
    """``search_relevance_worker_cpu_seconds_total`` by stage (decode, join, encode), and the process's
    ``process_cpu_seconds_total`` as ``process``."""
    out = {dict(labels)["stage"]: v for (name, labels), v in samples.items()
           if name == "search_relevance_worker_cpu_seconds_total"}
    out["process"] = sum(v for (name, _), v in samples.items() if name == "process_cpu_seconds_total")
    return out


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


# -- draining a backlog -------------------------------------------------------------------------------
async def end_offsets(stream: Stream) -> dict[tuple[str, int], int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=stream.bootstrap)
    await consumer.start()
    try:
        partitions = [TopicPartition(t, p) for t in stream.topics.values() for p in range(stream.partitions)]
        ends = await consumer.end_offsets(partitions)
        return {(tp.topic, tp.partition): end for tp, end in ends.items() if end > 0}
    finally:
        await consumer.stop()


async def committed_at_end(stream: Stream, group_id: str, ends: dict[tuple[str, int], int],
                           workers: list[Worker], timeout: float, poll: float = 0.1) -> float:
    """When ``group_id``'s committed offsets first reached ``ends`` (``time.monotonic``), as the harness's
    drain decides it (committed means processed), polled every ``poll`` seconds over one admin client."""
    admin = AIOKafkaAdminClient(bootstrap_servers=stream.bootstrap)
    await admin.start()
    deadline = time.monotonic() + timeout
    try:
        while True:
            committed = {(tp.topic, tp.partition): meta.offset
                         for tp, meta in (await admin.list_consumer_group_offsets(group_id)).items()}
            now = time.monotonic()
            if all(committed.get(tp, 0) >= end for tp, end in ends.items()):
                return now
            for worker in workers:
                if (why := worker.gone(3000)) is not None:
                    raise SystemExit(why)
            if now > deadline:
                raise SystemExit(f"{group_id} did not drain in {timeout:.0f} s")
            await asyncio.sleep(poll)
    finally:
        await admin.close()


@dataclass
class Drain:
    """One worker (or ``--processes N``) draining a backlog, from its first commit in Redis on (the first
    batch is not counted) to the last offset applied in Redis, and to the group's committed offsets."""

    messages: int            # counted: the backlog less what the first commit had applied
    applied_s: float         # first commit in Redis -> last offset applied in Redis
    committed_s: float       # first commit in Redis -> committed offsets at the end
    ready_s: float           # process start -> /readyz 200
    rss_mib: float
    worker_cpu: float = 0.0  # CPU seconds of the worker process(es) over the applied span
    redis_cpu: float = 0.0   # of redis-server (the whole server: keep it otherwise idle)
    broker_cpu: float = math.nan  # of the Kafka broker, if ours
    stages: dict[str, float] = field(default_factory=dict)  # the worker's stage CPU over the run

    @property
    def rate(self) -> float:
        return self.messages / self.committed_s

    @property
    def applied_rate(self) -> float:
        return self.messages / self.applied_s

    def per_message_us(self, seconds: float) -> float:
        return 1e6 * seconds / self.messages


async def watch_drain(group: Group, worker: Worker, redis_url: str, ends: dict[tuple[str, int], int],
                      timeout: float, broker: int | None) -> tuple[int, float, float, tuple[float, ...]]:
    """(messages counted, applied span, committed span, CPU over the applied span: worker, Redis, broker)."""
    redis = Redis.from_url(redis_url)
    committed = asyncio.create_task(committed_at_end(group.stream, group.app_id, ends, [worker], timeout))
    partitions = group.stream.partitions
    try:
        total = sum(ends.values())
        first: tuple[float, int] | None = None
        start_cpu: tuple[float, float, float] = (0.0, 0.0, 0.0)
        while True:
            offsets = await applied(redis, group.app_id, partitions)
            now = time.monotonic()
            done = sum(offsets.values())
            if first is None and done > 0:
                first = (now, done)
                start_cpu = (cpu_seconds(worker.process.pid), await redis_cpu(redis),
                             cpu_seconds(broker) if broker else math.nan)
            if first is not None and all(offsets.get(tp, 0) >= end for tp, end in ends.items()):
                break
            if committed.done():  # committed before we saw it applied: only if it failed
                committed.result()
            await asyncio.sleep(0.01 if first is None else 0.05)
        used = (cpu_seconds(worker.process.pid) - start_cpu[0], await redis_cpu(redis) - start_cpu[1],
                (cpu_seconds(broker) - start_cpu[2]) if broker else math.nan)
        end_committed = await committed
        if total - first[1] < total / 2:
            raise SystemExit(f"{group.app_id}: the first commit seen already held {first[1]} of {total} "
                             "messages; the backlog is too small to time (give more --messages)")
        return total - first[1], now - first[0], max(end_committed, now) - first[0], used
    finally:
        committed.cancel()
        await redis.aclose()


def worker_drain(group: Group, redis_url: str, ends: dict[tuple[str, int], int], timeout: float,
                 broker: int | None = None) -> Drain:
    started = time.monotonic()
    # watched from the spawn, not from /readyz: `--processes N` is ready when all N are, and the first
    # may have applied a good part of the backlog by then
    worker = group.spawn()
    became_ready: list[float] = []

    def readiness() -> None:
        while not became_ready and worker.process.poll() is None and time.monotonic() - started < timeout:
            if worker.ready():
                became_ready.append(time.monotonic() - started)
            time.sleep(0.1)

    probe = threading.Thread(target=readiness, daemon=True)
    probe.start()
    try:
        messages, applied_s, committed_s, (cpu, redis, kafka) = asyncio.run(
            watch_drain(group, worker, redis_url, ends, timeout, broker))
        probe.join(timeout=30)
        ready = became_ready[0] if became_ready else math.nan
        rss = rss_mib(worker.process.pid)
        stages = stage_cpu(scrape(worker)[0])
    finally:
        group.stop()
    return Drain(messages, applied_s, committed_s, ready, rss, cpu, redis, kafka, stages)


async def raw_consume(stream: Stream, ends: dict[tuple[str, int], int]) -> tuple[int, float]:
    """The peer: aiokafka reads every partition to its end and json.loads every value."""
    consumer = AIOKafkaConsumer(bootstrap_servers=stream.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(t, p) for (t, p) in ends]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        left = {TopicPartition(t, p): end for (t, p), end in ends.items()}
        count, first, skip = 0, 0.0, 0
        while left:
            batch = await consumer.getmany(timeout_ms=1000, max_records=500)
            if batch and not first:  # not counted, as the worker's first batch of at most 500
                first = time.monotonic()
                skip = sum(len(records) for records in batch.values())
            for tp, records in batch.items():
                for record in records:
                    json.loads(record.value)
                count += len(records)
                if records and records[-1].offset + 1 >= left.get(tp, math.inf):
                    del left[tp]
        return count - skip, time.monotonic() - first
    finally:
        await consumer.stop()
