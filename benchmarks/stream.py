"""Benchmark: one ``monitor worker`` on the real Kafka and Redis: throughput, annotation latency, memory.

1. Throughput. A backlog of simulated traffic (monitor.sim, no invalid events) is produced to fresh topics
   (4 partitions), then, ``--repeats`` times and alternating: one worker (a new consumer group and Redis
   prefix each time, ``[stream] budget`` unlimited so every session joins: the heaviest path) drains it,
   and a plain ``AIOKafkaConsumer`` reads every partition of the same topics to the end, ``json.loads``-ing
   every value (the peer). Time runs from the first message to the end, and the messages of the first
   batch are not counted: the worker from its first commit in Redis to the group's committed offsets at
   the end of every partition (the harness's drain; Faust commits every 2.8 s, so this is also shown
   with the end taken when Redis had applied the last offset); the peer from its first fetch (at most
   500 records, not counted either) to its last record. Medians and the ratio worker / peer (goal ≥ 0.5).
2. Annotation-to-gauge latency. Probes, one at a time: a session of a dedicated group (bucket tail, ranker
   and variant ``probe``), its impression, and once that is applied, one annotation grading its whole
   top 20. The latency is from producing that annotation to the partition's ``tail|probe|probe|scored``
   counter in Redis going up by one, polled every 2 ms: the moment ``search_relevance_scored_total``
   and the gauges, computed from Redis at scrape time, include the session (a scrape itself takes the
   time on its own row). A fresh worker on empty topics is probed idle first, then, once caught up, while
   ``monitor produce`` sends it simulated traffic (impressions, then the labels that complete them) at a
   quarter of the rate measured in 1 (the applied-in-Redis median), then another fresh worker at half
   that rate, the goal's load. Goal p99 < 1 s.
3. Memory. A fresh worker with the default annotation budget (2,000 sessions per bucket per hour),
   written to its ``[stream]`` TOML, while simulated traffic flows (paced at 1.5 × the rate of 1, until
   ``--memory-events`` messages are applied or the time is up): 10 sessions per second of event time, every
   query with its bucket, labels only for the sessions the worker samples (as annotators answer annotation
   requests; which ones is predicted with the worker's own budget rule and checked against its
   ``sampled`` counter). Every 0.5 s: the worker's RSS (``/proc/<pid>/status``), Redis ``used_memory``
   and the waiting sessions (what ``search_relevance_waiting_sessions`` counts). Reported at 10%, 50% and
   100% of the messages applied, with Redis bytes per waiting session: the growth of ``used_memory`` (a
   shared Redis: others' writes count too) and the ``MEMORY USAGE`` of this run's own keys.

Everything runs on loopback with fresh topic names, group ids and Redis prefixes; the Redis keys and topics
are deleted at the end. Progress goes to stderr, the table (markdown) and a summary to stdout.

    .venv/bin/python benchmarks/stream.py            # about 10 minutes
    .venv/bin/python benchmarks/stream.py --quick    # about 1 minute
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import itertools
import json
import logging
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from redis.asyncio import Redis

from monitor.core.stream.config import StreamConfig
from monitor.core.stream.join import budget_period
from monitor.core.stream.partition import partition_for
from monitor.sim import SimConfig, generate
from monitor.sim.records import SimEvent
from monitor.worker.produce import produce
from tests.support.worker_harness import Group, Stream, Worker, parse_metrics

PARTITIONS = 4
# the latency probes' variant is "probe": declared, else they would be counted as "other" and never scored
VARIANTS_TOML = 'variants = ["control", "canary", "probe"]\n'
UNLIMITED_TOML = "[stream]\nbudget = { head = 1e9, torso = 1e9, tail = 1e9 }\n" + VARIANTS_TOML
BUDGET = {"head": 2000.0, "torso": 2000.0, "tail": 2000.0}
BUDGET_TOML = "[stream]\nbudget = { head = 2000, torso = 2000, tail = 2000 }\n" + VARIANTS_TOML
PROBE_GROUP = "tail|probe|probe"
STARTED = time.monotonic()
logging.getLogger("aiokafka").setLevel(logging.ERROR)  # "NotLeaderForPartition, retrying" on new topics


def say(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


# -- services, processes, cleanup ---------------------------------------------------------------------
def services(bootstrap: str | None, redis_url: str | None) -> tuple[str, str]:
    """The options, else MONITOR_KAFKA_BOOTSTRAP / MONITOR_REDIS_URL, else ``monitor services status``."""
    bootstrap = bootstrap or os.environ.get("MONITOR_KAFKA_BOOTSTRAP")
    redis_url = redis_url or os.environ.get("MONITOR_REDIS_URL")
    if bootstrap and redis_url:
        return bootstrap, redis_url
    done = subprocess.run([sys.executable, "-m", "monitor", "services", "status", "--json"],
                          capture_output=True, text=True, check=False)
    try:
        found = json.loads(done.stdout)["services"]
        if not (found["kafka"]["answers"] and found["redis"]["answers"]):
            raise KeyError("answers")
        return bootstrap or found["kafka"]["address"], redis_url or found["redis"]["address"]
    except (ValueError, KeyError, TypeError):
        raise SystemExit("no Kafka and Redis: run `monitor services up` (or pass --bootstrap and --redis-url)"
                         ) from None


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


async def applied(redis: Redis, prefix: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> next offset to apply, from the worker's per-partition offsets in Redis."""
    pipe = redis.pipeline(transaction=False)
    for partition in range(PARTITIONS):
        pipe.hgetall(f"{prefix}:{{p{partition}}}:meta")
    out: dict[tuple[str, int], int] = {}
    for partition, meta in enumerate(await pipe.execute()):
        for name, value in meta.items():
            name = name.decode()
            if name.startswith("off:"):
                out[(name[4:], partition)] = int(value) + 1
    return out


