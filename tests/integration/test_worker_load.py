"""Load on real Kafka and Redis: a burst of ten times the worker's drain rate, for a bounded time.

1. Warm-up: a backlog of simulated traffic (monitor/sim, no invalid events, every session sampled: the
   heaviest path) is produced, then one worker starts and drains it; its drain rate is measured from its
   own ``search_relevance_events_total`` from the first sample until it has caught up (measured here:
   4,100-7,000 messages/s on this 2-core machine, on this all-sampled stream). Its RSS when idle after
   that is the baseline.
2. Burst: the next messages of the same simulated stream are produced for ``BURST_SECONDS`` at
   ``BURST_FACTOR`` (12) times that rate, paced in 20 ms steps, by one aiokafka producer filling
   record batches per partition itself (``create_batch``/``send_batch``, Kafka's murmur2 partitioner);
   the rate counts from the first send to the last acknowledgement and must reach 10× the drain rate.
3. Drain: every second from the burst's start, the worker's ``search_relevance_consumer_lag`` (summed
   over its partitions), the group's log end minus committed offsets (what a lag exporter would show),
   the worker's RSS (``/proc/<pid>/status`` VmRSS) and its consumed count are sampled, until its lag is
   back to 0 and the committed offsets are at the end of every partition (the harness's drain).

Asserted: the produce rate was ≥ 10× the drain rate; both lags rose above half the burst and came back
to 0; the worker's RSS never grew more than ``RSS_GROWTH_MIB`` above the baseline, a bound that does not
depend on the burst (the backlog waits in Kafka, the state in Redis; the worker holds Faust's and
aiokafka's fixed-size fetch buffers and one batch (the bound grows with ``batch_size``): the burst's 300,000-odd messages as Python objects
would take several times the bound); the process never exited; and after a flush every relevance series
equals ``MemoryPipeline`` on exactly the messages produced (no message lost, none counted twice). The
figures are printed (run with ``-s``). The whole test takes about three minutes.

The worker's lag metric knows a partition's log end from its consumer's last fetch of that partition, so
during the burst it can lag the log end by some seconds (its peak comes after the burst's end); the
committed-offset lag shows the burst as it lands.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from monitor.sim import SimConfig, simulate
from monitor.worker.settings import WorkerSettings
from tests.support.worker_e2e import CONFIG, CONFIG_TOML, assert_same
from tests.support.worker_harness import Group, Stream, Worker, flush_events, parse_metrics
from tests.support.worker_inputs import in_process, relevance, scored_sessions
from tests.support.worker_load import produce_burst, rss_mib

pytestmark = pytest.mark.integration

WARMUP_MESSAGES = 30_000
BURST_FACTOR = 12.0        # paced above 10×: the rate counts to the last acknowledgement, and CI reached
                           # only 9.9× when paced at 10.5× (12,649/s against a drain rate of 1,280/s)
BURST_SECONDS = float(os.environ.get("MONITOR_LOAD_BURST_SECONDS", "5"))
MAX_DRAIN_RATE = 12_000.0  # messages/s the simulated stream is sized for (measured: 4,600-7,000)
BATCH_SIZE = WorkerSettings().batch_size
RSS_GROWTH_MIB = 24.0 + BATCH_SIZE * 40 / 1024
"""Above the idle RSS after the warm-up: fixed buffers, and one batch with what it loads from Redis, which
on this all-sampled stream is ~35 KiB per message (measured: +17.5 MiB with batches of 500, +66 and +72
with 2,000, the default; a bound of 102 MiB for 2,000, where the burst is 60-95 MiB of JSON and 300,000-odd
messages as Python objects would take several times that)."""
DRAIN_TIMEOUT = 150.0
SAMPLE_EVERY = 1.0


def lag_and_consumed(worker: Worker) -> tuple[float, float]:
    """The worker's consumer lag (summed over its partitions) and messages consumed, from /metrics."""
    samples = parse_metrics(worker.metrics_text())
    lag = sum(v for (n, _), v in samples.items() if n == "search_relevance_consumer_lag")
    consumed = sum(v for (n, _), v in samples.items() if n == "search_relevance_events_total")
    return lag, consumed


