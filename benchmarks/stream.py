"""Benchmark: ``monitor worker`` on the real Kafka and Redis: throughput, annotation latency, memory.

1. Throughput (:mod:`throughput`): a backlog drained by one worker, in two worlds: ``realistic`` (the
   headline: impressions dominate, only the ~2% of sessions the worker samples are labelled) and
   ``annotation-heavy`` (every session sampled and labelled); against raw aiokafka + ``json.loads`` of the
   same topics and the baseline worker (``--baseline``, before issue 19) in the same run, medians of
   ``--repeats``; the CPU per message of the worker (by stage), Redis and the broker; and
   ``monitor worker --processes N`` for N in 1, 2, 4.
2. Annotation-to-gauge latency, in the realistic world. Probes, one at a time: a session of a dedicated
   group (bucket tail, ranker and variant ``probe``), its impression, and once that is applied, one
   annotation grading its whole top 20. The latency is from producing that annotation to the partition's
   ``tail|probe|probe|scored`` counter in Redis going up by one, polled every 2 ms: the moment the shared
   state includes the session. A probe counts in its partition's tail budget like any session (since issue
   29 no query is sampled outside the budget): one that comes after the period's share is spent is not
   sampled, and is skipped (counted, not a latency), and one that is sampled takes the place of a traffic
   session the labels were predicted for (this part was not re-run since). ``search_relevance_scored_total``
   and the gauges include it at the exporter's next rollup, up to ``rollup_interval`` (5 s) plus its
   computation later (docs/worker.md, "The exporter and the rollup"). A fresh worker on empty topics is
   probed idle first, then, once caught up, while realistic traffic flows at a quarter of the rate measured
   in 1 (the realistic world, applied), then another fresh worker at half that rate, the goal's load (p99 <
   1 s). The traffic's event time is moved by whole days to the wall clock (budget periods and sketch slices
   stay aligned, so the labels go to exactly the sessions the worker samples) and the probes take the
   traffic's event time.
3. Memory, in the realistic world: a fresh worker with the realistic budget (``--sampled-share``) while
   simulated traffic flows (paced at 1.5 × the rate of 1, until ``--memory-events`` messages are applied or
   the time is up): 10 sessions per second of event time, every query with its bucket, labels only for the
   sessions the worker samples (which ones is predicted with the worker's own budget rule and checked
   against its ``sampled`` counter). Every 0.5 s: the worker's RSS (``/proc/<pid>/status``), Redis
   ``used_memory`` and the waiting sessions (what ``search_relevance_waiting_sessions`` counts). Reported
   at 10%, 50% and 100% of the messages applied, with Redis bytes per waiting session.

Everything runs on loopback with fresh topic names, group ids and Redis prefixes; the Redis keys and topics
are deleted at the end. Progress goes to stderr, the table (markdown) and a summary to stdout.

    .venv/bin/python benchmarks/stream.py            # about 25 minutes
    .venv/bin/python benchmarks/stream.py --quick    # about 3 minutes
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import itertools
import json
import math
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka import AIOKafkaProducer
from common import (
    PARTITIONS,
    STARTED,
    Cleanup,
    applied,
    percentile,
    rss_mib,
    say,
    scrape,
    services,
)
from redis.asyncio import Redis
from throughput import Options as ThroughputOptions
from throughput import checkout, heavy_world, part_throughput, realistic_world, remove_checkout

from monitor.core.stream.config import StreamConfig
from monitor.core.stream.counters import Counter as CounterKey
from monitor.core.stream.counters import decode_field, encode_field
from monitor.core.stream.partition import partition_for
from monitor.core.stream.sampling import budget_period, sampled_by
from monitor.sim import SimConfig, generate
from monitor.sim.records import SimEvent
from monitor.store.keys import Keys
from monitor.worker.produce import produce
from tests.support.realistic_mix import RealisticMix
from tests.support.worker_harness import Group, Stream, Worker

BASELINE = "eb0f541"
"""main before issue 19 (the msgspec decoder, the batch consumer): "today" in the issue's goals."""
PROBE_QUERIES = 50
PROBE_GROUP = "tail|probe|probe"
DAY = 86400.0


def budget_toml(config: StreamConfig) -> str:
    """The ``[stream]`` block of a worker with ``config``'s budget (and the probes' variant declared)."""
    budget = ", ".join(f"{b} = {config.budget[b]:g}" for b in ("head", "torso", "tail"))
    return (f"[stream]\nbudget = {{ {budget} }}\nbudget_period = {config.budget_period:g}\n"
            'variants = ["control", "canary", "probe"]\n')