async def waiting_and_memory(redis: Redis, prefix: str) -> tuple[int, int]:
    """What the worker's ``search_relevance_waiting_sessions`` and ``_redis_memory_bytes`` report."""
    pipe = redis.pipeline(transaction=False)
    for partition in range(PARTITIONS):
        pipe.zcard(f"{prefix}:{{p{partition}}}:dl")
    waiting = sum(await pipe.execute())
    return waiting, int((await redis.info("memory"))["used_memory"])


async def prefix_memory(redis: Redis, prefix: str) -> dict[str, tuple[int, int]]:
    """Kind of key (``s`` session records, ``e`` early labels, ``agg`` slices, ``q:labels`` ...) ->
    (keys, bytes by MEMORY USAGE) for every key under ``prefix``."""
    keys = [k async for k in redis.scan_iter(match=f"{prefix}:*", count=5000)]
    out: dict[str, list[int]] = {}
    for first in range(0, len(keys), 2000):
        chunk = keys[first:first + 2000]
        pipe = redis.pipeline(transaction=False)
        for key in chunk:
            pipe.memory_usage(key)
        for key, size in zip(chunk, await pipe.execute(), strict=True):
            rest = key.decode()[len(prefix) + 1:]
            if rest.startswith("{q:"):
                kind = "q:" + rest.split("}:", 1)[1]
            elif rest.startswith("{p"):
                kind = rest.split("}:", 1)[1].split(":")[0]
            else:
                kind = rest
            entry = out.setdefault(kind, [0, 0])
            entry[0] += 1
            entry[1] += int(size or 0)
    return {kind: (n, size) for kind, (n, size) in out.items()}


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
                            f"{group.app_id}-__assignor-__leader"])  # Faust's own
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


