"""Benchmark: what one ``/metrics`` scrape costs at 4, 64 and 512 partitions: the rollup computed on the
spot (``rollup.compute``: what the exporter runs once per ``rollup_interval``; before, also what each
scrape of each worker ran) and read (the worker's way: ``RollupLease.read``, one key), for
docs/scaling.md (issues 17 and 31).

The state, in a real redis-server: a simulated stream (monitor.sim, the demo simulator: head, torso and
tail queries, a canary with a tail regression, late, corrected and query-level labels, every session
sampled, each impression with its bucket) is applied through ``RedisState.handle_batch`` over P
partitions (in the default groups, ``MONITOR_REDIS_GROUPS``), batches of up to 500 of one partition's
messages, fan-outs republished as the worker does. Each commit adds its aggregates to its group's totals,
and the rollup reads those: their size is set by the groups, the rankers and the queries in the epochs,
not by the partitions or the traffic (P/4 times the traffic over P partitions, the issue's 100× at 512,
adds to the same fields).

A scrape is what ``GET /metrics`` runs, without aiohttp: ``HttpServer.refresh`` over a view whose rollup
is either read or computed on the spot, then ``generate_latest`` of the worker's registry. Per scrape:
round trips (what the client sends), commands Redis ran (``INFO commandstats``, the script's own calls
included), redis-server CPU (``INFO cpu``) and wall time; medians of ``--scrapes`` computed scrapes and
three times as many reads, interleaved, the garbage of the one before collected first. Redis must be
otherwise idle during a run.

    .venv/bin/python benchmarks/scrape.py                     # about two minutes
    .venv/bin/python benchmarks/scrape.py --sessions 600 --partitions 4,64 --scrapes 3   # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import os
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import services  # benchmarks/common.py: the services' addresses
from prometheus_client import generate_latest
from redis.asyncio import Redis

from monitor.core.canary import CanaryConfig
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.sim import SimConfig, simulate
from monitor.store.batch import Message
from monitor.store.keys import DEFAULT_GROUPS
from monitor.store.memory import partition_of
from monitor.store.writer import RedisState
from monitor.worker.http import HttpServer
from monitor.worker.metrics import PipelineView
from monitor.worker.rollup import Rollup, compute, encode
from monitor.worker.rollup_lease import RollupLease
from monitor.worker.settings import WorkerSettings
from tests.support.redis_counting import RoundTrips, commands_run

CONFIG = StreamConfig(budget={"head": 1e9, "torso": 1e9, "tail": 1e9})
CANARY = CanaryConfig()


class View:
    """The worker's HTTP view for the benchmark: the rollup read (``rollup``) or computed (``direct``)."""

    def __init__(self, state: RedisState, exporter: RollupLease) -> None:
        self.state, self.exporter, self.mode = state, exporter, "rollup"

    async def rollup(self) -> Rollup | None:
        if self.mode == "rollup":
            return await self.exporter.read()
        started = time.monotonic()
        shared = await compute(self.state, CANARY)
        return Rollup(shared, time.time(), time.monotonic() - started, math.inf, "direct")

    async def pipeline(self) -> PipelineView:
        return PipelineView(consumed={}, lag={}, waiting=None, redis_memory=None)

    async def problems(self) -> list[str]:
        return []

    async def send_deploy(self, key: bytes, value: bytes) -> tuple[int | None, int | None]:
        raise NotImplementedError


@dataclass(frozen=True)
class Scrape:
    round_trips: int
    commands: int
    redis_cpu: float
    wall: float
    body: bytes


def shared(one: Scrape) -> bytes:
    """The exposition's lines of the shared state (not the process's, the rollup's age, Redis's memory)."""
    return b"\n".join(line for line in one.body.splitlines() if line.startswith(b"search_relevance_")
                      and not line.startswith((b"search_relevance_rollup", b"search_relevance_redis_memory")))


async def redis_cpu(redis: Redis) -> float:
    cpu = await redis.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


async def scrape(server: HttpServer, redis: Redis, trips: RoundTrips) -> Scrape:
    """One ``GET /metrics`` without aiohttp, and what it cost (the counters' own reads left out). The
    garbage of the scrape before is collected first, so neither kind pays for the other's."""
    gc.collect()
    cpu0, commands0 = await redis_cpu(redis), await commands_run(redis)
    sent0 = trips.count
    started = time.perf_counter()
    await server.refresh()
    body = generate_latest(server.registry)
    wall = time.perf_counter() - started
    sent = trips.count - sent0
    commands = await commands_run(redis) - commands0 - 1  # the INFO commandstats above (counted after it ran)
    return Scrape(sent, commands, await redis_cpu(redis) - cpu0, wall, body)


async def feed(state: RedisState, events: list[tuple[str, bytes, bytes]], partitions: int) -> None:
    """Each partition's messages in order, batches of up to 500, partitions in turn (as a worker)."""
    queues: list[list[Message]] = [[] for _ in range(partitions)]
    offsets: dict[tuple[int, str], int] = {}
    for topic, key, value in events:
        partition = partition_of(key, partitions)
        offset = offsets.get((partition, topic), -1) + 1
        offsets[(partition, topic)] = offset
        queues[partition].append(Message(topic, offset, value, topic))
    positions = [0] * partitions
    while any(positions[p] < len(queues[p]) for p in range(partitions)):
        for p in range(partitions):
            chunk = queues[p][positions[p]:positions[p] + 500]
            positions[p] += len(chunk)
            if chunk:
                for outcome in await state.handle_batch(p, chunk):
                    for session_id, annotation in outcome.fan_out:
                        await state.apply_event(partition_of(session_id.encode(), partitions), annotation)