def events_total(samples: dict) -> float:
    return sum(v for (name, _), v in samples.items() if name == "search_relevance_events_total")


async def waiting_and_memory(redis: Redis, prefix: str) -> tuple[int, int]:
    """What the worker's ``search_relevance_waiting_sessions`` and ``_redis_memory_bytes`` report."""
    pipe = redis.pipeline(transaction=False)
    keys = Keys(prefix)
    for group in range(keys.groups):
        pipe.hget(keys.g(group, "meta"), "waiting")
    waiting = sum(int(n or 0) for n in await pipe.execute())
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
            elif rest.startswith("{g"):  # a partition's own key ({g<G>}:p<N>:kind) or its group's total
                parts = rest.split("}:", 1)[1].split(":")
                kind = parts[1] if parts[0][:1] == "p" and parts[0][1:].isdigit() else parts[0]
            else:
                kind = rest
            entry = out.setdefault(kind, [0, 0])
            entry[0] += 1
            entry[1] += int(size or 0)
    return {kind: (n, size) for kind, (n, size) in out.items()}


# -- 2. latency ---------------------------------------------------------------------------------------
def probe_events(sid: str, ts: float, rng: random.Random) -> tuple[bytes, bytes]:
    docs = [f"{sid}-doc-{n}" for n in range(20)]  # its own documents: no other probe's grades cover them
    query = f"probe query {rng.randrange(PROBE_QUERIES)}"
    impression = {"type": "impression", "session_id": sid, "query": query,
                  "query_bucket": "tail", "ranker": "probe", "variant": "probe", "ts": ts,
                  "results": [{"doc_id": d, "position": i, "score": 1.0 - i / 100}
                              for i, d in enumerate(docs, start=1)]}
    labels = {"type": "annotation", "session_id": sid,
              "grades": [{"doc_id": d, "grade": rng.choice(("高", "中", "低", "无"))} for d in docs]}
    return (json.dumps(impression, ensure_ascii=False).encode(),
            json.dumps(labels, ensure_ascii=False).encode())


async def counter(redis: Redis, prefix: str, partition: int, name: str) -> float:
    value = await redis.hget(Keys(prefix).t(partition, "cnt"), encode_field(CounterKey(name, PROBE_GROUP)))
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
    unsampled: int = 0
    """Probes the budget did not sample (their partition's tail share of the period was spent): skipped."""


async def run_probes(group: Group, redis_url: str, until: float, most: int, tag: str,
                     clock: Callable[[], float] = time.time) -> Probes:
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
            impression, labels = probe_events(sid, clock(), rng)
            seen = await counter(redis, group.app_id, partition, "impressions")
            sampled = await counter(redis, group.app_id, partition, "sampled")
            await producer.send_and_wait(topics["impressions"], impression, key=sid.encode())
            if await wait_counter(redis, group.app_id, partition, "impressions", seen, 30.0) is None:
                out.lost += 1
                say(f"  probe {sid}: its impression was not counted within 30 s")
                continue
            if await counter(redis, group.app_id, partition, "sampled") <= sampled:
                out.unsampled += 1  # the tail share of its partition's period is spent: no session to score
                continue
            scored = await counter(redis, group.app_id, partition, "scored")
            sent = time.perf_counter()
            await producer.send_and_wait(topics["annotations"], labels, key=sid.encode())
            acked = time.perf_counter()
            counted = await wait_counter(redis, group.app_id, partition, "scored", scored, 30.0)
            if counted is None:
                out.lost += 1
                say(f"  probe {sid}: not scored within 30 s of its annotation")
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



class Traffic:
    """Realistic traffic for part 2: a backlog whose event times are moved by whole days to the wall
    clock, produced at ``rate`` in a thread; :meth:`now` is the event time it has reached."""

    def __init__(self, rate: float, seconds: float, sampled_share: float, seed: int) -> None:
        sessions = max(int(rate * seconds / 1.39 * 1.2), 500)  # ~1.39 messages per session
        self.backlog = RealisticMix(sessions=sessions, sampled_share=sampled_share, seed=seed).backlog()
        first = json.loads(self.backlog.events[0].value)["ts"]
        self.shift = math.floor((time.time() - first) / DAY) * DAY
        self.ts = first + self.shift
        self.rate, self.stop = rate, threading.Event()
        self.sent = 0

    def now(self) -> float:
        return self.ts

    def moved(self) -> Iterator[SimEvent]:
        for event in self.backlog.events:
            if self.stop.is_set():
                return
            obj = json.loads(event.value)
            if "ts" in obj:
                obj["ts"] += self.shift
                if event.topic == "impressions":
                    self.ts = max(self.ts, obj["ts"])
            self.sent += 1
            yield SimEvent(event.topic, event.key, json.dumps(obj, ensure_ascii=False).encode(), event.ts)

    def start(self, bootstrap: str, topics: dict[str, str]) -> threading.Thread:
        thread = threading.Thread(target=lambda: asyncio.run(produce(bootstrap, topics, self.moved(),
                                                                     self.rate)), daemon=True)
        thread.start()
        return thread