# -- 1. throughput ------------------------------------------------------------------------------------
def backlog(messages: int, seed: int) -> list[SimEvent]:
    """The first ``messages`` records of a simulated run (about 16 records per session)."""
    config = SimConfig(seed=seed, n_sessions=messages // 12 + 10, duration_s=6 * 3600, invalid_rate=0.0)
    events = list(itertools.islice(generate(config), messages))
    if len(events) < messages:
        raise SystemExit(f"the simulation gave {len(events)} records, fewer than {messages}")
    return events


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
                if worker.process.poll() is not None:
                    raise SystemExit(f"the worker exited ({worker.process.returncode}):\n"
                                     f"{worker.log.read_text()[-3000:]}")
            if now > deadline:
                raise SystemExit(f"{group_id} did not drain in {timeout:.0f} s")
            await asyncio.sleep(poll)
    finally:
        await admin.close()


@dataclass
class Drain:
    messages: int            # counted: the backlog less what the first commit had applied
    applied_s: float         # first commit in Redis -> last offset applied in Redis
    committed_s: float       # first commit in Redis -> committed offsets at the end
    ready_s: float           # process start -> /readyz 200
    rss_mib: float

    @property
    def rate(self) -> float:
        return self.messages / self.committed_s

    @property
    def applied_rate(self) -> float:
        return self.messages / self.applied_s


async def watch_drain(group: Group, worker: Worker, redis_url: str, ends: dict[tuple[str, int], int],
                      timeout: float) -> tuple[int, float, float]:
    redis = Redis.from_url(redis_url)
    committed = asyncio.create_task(committed_at_end(group.stream, group.app_id, ends, [worker], timeout))
    try:
        total = sum(ends.values())
        first: tuple[float, int] | None = None
        while True:
            offsets = await applied(redis, group.app_id)
            now = time.monotonic()
            done = sum(offsets.values())
            if first is None and done > 0:
                first = (now, done)
            if first is not None and all(offsets.get(tp, 0) >= end for tp, end in ends.items()):
                break
            if committed.done():  # committed before we saw it applied: only if it failed
                committed.result()
            await asyncio.sleep(0.01 if first is None else 0.05)
        end_committed = await committed
        return total - first[1], now - first[0], max(end_committed, now) - first[0]
    finally:
        committed.cancel()
        await redis.aclose()


def worker_drain(group: Group, redis_url: str, ends: dict[tuple[str, int], int], timeout: float) -> Drain:
    started = time.monotonic()
    worker = group.start()
    ready = time.monotonic() - started
    try:
        messages, applied_s, committed_s = asyncio.run(watch_drain(group, worker, redis_url, ends, timeout))
        rss = rss_mib(worker.process.pid)
    finally:
        group.stop()
    return Drain(messages, applied_s, committed_s, ready, rss)


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


# -- 2. latency ---------------------------------------------------------------------------------------
def probe_events(sid: str, ts: float, rng: random.Random) -> tuple[bytes, bytes]:
    docs = [f"probe-doc-{n}" for n in range(20)]
    impression = {"type": "impression", "session_id": sid, "query": f"probe query {rng.randrange(50)}",
                  "query_bucket": "tail", "ranker": "probe", "variant": "probe", "ts": ts,
                  "results": [{"doc_id": d, "position": i, "score": 1.0 - i / 100}
                              for i, d in enumerate(docs, start=1)]}
    labels = {"type": "annotation", "session_id": sid,
              "grades": [{"doc_id": d, "grade": rng.choice(("高", "中", "低", "无"))} for d in docs]}
    return (json.dumps(impression, ensure_ascii=False).encode(),
            json.dumps(labels, ensure_ascii=False).encode())


async def counter(redis: Redis, prefix: str, partition: int, name: str) -> float:
    value = await redis.hget(f"{prefix}:{{p{partition}}}:cnt", f"{PROBE_GROUP}|{name}")
    return float(value) if value is not None else 0.0


async def wait_counter(redis: Redis, prefix: str, partition: int, name: str, above: float,
                       timeout: float) -> float | None:
    """Poll every millisecond until the counter exceeds ``above``; the time it did, or None."""
    deadline = time.perf_counter() + timeout
    while True:
        if await counter(redis, prefix, partition, name) > above:
            return time.perf_counter()
        if time.perf_counter() > deadline:
            return None
        await asyncio.sleep(0.002)


@dataclass
class Probes:
    latencies: list[float]
    acks: list[float]
    lost: int


async def run_probes(group: Group, redis_url: str, until: float, most: int, tag: str) -> Probes:
    topics = group.stream.topics
    rng = random.Random(7)
    redis = Redis.from_url(redis_url)
    producer = AIOKafkaProducer(bootstrap_servers=group.stream.bootstrap, acks="all", linger_ms=0,
                                enable_idempotence=True)
    await producer.start()
    out = Probes([], [], 0)
    try:
        for n in range(most):
            if time.monotonic() > until:
                break
            sid = f"probe-{tag}-{n}"
            partition = partition_for(sid.encode(), PARTITIONS)
            impression, labels = probe_events(sid, time.time(), rng)
            seen = await counter(redis, group.app_id, partition, "impressions")
            await producer.send_and_wait(topics["impressions"], impression, key=sid.encode())
            if await wait_counter(redis, group.app_id, partition, "impressions", seen, 30.0) is None:
                out.lost += 1
                continue
            scored = await counter(redis, group.app_id, partition, "scored")
            sent = time.perf_counter()
            await producer.send_and_wait(topics["annotations"], labels, key=sid.encode())
            acked = time.perf_counter()
            counted = await wait_counter(redis, group.app_id, partition, "scored", scored, 30.0)
            if counted is None:
                out.lost += 1
                continue
            out.latencies.append(counted - sent)
            out.acks.append(acked - sent)
            if len(out.latencies) % 25 == 0:
                say(f"  {len(out.latencies)} probes, last {1000 * out.latencies[-1]:.0f} ms")
            await asyncio.sleep(rng.uniform(0.05, 0.25))  # probes at random phases of the worker's batches
    finally:
        await producer.stop()
        await redis.aclose()
    return out


def events_total(samples: dict) -> float:
    return sum(v for (name, _), v in samples.items() if name == "search_relevance_events_total")


def scrape(worker: Worker) -> tuple[dict, float]:
    started = time.perf_counter()
    text = worker.metrics_text()
    return parse_metrics(text), time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


# -- 3. memory ----------------------------------------------------------------------------------------
class Requested:
    """The simulated stream with labels only for the sessions the worker samples, predicted with its rule
    (``join._on_impression``: per partition, bucket and budget period, the first budget / partitions
    impressions; no query-level judgments in this traffic, every impression carries its bucket).

    ``offsets[p]`` are the impression offsets of partition ``p`` predicted sampled (the topics are fresh and
    produced in order by one idempotent producer, so the n-th impression of a partition is at offset n)."""

    def __init__(self, config: StreamConfig, stop: threading.Event) -> None:
        self.config, self.stop = config, stop
        self.used: Counter[tuple[int, str, int]] = Counter()
        self.sampled: set[bytes] = set()
        self.seen: Counter[int] = Counter()
        self.offsets: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.dropped = 0

    def filter(self, events: Iterable[SimEvent]) -> Iterator[SimEvent]:
        for event in events:
            if self.stop.is_set():
                return
            if event.topic == "impressions":
                partition = partition_for(event.key, PARTITIONS)
                if event.key not in self.sampled:
                    obj = json.loads(event.value)
                    bucket = obj["query_bucket"]
                    slot = (partition, bucket, budget_period(obj["ts"], self.config))
                    if self.used[slot] < self.config.budget[bucket] / PARTITIONS:
                        self.used[slot] += 1
                        self.sampled.add(event.key)
                        self.offsets[partition].append(self.seen[partition])
                self.seen[partition] += 1
            elif event.topic == "annotations" and event.key not in self.sampled:
                self.dropped += 1
                continue
            yield event

    def predicted(self, impressions_applied: dict[int, int]) -> int:
        """Sessions sampled among the impressions applied (partition -> next offset)."""
        return sum(bisect.bisect_left(self.offsets[p], end) for p, end in impressions_applied.items())


@dataclass
class Sample:
    at: float
    events: int
    rss_mib: float
    used_memory: int
    waiting: int


async def sample_memory(group: Group, worker: Worker, redis_url: str, until: float, target: int,
                        produced: dict[str, int]) -> tuple[list[Sample], dict[tuple[str, int], int]]:
    """Every 0.5 s until everything produced is applied (or ``target``, or ``until``): the samples, and the
    offsets applied at the last one."""
    redis = Redis.from_url(redis_url)
    samples: list[Sample] = []
    last_note = time.monotonic()
    try:
        while True:
            offsets = await applied(redis, group.app_id)
            waiting, used = await waiting_and_memory(redis, group.app_id)
            now = time.monotonic()
            samples.append(Sample(now, sum(offsets.values()), rss_mib(worker.process.pid), used, waiting))
            if worker.process.poll() is not None:
                raise SystemExit(f"the worker exited:\n{worker.log.read_text()[-3000:]}")
            done = samples[-1].events
            if ("sent" in produced and done >= produced["sent"]) or now > until or done >= target:
                return samples, offsets
            if now - last_note > 20:
                last_note = now
                say(f"  {done} messages applied ({produced.get('sending', 0)} produced), "
                    f"RSS {samples[-1].rss_mib:.0f} MiB, {waiting} waiting")
            await asyncio.sleep(0.5)
    finally:
        await redis.aclose()


def at_share(samples: list[Sample], share: float) -> Sample:
    goal = share * samples[-1].events
    return min(samples, key=lambda s: abs(s.events - goal))


async def counters_and_keys(redis_url: str, prefix: str) -> tuple[Counter[str], dict[str, tuple[int, int]]]:
    """The worker's counters summed over partitions and groups (``sampled``, ``early_labels`` ...) with the
    largest partition watermark as ``watermark``, and the memory of the run's keys by kind."""
    redis = Redis.from_url(redis_url)
    try:
        pipe = redis.pipeline(transaction=False)
        for partition in range(PARTITIONS):
            pipe.hgetall(f"{prefix}:{{p{partition}}}:cnt")
            pipe.hget(f"{prefix}:{{p{partition}}}:meta", "wm")
        results = await pipe.execute()
        totals: Counter[str] = Counter()
        for fields in results[0::2]:
            for name, value in fields.items():
                totals[name.decode().rpartition("|")[2]] += float(value)
        totals["watermark"] = max(float(w) for w in results[1::2] if w is not None)
        return totals, await prefix_memory(redis, prefix)
    finally:
        await redis.aclose()


# -- the three parts ----------------------------------------------------------------------------------
@dataclass
class Options:
    messages: int
    repeats: int
    probes: int
    latency_s: float
    warmup_s: float
    idle_probes: int
    idle_s: float
    memory_events: int
    time_limit: float


Row = tuple[str, str, str, str, str]


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def part_throughput(options: Options, bootstrap: str, redis_url: str, scratch: Path, cleanup: Cleanup,
                    tag: str, report: Report) -> tuple[float, float]:
    """Part 1; returns the medians (committed, applied) of the worker in messages per second."""
    say(f"1. throughput: producing {options.messages} simulated messages")
    stream = cleanup.stream(Stream(bootstrap, tag=f"{tag}-tp", partitions=PARTITIONS))
    events = backlog(options.messages, seed=11)
    sessions = sum(1 for e in events if e.topic == "impressions")
    started = time.monotonic()
    stream.send(events)
    del events
    ends = asyncio.run(end_offsets(stream))
    if sum(ends.values()) != options.messages:
        raise SystemExit(f"the topics hold {sum(ends.values())} messages, not {options.messages}")
    say(f"  {options.messages} messages ({sessions} sessions) produced in {time.monotonic() - started:.1f} s")
    drains: list[Drain] = []
    raws: list[tuple[int, float]] = []
    for index in range(options.repeats):
        group = cleanup.group(Group(stream, redis_url, scratch, f"tp{index}", UNLIMITED_TOML))
        drains.append(worker_drain(group, redis_url, ends, timeout=max(120.0, options.messages / 100)))
        asyncio.run(drop_prefix(redis_url, group.app_id))
        raws.append(asyncio.run(raw_consume(stream, ends)))
        d = drains[-1]
        say(f"  repeat {index + 1}: worker {d.rate:.0f}/s committed, {d.applied_rate:.0f}/s applied "
            f"(ready in {d.ready_s:.1f} s, RSS {d.rss_mib:.0f} MiB); raw {raws[-1][0] / raws[-1][1]:.0f}/s")
    worker = statistics.median(d.rate for d in drains)
    applied_rate = statistics.median(d.applied_rate for d in drains)
    raw = statistics.median(n / s for n, s in raws)
    n = options.repeats
    report.rows += [
        ("1", f"one worker draining the backlog, to committed offsets (median of {n})",
         f"{worker:,.0f} msg/s", f"aiokafka + json.loads: {raw:,.0f} msg/s; goal ≥ 0.5",
         f"**{worker / raw:.3f}**"),
        ("1", f"the same, to the last offset applied in Redis (median of {n})",
         f"{applied_rate:,.0f} msg/s", "same peer", f"{applied_rate / raw:.3f}"),
        ("1", "drain time, worker (committed) / peer (median)",
         f"{statistics.median(d.committed_s for d in drains):.1f} s",
         f"{statistics.median(s for _, s in raws):.2f} s", ""),
        ("1", "worker process start to /readyz (median)",
         f"{statistics.median(d.ready_s for d in drains):.1f} s", "", ""),
    ]
    report.notes.append(
        f"1. {options.messages:,} messages ({sessions:,} sessions), 4 partitions, every session joined; per "
        "repeat: worker " + ", ".join(f"{d.rate:,.0f}" for d in drains) + " msg/s (committed), "
        + ", ".join(f"{d.applied_rate:,.0f}" for d in drains) + " (applied); raw "
        + ", ".join(f"{a / b:,.0f}" for a, b in raws) + " msg/s.")
    return worker, applied_rate


def lag_of(samples: dict) -> float:
    return sum(v for (name, _), v in samples.items() if name == "search_relevance_consumer_lag")


def caught_up(worker: Worker, within: float, rate: float) -> tuple[bool, float]:
    """Wait (scraping every second) until the worker's consumer lag is below a tenth of a second of
    traffic; whether it was, and the seconds it took."""
    started = time.monotonic()
    while True:
        time.sleep(1.0)
        samples, _ = scrape(worker)
        if events_total(samples) > 0 and lag_of(samples) <= max(20.0, rate / 10):
            return True, time.monotonic() - started
        if time.monotonic() - started > within:
            return False, time.monotonic() - started


def part_latency(options: Options, bootstrap: str, redis_url: str, scratch: Path, cleanup: Cleanup,
                 tag: str, report: Report, sustained: float) -> None:
    """Part 2: probes on an idle worker, then with traffic at a quarter and at half of ``sustained``
    (each load on a fresh worker and topics, so the second starts from nothing behind)."""
    say("2. latency: probes one at a time, on an idle worker, then with traffic at 1/4 and 1/2 of "
        f"{sustained:.0f} msg/s")
    per_session = 16.3  # records per simulated session (monitor.sim defaults)
    for share, seconds in ((0.25, options.latency_s / 3), (0.5, options.latency_s * 2 / 3)):
        background = sustained * share
        name = f"lat{int(share * 100)}"
        stream = cleanup.stream(Stream(bootstrap, tag=f"{tag}-{name}", partitions=PARTITIONS))
        stream.send([])
        group = cleanup.group(Group(stream, redis_url, scratch, name, UNLIMITED_TOML))
        worker = group.start()
        if share == 0.25:
            idle = asyncio.run(run_probes(group, redis_url, time.monotonic() + options.idle_s,
                                          options.idle_probes, f"{tag}-idle"))
            i50, i99 = percentile(idle.latencies, 50), percentile(idle.latencies, 99)
            say(f"  idle: p50 {1000 * i50:.0f} ms, p99 {1000 * i99:.0f} ms ({len(idle.latencies)} probes)")
            report.rows.append((
                "2", f"annotation → session counted, idle worker, p50 / p99 ({len(idle.latencies)} probes)",
                f"{1000 * i50:.0f} / {1000 * i99:.0f} ms", "no other traffic", ""))
        run_sessions = max(200, int(background * 30 / per_session))  # a simulated run lasts about 30 s
        log = (scratch / f"{name}-produce.log").open("wb")
        traffic = subprocess.Popen(
            [sys.executable, "-m", "monitor", "produce", "--bootstrap", bootstrap, "--sessions",
             str(run_sessions), "--duration", f"{run_sessions * per_session / background:.1f}",
             "--rate", f"{background:.1f}", "--forever", "--start", "now"],
            env=group.env(0), stdout=log, stderr=subprocess.STDOUT)
        try:
            ok, took = caught_up(worker, options.warmup_s, background)
            say(f"  {background:.0f} msg/s: " + (f"caught up after {took:.0f} s" if ok else
                                                 f"still behind after {took:.0f} s; probing anyway"))
            before, _ = scrape(worker)
            started = time.monotonic()
            probes = asyncio.run(run_probes(group, redis_url, started + seconds, options.probes,
                                            f"{tag}-{name}"))
            after, _ = scrape(worker)
            elapsed = time.monotonic() - started
            if traffic.poll() is not None:
                raise SystemExit(f"monitor produce stopped:\n{log.name}")
        finally:
            traffic.terminate()
            traffic.wait(timeout=30)
            log.close()
        consumed = (events_total(after) - events_total(before)) / elapsed
        scrapes = [scrape(worker)[1] for _ in range(5)] if share == 0.5 else []
        counted = sum(v for (metric, labels), v in scrape(worker)[0].items()
                      if metric == "search_relevance_scored_total" and dict(labels).get("ranker") == "probe")
        group.stop()
        if not probes.latencies:
            raise SystemExit("no probe was counted")
        p50, p99 = percentile(probes.latencies, 50), percentile(probes.latencies, 99)
        label = "half of" if share == 0.5 else "a quarter of"
        say(f"  {background:.0f} msg/s: p50 {1000 * p50:.0f} ms, p99 {1000 * p99:.0f} ms "
            f"({len(probes.latencies)} probes), consumed {consumed:.0f} msg/s, lag {lag_of(after):.0f}")
        report.rows += [
            ("2", f"annotation → session counted at {label} the rate, p50 / p99 ({len(probes.latencies)} "
             "probes)", f"{1000 * p50:.0f} / {1000 * p99:.0f} ms",
             "goal p99 < 1,000 ms" if share == 0.5 else "", f"**{p99:.2f} s**" if share == 0.5 else ""),
            ("2", f"traffic consumed meanwhile (offered: {label} {sustained:,.0f}); lag at the end",
             f"{consumed:,.0f} msg/s; {lag_of(after):,.0f} msgs", f"offered {background:,.0f} msg/s",
             f"{consumed / background:.2f}"),
        ]
        if share == 0.5:
            report.rows += [
                ("2", "the producer's ack of the annotation (acks=all), p50",
                 f"{1000 * percentile(probes.acks, 50):.0f} ms", "", ""),
                ("2", "a /metrics scrape (median of 5, after the run)",
                 f"{1000 * statistics.median(scrapes):.0f} ms", "", ""),
            ]
        report.notes.append(
            f"2. at {background:,.0f} msg/s: {len(probes.latencies)} probes in {elapsed:.0f} s "
            f"({probes.lost} lost), max {1000 * max(probes.latencies):.0f} ms; "
            f"scored_total{{ranker=\"probe\"}} on /metrics: {counted:.0f}.")


def part_memory(options: Options, bootstrap: str, redis_url: str, scratch: Path, cleanup: Cleanup,
                tag: str, report: Report, sustained: float) -> None:
    seconds = max(options.time_limit - (time.monotonic() - STARTED) - 10.0, 10.0)
    pace = 1.5 * sustained
    target = min(options.memory_events, int(pace * seconds))
    say(f"3. memory: up to {target} messages at {pace:.0f} msg/s at most, for {seconds:.0f} s; budget 2,000 "
        "sessions per bucket per hour")
    stream = cleanup.stream(Stream(bootstrap, tag=f"{tag}-mem", partitions=PARTITIONS))
    stream.send([])
    group = cleanup.group(Group(stream, redis_url, scratch, "mem", BUDGET_TOML))
    used_before = asyncio.run(waiting_and_memory_once(redis_url, group.app_id))[1]
    worker = group.start()
    stop = threading.Event()
    config = StreamConfig(budget=BUDGET)
    requested = Requested(config, stop)
    sim = SimConfig(seed=5, n_sessions=options.memory_events, duration_s=options.memory_events / 10.0,
                    bucket_hint_share=1.0, query_judgment_share=0.0, early_label_prob=0.0, invalid_rate=0.0)
    produced: dict[str, int] = {}

    def counted(events: Iterable[SimEvent]) -> Iterator[SimEvent]:
        for number, event in enumerate(events, start=1):
            produced["sending"] = number
            yield event

    def flow() -> None:
        events = counted(itertools.islice(requested.filter(generate(sim)), target))
        produced["sent"] = asyncio.run(produce(bootstrap, stream.topics, events, pace))

    thread = threading.Thread(target=flow, daemon=True)
    thread.start()
    try:
        samples, offsets = asyncio.run(sample_memory(group, worker, redis_url, time.monotonic() + seconds,
                                                     target, produced))
    finally:
        stop.set()
        thread.join(timeout=60)
    final, _ = scrape(worker)
    group.stop()
    totals, kinds = asyncio.run(counters_and_keys(redis_url, group.app_id))
    impressions = {p: end for (topic, p), end in offsets.items() if topic == stream.topics["impressions"]}
    predicted = requested.predicted(impressions)
    last = samples[-1]
    ten, half = at_share(samples, 0.1), at_share(samples, 0.5)
    waiting = max(last.waiting, 1)
    growth = last.used_memory - used_before
    own = sum(size for _, size in kinds.values())
    records, record_bytes = kinds.get("s", (0, 0))
    gauge = sum(v for (name, _), v in final.items() if name == "search_relevance_waiting_sessions")
    after = [s for s in samples if s.events >= ten.events]
    kept = totals["sampled"] or 1.0
    session_bytes = sum(kinds.get(kind, (0, 0))[1] for kind in ("s", "e", "q:pending"))
    per_kept = session_bytes / kept
    steady = per_kept * sum(BUDGET.values()) * config.state_ttl / config.budget_period
    mib = 2**20
    report.rows += [
        ("3", f"worker RSS at 10% / 50% / 100% of {last.events:,} messages",
         f"{ten.rss_mib:.0f} / {half.rss_mib:.0f} / {last.rss_mib:.0f} MiB",
         f"flat (min / max after 10%: {min(s.rss_mib for s in after):.0f} / "
         f"{max(s.rss_mib for s in after):.0f})",
         f"**{last.rss_mib / ten.rss_mib:.2f}**"),
        ("3", "waiting sessions at 10% / 50% / 100%",
         f"{ten.waiting:,} / {half.waiting:,} / {last.waiting:,}",
         f"bounded by the budget (min / max after 10%: {min(s.waiting for s in after):,} / "
         f"{max(s.waiting for s in after):,})", ""),
        ("3", "Redis used_memory growth at 10% / 50% / 100%",
         " / ".join(f"{(s.used_memory - used_before) / mib:,.1f}" for s in (ten, half, last)) + " MiB",
         "shared Redis", ""),
        ("3", "Redis per waiting session at 100%: used_memory growth / the run's keys (MEMORY USAGE)",
         f"{growth / waiting / 1024:,.1f} / {own / waiting / 1024:,.1f} KiB",
         f"{growth / mib:,.1f} / {own / mib:,.1f} MiB over {last.waiting:,}", ""),
        ("3", "Redis per sampled session (its record, early labels, query index entry)", f"{per_kept:,.0f} B",
         f"{session_bytes / mib:,.1f} MiB / {kept:,.0f}", ""),
        ("3", "session records kept (scored ones too, for late labels), bytes each",
         f"{records:,} × {record_bytes / max(records, 1):,.0f} B", "", ""),
    ]
    biggest = sorted(kinds.items(), key=lambda kv: -kv[1][1])[:6]
    share = ", ".join(f"{kind} {size / 2**20:.1f} MiB ({keys:,})" for kind, (keys, size) in biggest)
    sent = produced.get("sent", produced.get("sending", 0))
    span = (last.at - samples[0].at)
    report.notes.append(
        f"3. {last.events:,} messages applied in {span:.0f} s ({sent:,} produced; the aim, "
        f"{options.memory_events:,}, " + ("reached" if last.events >= options.memory_events else
                                          "cut short by the time limit") +
        f"); impressions {totals['impressions']:,.0f}, "
        f"sampled {totals['sampled']:,.0f} (predicted {predicted:,}), scored {totals['scored']:,.0f}, "
        f"expired {totals['expired']:,.0f}, grades applied before their impression "
        f"{totals['early_labels']:,.0f} (kept as early labels: in a backlog the annotations topic runs "
        "ahead); "
        f"{requested.dropped:,} labels of unsampled sessions not sent; waiting gauge {gauge:,.0f}, the "
        f"stream's last impression {totals['watermark'] % config.budget_period:.0f} s into a budget period "
        "(sessions sampled since then wait for labels the stream has not reached); "
        f"keys by kind (count): {share}. Session records live state_ttl ({config.state_ttl / 3600:.0f} h) "
        f"after their last change, so at a steady budget this run's {per_kept:,.0f} B per sampled session "
        f"come to about {steady / 2**30:.1f} GiB of Redis (3 buckets × 2,000 an hour × state_ttl).")


async def waiting_and_memory_once(redis_url: str, prefix: str) -> tuple[int, int]:
    redis = Redis.from_url(redis_url)
    try:
        return await waiting_and_memory(redis, prefix)
    finally:
        await redis.aclose()


# -- main ---------------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run of about a minute")
    parser.add_argument("--messages", type=int, help="backlog of part 1 (default 100000; quick 10000)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--probes", type=int, help="latency probes at most (default 300; quick 30)")
    parser.add_argument("--latency-seconds", type=float, help="part 2's probing time (default 75; quick 10)")
    parser.add_argument("--memory-events", type=int, default=1_000_000, help="part 3's messages at most")
    parser.add_argument("--time-limit", type=float,
                        help="seconds for the whole run; part 3 gets what is left (default 580; quick 65)")
    parser.add_argument("--bootstrap", help="Kafka (default: MONITOR_KAFKA_BOOTSTRAP or monitor services)")
    parser.add_argument("--redis-url", help="Redis (default: MONITOR_REDIS_URL or monitor services)")
    args = parser.parse_args()
    quick = args.quick
    options = Options(
        messages=args.messages or (10_000 if quick else 100_000), repeats=args.repeats,
        probes=args.probes or (30 if quick else 300),
        latency_s=args.latency_seconds or (10.0 if quick else 75.0), warmup_s=8.0 if quick else 30.0,
        idle_probes=5 if quick else 30, idle_s=3.0 if quick else 15.0,
        memory_events=args.memory_events, time_limit=args.time_limit or (65.0 if quick else 580.0))
    bootstrap, redis_url = services(args.bootstrap, args.redis_url)
    load_before = os.getloadavg()
    say(f"Kafka {bootstrap}, Redis {redis_url}, {os.cpu_count()} cores, load average {load_before[0]:.1f}")
    cleanup = Cleanup(bootstrap, redis_url)
    report = Report()
    tag = "bench" + uuid.uuid4().hex[:6]
    try:
        with tempfile.TemporaryDirectory(prefix="stream-bench-") as folder:
            scratch = Path(folder)
            _, sustained = part_throughput(options, bootstrap, redis_url, scratch, cleanup, tag, report)
            part_latency(options, bootstrap, redis_url, scratch, cleanup, tag, report, sustained)
            part_memory(options, bootstrap, redis_url, scratch, cleanup, tag, report, sustained)
    finally:
        cleanup.run()
    load_after = os.getloadavg()
    print("| part | measure | figure | peer / goal | ratio |")
    print("|---|---|---|---|---|")
    for row in report.rows:
        print("| " + " | ".join(row) + " |")
    print()
    for note in report.notes:
        print(note)
    print(f"Wall time {time.monotonic() - STARTED:.0f} s, {os.cpu_count()} cores, load average "
          f"{load_before[0]:.1f} before and {load_after[0]:.1f} after (a shared machine; the peer of part 1 "
          "runs in the same conditions, alternating with the worker).")


if __name__ == "__main__":
    main()