@dataclass(frozen=True)
class Sample:
    at: float         # time.monotonic()
    lag: float        # the worker's search_relevance_consumer_lag, summed
    consumed: float   # the worker's search_relevance_events_total, summed
    rss: float        # MiB
    behind: int       # log end offsets − the group's committed offsets, summed over the source partitions


@dataclass
class Sampler:
    """Samples one worker every ``every`` seconds, in a thread of its own (its own event loop and Kafka
    clients for the committed offsets, created once)."""

    worker: Worker
    stream: Stream
    group_id: str
    every: float = SAMPLE_EVERY
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Sampler:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()
        return self

    async def _run(self) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.stream.bootstrap)
        consumer = AIOKafkaConsumer(bootstrap_servers=self.stream.bootstrap)
        await admin.start()
        await consumer.start()
        partitions = [TopicPartition(t, p) for t in self.stream.topics.values()
                      for p in range(self.stream.partitions)]
        try:
            while not self._stop.is_set():
                began = time.monotonic()
                lag, consumed = lag_and_consumed(self.worker)
                ends = await consumer.end_offsets(partitions)
                committed = {tp: meta.offset for tp, meta in
                             (await admin.list_consumer_group_offsets(self.group_id)).items()}
                behind = sum(max(end - committed.get(tp, 0), 0) for tp, end in ends.items())
                self.samples.append(Sample(time.monotonic(), lag, consumed, rss_mib(self.worker.process.pid),
                                           behind))
                await asyncio.sleep(max(0.0, self.every - (time.monotonic() - began)))
        finally:
            await consumer.stop()
            await admin.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)


def drain_rate(worker: Worker, backlog: int, timeout: float = 120.0) -> float:
    """The worker's drain rate over a backlog it is consuming: messages/s from the first sample until it has
    caught up (lag 0, consumed ≥ backlog)."""
    deadline = time.monotonic() + timeout
    points: list[tuple[float, float]] = []
    while True:
        lag, consumed = lag_and_consumed(worker)
        now = time.monotonic()
        points.append((now, consumed))
        if consumed >= backlog and lag == 0:
            break
        assert worker.process.poll() is None, worker.log.read_text()[-4000:]
        assert now < deadline, f"the warm-up backlog did not drain in {timeout:.0f} s ({consumed}/{backlog})"
        time.sleep(0.25)
    # from the first sample to the end of the drain (lag 0, the fan-out annotations the worker publishes to
    # itself included): the rate moves a lot within it (labels before their impressions are cheap, a
    # sampled session's scoring and fan-outs are not), so a span of the backlog's 10-90% could time its
    # cheap part alone (CI once measured twice the true rate that way)
    (first_at, first), (last_at, last) = points[0], points[-1]
    assert last_at > first_at and last > first, points
    return (last - first) / (last_at - first_at)