async def clean(redis: Redis, prefix: str) -> None:
    keys = [key async for key in redis.scan_iter(match=f"{prefix}:*", count=1000)]
    for start in range(0, len(keys), 1000):
        await redis.delete(*keys[start:start + 1000])


async def run(redis_url: str, sessions: int, counts: list[int], scrapes: int, groups: int) -> None:
    result = simulate(SimConfig(seed=7, n_sessions=sessions, duration_s=6 * 3600, invalid_rate=0.02,
                                bucket_hint_share=1.0))
    events = [(e.topic, e.key, e.value) for e in result.events]
    impressions = sum(1 for topic, _, _ in events if topic == "impressions")
    world = (f"world: monitor.sim (the demo simulator), seed 7: {sessions:,} sessions over 6 h of event "
             f"time, {len(events):,} messages ({impressions:,} on the impressions topic, 2% of all invalid), "
             f"every session sampled, a canary in every bucket; fed through RedisState over P partitions "
             f"in {groups} groups" + (" (the default)" if groups == DEFAULT_GROUPS else ""))
    print(world, file=sys.stderr, flush=True)
    trips = RoundTrips()
    redis = trips.client(redis_url)
    base = f"bench-scrape-{uuid.uuid4().hex[:8]}"
    prefixes = []
    rows = []
    try:
        for partitions in counts:
            prefixes.append(prefix := f"{base}-{partitions}")
            state = RedisState(redis, CONFIG, FOUR_LEVEL_SCALE, partitions, prefix=prefix, groups=groups)
            started = time.monotonic()
            await feed(state, events, partitions)
            held = len(await state.partitions_held())
            print(f"{partitions} partitions ({held} hold state) fed in {time.monotonic() - started:.0f} s; "
                  f"load average {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
            exporter = RollupLease(state, CANARY, 5.0, token="bench")
            assert await exporter.round(), "the exporter did not store a rollup"
            rollup = await exporter.read()
            assert rollup is not None
            view = View(state, exporter)
            server = HttpServer(view, WorkerSettings())
            measured: dict[str, list[Scrape]] = {"direct": [], "rollup": []}
            for _ in range(scrapes):  # one direct scrape, then three of the rollup (cheap: more samples)
                for mode in ("direct", "rollup", "rollup", "rollup"):
                    view.mode = mode
                    measured[mode].append(await scrape(server, redis, trips))
            direct, rolled = measured["direct"], measured["rollup"]
            assert {shared(d) for d in direct} == {shared(r) for r in rolled}  # the same numbers
            rows.append((partitions, held, direct, rolled, len(encode(rollup)), rollup.took))
            computed_ms = statistics.median(s.wall for s in direct) * 1e3
            print(f"{partitions} partitions: computed {computed_ms:.1f} ms, "
                  f"read {statistics.median(s.wall for s in rolled) * 1e3:.2f} ms", file=sys.stderr)
            await clean(redis, prefix)
    finally:
        for prefix in prefixes:
            await clean(redis, prefix)
        await redis.aclose()

    def med(values: list[float]) -> float:
        return statistics.median(values)

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(world)
    print(f"\nOne scrape (medians of {scrapes} with the rollup computed on the spot, what the exporter runs "
          f"once per rollup_interval, and {3 * scrapes} reading the stored rollup, interleaved); load "
          f"average {load}\n")
    print("| partitions | computed: round trips | commands | Redis CPU | time | read: round trips | commands "
          "| Redis CPU | time | rollup size |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for partitions, _, direct, rolled, size, _ in rows:
        cells = [str(partitions)]
        for runs, digits in ((direct, 1), (rolled, 2)):
            cells += [f"{med([s.round_trips for s in runs]):.0f}", f"{med([s.commands for s in runs]):,.0f}",
                      f"{med([s.redis_cpu for s in runs]) * 1e3:.{digits}f} ms",
                      f"{med([s.wall for s in runs]) * 1e3:.{digits}f} ms"]
        cells.append(f"{size / 1024:.0f} KiB")
        print("| " + " | ".join(cells) + " |")
    first, last = rows[0], rows[-1]
    ratio = med([s.wall for s in last[2]]) / med([s.wall for s in first[2]])
    commands = med([s.commands for s in last[2]]) / med([s.commands for s in first[2]])
    flat = med([s.wall for s in last[3]]) / med([s.wall for s in first[3]])
    print(f"\nFrom {first[0]} to {last[0]} partitions the rollup's computation takes {ratio:.2f}× as long "
          f"({commands:.2f}× the commands: it reads the {groups} groups' totals); a scrape of the "
          f"stored rollup {flat:.2f}×.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=3000,
                        help="simulated sessions (the 4-partition state)")
    parser.add_argument("--partitions", default="4,64,512", help="partition counts, comma-separated")
    parser.add_argument("--scrapes", type=int, default=7, help="scrapes of each kind per partition count")
    parser.add_argument("--groups", type=int, default=DEFAULT_GROUPS,
                        help=f"groups of partitions, MONITOR_REDIS_GROUPS (default {DEFAULT_GROUPS})")
    parser.add_argument("--redis-url", help="Redis (default: MONITOR_REDIS_URL or monitor services)")
    args = parser.parse_args()
    redis_url = args.redis_url or os.environ.get("MONITOR_REDIS_URL")
    if not redis_url:
        _, redis_url = services(None, None)
    counts = [int(p) for p in args.partitions.split(",")]
    asyncio.run(run(redis_url, args.sessions, counts, args.scrapes, args.groups))


if __name__ == "__main__":
    main()