def caught_up(worker: Worker, within: float, rate: float) -> tuple[bool, float]:
    """Wait (scraping every second) until the worker's consumer lag is below a tenth of a second of
    traffic; whether it was, and the seconds it took."""
    started = time.monotonic()
    while True:
        time.sleep(1.0)
        samples, _ = scrape(worker)
        lag = sum(v for (name, _), v in samples.items() if name == "search_relevance_consumer_lag")
        if events_total(samples) > 0 and lag <= max(20.0, rate / 10):
            return True, time.monotonic() - started
        if time.monotonic() - started > within:
            return False, time.monotonic() - started


def part_latency(options: Options, bootstrap: str, redis_url: str, scratch: Path, cleanup: Cleanup,
                 tag: str, report: Report, sustained: float) -> None:
    """Part 2: probes on an idle worker, then with realistic traffic at a quarter and at half of
    ``sustained`` (each load on a fresh worker and topics, so the second starts from nothing behind)."""
    say("2. latency: probes one at a time, on an idle worker, then with realistic traffic at 1/4 and 1/2 of "
        f"{sustained:.0f} msg/s")
    config = RealisticMix(sampled_share=options.sampled_share).stream()
    for share, seconds in ((0.25, options.latency_s / 3), (0.5, options.latency_s * 2 / 3)):
        background = sustained * share
        name = f"lat{int(share * 100)}"
        traffic = Traffic(background, options.warmup_s + seconds + 20.0, options.sampled_share,
                          seed=17 + int(share * 100))
        stream = cleanup.stream(Stream(bootstrap, tag=f"{tag}-{name}", partitions=PARTITIONS))
        stream.send([])
        group = cleanup.group(Group(stream, redis_url, scratch, name, budget_toml(traffic.backlog.stream)))
        worker = group.start()
        if share == 0.25:
            idle = asyncio.run(run_probes(group, redis_url, time.monotonic() + options.idle_s,
                                          options.idle_probes, f"{tag}-idle", traffic.now))
            i50, i99 = percentile(idle.latencies, 50), percentile(idle.latencies, 99)
            say(f"  idle: p50 {1000 * i50:.0f} ms, p99 {1000 * i99:.0f} ms ({len(idle.latencies)} probes)")
            report.rows.append((
                "2", f"annotation → session counted, idle worker, p50 / p99 ({len(idle.latencies)} probes)",
                f"{1000 * i50:.0f} / {1000 * i99:.0f} ms", "no other traffic", ""))
        thread = traffic.start(bootstrap, stream.topics)
        try:
            ok, took = caught_up(worker, options.warmup_s, background)
            say(f"  {background:.0f} msg/s: " + (f"caught up after {took:.0f} s" if ok else
                                                 f"still behind after {took:.0f} s; probing anyway"))
            before, _ = scrape(worker)
            started = time.monotonic()
            probes = asyncio.run(run_probes(group, redis_url, started + seconds, options.probes,
                                            f"{tag}-{name}", traffic.now))
            after, _ = scrape(worker)
            elapsed = time.monotonic() - started
            if not thread.is_alive() and traffic.sent < len(traffic.backlog.events):
                raise SystemExit("the traffic stopped before its end")
        finally:
            traffic.stop.set()
            thread.join(timeout=60)
        consumed = (events_total(after) - events_total(before)) / elapsed
        lag = sum(v for (n, _), v in after.items() if n == "search_relevance_consumer_lag")
        scrapes = [scrape(worker)[1] for _ in range(5)] if share == 0.5 else []
        counted = sum(v for (metric, labels), v in scrape(worker)[0].items()
                      if metric == "search_relevance_scored_total" and dict(labels).get("ranker") == "probe")
        group.stop()
        if not probes.latencies:
            raise SystemExit(f"no probe was counted ({probes.lost} lost, {probes.unsampled} not sampled); "
                             f"the worker's log:\n"
                             f"{worker.log.read_text()[-3000:]}")
        p50, p99 = percentile(probes.latencies, 50), percentile(probes.latencies, 99)
        label = "half of" if share == 0.5 else "a quarter of"
        p90 = percentile(probes.latencies, 90)
        say(f"  {background:.0f} msg/s: p50 {1000 * p50:.0f} ms, p90 {1000 * p90:.0f} ms, "
            f"p99 {1000 * p99:.0f} ms ({len(probes.latencies)} probes; the slowest five: "
            f"{', '.join(f'{1000 * x:.0f}' for x in sorted(probes.latencies)[-5:])} ms), consumed "
            f"{consumed:.0f} msg/s, lag {lag:.0f}")
        report.rows += [
            ("2", f"realistic traffic at {label} the drain rate: annotation → session counted, p50 / p99 "
                  f"({len(probes.latencies)} probes)", f"{1000 * p50:.0f} / {1000 * p99:.0f} ms",
             "goal p99 < 1,000 ms" if share == 0.5 else "", f"**{p99:.2f} s**" if share == 0.5 else ""),
            ("2", f"traffic consumed meanwhile (offered: {label} {sustained:,.0f}); lag at the end",
             f"{consumed:,.0f} msg/s; {lag:,.0f} msgs", f"offered {background:,.0f} msg/s",
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
            f"2. at {background:,.0f} msg/s ({config.budget} sessions sampled per "
            f"{config.budget_period:.0f} s): {len(probes.latencies)} probes in {elapsed:.0f} s "
            f"({probes.lost} lost, {probes.unsampled} not sampled), "
            f"max {1000 * max(probes.latencies):.0f} ms; "
            f"scored_total{{ranker=\"probe\"}} on /metrics: {counted:.0f}.")


# -- 3. memory ----------------------------------------------------------------------------------------
class Requested:
    """The simulated stream with labels only for the sessions the worker samples, predicted with its rule
    (``join._on_impression``, :func:`~monitor.core.stream.sampling.sampled_by`: per partition, bucket and
    budget period, an impression while the partition's spend is below the allowance at its ``ts``; no
    query-level judgments in this traffic, every impression carries its bucket).

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
                    if sampled_by(bucket, obj["ts"], self.used[slot], self.config, PARTITIONS):
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
        keys = Keys(prefix)
        for group in range(keys.groups):  # the groups' totals: counters and the largest watermark
            pipe.hgetall(keys.g(group, "cnt"))
            pipe.hget(keys.g(group, "meta"), "wm")
        results = await pipe.execute()
        totals: Counter[str] = Counter()
        for fields in results[0::2]:
            for name, value in fields.items():
                totals[decode_field(name.decode()).name] += float(value)
        totals["watermark"] = max(float(w) for w in results[1::2] if w is not None)
        return totals, await prefix_memory(redis, prefix)
    finally:
        await redis.aclose()


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
    sampled_share: float


Row = tuple[str, str, str, str, str]


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def part_memory(options: Options, bootstrap: str, redis_url: str, scratch: Path, cleanup: Cleanup,
                tag: str, report: Report, sustained: float) -> None:
    seconds = options.time_limit
    pace = 1.5 * sustained
    target = min(options.memory_events, int(pace * seconds))
    config = RealisticMix(sessions=10**6, sampled_share=options.sampled_share).stream()
    say(f"3. memory: up to {target} messages at {pace:.0f} msg/s at most, for {seconds:.0f} s; budget "
        f"{config.budget} sessions per {config.budget_period:.0f} s ({options.sampled_share:.0%} sampled)")
    stream = cleanup.stream(Stream(bootstrap, tag=f"{tag}-mem", partitions=PARTITIONS))
    stream.send([])
    group = cleanup.group(Group(stream, redis_url, scratch, "mem", budget_toml(config)))
    used_before = asyncio.run(waiting_and_memory_once(redis_url, group.app_id))[1]
    worker = group.start()
    stop = threading.Event()
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
    steady = per_kept * sum(config.budget.values()) * config.state_ttl / config.budget_period
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
        f"come to about {steady / 2**30:.1f} GiB of Redis (the budget × state_ttl).")


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
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few minutes")
    parser.add_argument("--messages", type=int, help="backlog of part 1 (default 100000; quick 30000)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sampled-share", type=float, default=0.02,
                        help="realistic world: share of sessions sampled and labelled (default 0.02)")
    parser.add_argument("--worlds", default="realistic,annotation-heavy",
                        help="part 1's worlds, comma-separated (default: realistic,annotation-heavy)")
    parser.add_argument("--baseline", default=BASELINE,
                        help=f"git revision of part 1's baseline worker (default {BASELINE}; 'none': skip)")
    parser.add_argument("--processes", default="1,2,4",
                        help="part 1b's worker process counts, comma-separated (default 1,2,4; 'none': skip)")
    parser.add_argument("--uvloop", action="store_true",
                        help="part 1 also drains with the current worker on uvloop (MONITOR_EVENT_LOOP)")
    parser.add_argument("--parts", default="1,2,3", help="which parts to run (default 1,2,3)")
    parser.add_argument("--drain-rate", type=float,
                        help="the realistic drain rate parts 2 and 3 take when part 1 does not run")
    parser.add_argument("--probes", type=int, help="latency probes at most (default 300; quick 30)")
    parser.add_argument("--latency-seconds", type=float, help="part 2's probing time (default 75; quick 10)")
    parser.add_argument("--memory-events", type=int, default=1_000_000, help="part 3's messages at most")
    parser.add_argument("--memory-seconds", type=float, help="part 3's time at most (default 600; quick 30)")
    parser.add_argument("--bootstrap", help="Kafka (default: MONITOR_KAFKA_BOOTSTRAP or monitor services)")
    parser.add_argument("--redis-url", help="Redis (default: MONITOR_REDIS_URL or monitor services)")
    args = parser.parse_args()
    quick = args.quick
    options = Options(
        messages=args.messages or (30_000 if quick else 100_000), repeats=args.repeats,
        probes=args.probes or (30 if quick else 300),
        latency_s=args.latency_seconds or (10.0 if quick else 75.0), warmup_s=8.0 if quick else 30.0,
        idle_probes=5 if quick else 30, idle_s=3.0 if quick else 15.0,
        memory_events=args.memory_events, time_limit=args.memory_seconds or (30.0 if quick else 600.0),
        sampled_share=args.sampled_share)
    parts = set(args.parts.split(","))
    processes = () if args.processes == "none" else tuple(int(n) for n in args.processes.split(","))
    bootstrap, redis_url = services(args.bootstrap, args.redis_url)
    load_before = os.getloadavg()
    say(f"Kafka {bootstrap}, Redis {redis_url}, {os.cpu_count()} cores, load average {load_before[0]:.1f}")
    cleanup = Cleanup(bootstrap, redis_url)
    report = Report()
    tag = "bench" + uuid.uuid4().hex[:6]
    baseline: Path | None = None
    try:
        with tempfile.TemporaryDirectory(prefix="stream-bench-") as folder:
            scratch = Path(folder)
            sustained = math.nan
            if "1" in parts:
                if args.baseline != "none":
                    baseline = checkout(args.baseline, scratch)
                worlds = {"realistic": lambda: realistic_world(options.messages, options.sampled_share),
                          "annotation-heavy": lambda: heavy_world(options.messages)}
                chosen = [worlds[name]() for name in args.worlds.split(",")]
                rows, sustained = part_throughput(
                    ThroughputOptions(options.messages, options.repeats, options.sampled_share, baseline,
                                      args.baseline, processes, args.uvloop),
                    chosen, bootstrap, redis_url, scratch, cleanup, tag)
                report.rows += rows
            if math.isnan(sustained) and args.drain_rate:
                sustained = args.drain_rate
                say(f"parts 2 and 3 take the drain rate given: {sustained:.0f} msg/s")
            if math.isnan(sustained):
                sustained = 4000.0 if not quick else 2000.0
                say(f"no realistic drain rate measured: parts 2 and 3 take {sustained:.0f} msg/s")
            if "2" in parts:
                part_latency(options, bootstrap, redis_url, scratch, cleanup, tag, report, sustained)
            if "3" in parts:
                part_memory(options, bootstrap, redis_url, scratch, cleanup, tag, report, sustained)
    finally:
        cleanup.run()
        if baseline is not None:
            remove_checkout(baseline)
    load_after = os.getloadavg()
    print("| part | measure | figure | peer / goal | ratio |")
    print("|---|---|---|---|---|")
    for row in report.rows:
        print("| " + " | ".join(row) + " |")
    print()
    for note in report.notes:
        print(note)
    print(f"Wall time {time.monotonic() - STARTED:.0f} s, {os.cpu_count()} cores, load average "
          f"{load_before[0]:.1f} before and {load_after[0]:.1f} after (a shared machine; the peers of part 1 "
          "run in the same conditions, alternating with the worker).")


if __name__ == "__main__":
    main()