def test_a_burst_of_ten_times_the_drain_rate_is_absorbed_and_drained(
        kafka_bootstrap: str, redis_url: str, tmp_path: Path) -> None:
    began = time.monotonic()
    needed = WARMUP_MESSAGES + int(MAX_DRAIN_RATE * BURST_FACTOR * BURST_SECONDS)
    result = simulate(SimConfig(seed=41, n_sessions=needed // 15, duration_s=6 * 3600, bucket_hint_share=1.0,
                                invalid_rate=0.0))
    events = result.events
    assert len(events) >= needed, (len(events), needed)
    stream = Stream(kafka_bootstrap)
    warmup = events[:WARMUP_MESSAGES]
    assert stream.send(warmup) == len(warmup)

    group = Group(stream, redis_url, tmp_path, "load", CONFIG_TOML)
    sampler: Sampler | None = None
    try:
        worker = group.start()
        pid = worker.process.pid
        rate = drain_rate(worker, len(warmup))
        idle = []
        for _ in range(6):  # the baseline: idle after the warm-up, the largest of 3 s of samples
            time.sleep(0.5)
            idle.append(rss_mib(pid))
        baseline = max(idle)

        count = int(rate * BURST_FACTOR * BURST_SECONDS)
        burst = events[WARMUP_MESSAGES:WARMUP_MESSAGES + count]
        assert len(burst) == count, f"a drain rate of {rate:.0f}/s is above MAX_DRAIN_RATE: size the stream up"
        sampler = Sampler(worker, stream, group.app_id).start()
        first, last = asyncio.run(produce_burst(kafka_bootstrap, stream.topics, burst, rate * BURST_FACTOR,
                                                stream.partitions))
        produce_rate = count / (last - first)

        deadline = time.monotonic() + DRAIN_TIMEOUT
        while not (sampler.samples and sampler.samples[-1].at > last and sampler.samples[-1].lag == 0
                   and sampler.samples[-1].consumed >= len(warmup) + count):
            assert worker.process.poll() is None, worker.log.read_text()[-4000:]
            assert time.monotonic() < deadline, f"the burst did not drain in {DRAIN_TIMEOUT:.0f} s"
            time.sleep(0.2)
        group.drain(timeout=DRAIN_TIMEOUT)
        taken = len(sampler.samples)
        while len(sampler.samples) <= taken + 1:  # two samples once the group's commits are at the end
            time.sleep(0.2)
        sampler.stop()
        samples = sampler.samples
        flush = flush_events(stream, max(e.ts for e in [*warmup, *burst]) + CONFIG.join_window + 1)
        assert stream.send(flush) == len(flush)
        group.drain(timeout=60)
        got = relevance(parse_metrics(worker.metrics_text()))
        assert worker.process.poll() is None and worker.process.pid == pid and group.restarts_seen() == []
        assert "Traceback" not in worker.log.read_text(errors="replace")
    finally:
        if sampler is not None:
            sampler.stop()
        group.stop()

    peak = max(samples, key=lambda s: s.lag)
    drained = next(s for s in samples if s.at > peak.at and s.lag == 0)
    peak_behind = max(samples, key=lambda s: s.behind)
    peak_rss = max(s.rss for s in samples)
    burst_mib = sum(len(e.value) + len(e.key) for e in burst) / 2**20
    # the messages consumed from the burst's end to lag 0: the drain rate with a backlog waiting
    after = next(s for s in samples if s.at >= last)
    loaded_rate = (drained.consumed - after.consumed) / (drained.at - after.at) if drained.at > after.at else math.nan
    every = max(1, len(samples) // 25)
    print(f"\nwarm-up: {len(warmup)} messages, drain rate {rate:.0f}/s; idle RSS {baseline:.1f} MiB\n"
          f"burst: {count} messages ({burst_mib:.1f} MiB) in {last - first:.2f} s = {produce_rate:.0f}/s, "
          f"{produce_rate / rate:.1f}x the drain rate\n"
          f"lag (worker's metric): peak {peak.lag:.0f} {peak.at - first:.1f} s after the burst began; back to 0 "
          f"{drained.at - last:.1f} s after the burst ended (drained at {loaded_rate:.0f}/s meanwhile)\n"
          f"behind (log end − committed): peak {peak_behind.behind} {peak_behind.at - first:.1f} s after the "
          f"burst began\n"
          f"RSS: peak {peak_rss:.1f} MiB, {peak_rss - baseline:+.1f} MiB over idle (bound {RSS_GROWTH_MIB:.0f})\n"
          f"every {every * SAMPLE_EVERY:.0f} s from the burst's start: lag {[int(s.lag) for s in samples[::every]]}\n"
          f"  behind {[s.behind for s in samples[::every]]}\n  RSS MiB {[round(s.rss) for s in samples[::every]]}\n"
          f"whole test {time.monotonic() - began:.0f} s")

    assert produce_rate >= 10 * rate, f"the producer reached {produce_rate / rate:.1f}x, not 10x"
    assert peak.lag >= count / 2 and peak_behind.behind >= count / 2
    assert samples[-1].lag == 0 and samples[-1].behind == 0
    assert peak_rss - baseline < RSS_GROWTH_MIB

    # no message lost, none counted twice: the numbers of exactly what was produced
    expected = in_process([*warmup, *burst, *flush], stream.partitions)
    assert scored_sessions(expected) > 1000
    assert_same(got, expected)
