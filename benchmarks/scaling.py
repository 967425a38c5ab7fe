"""Benchmark: what one message costs the worker's core and what it costs Redis, for docs/scaling.md.

The stream core with its state in a real Redis, without Kafka and Faust: a simulated stream (monitor.sim,
no invalid events, every session sampled: the heaviest path) is cut into batches of one partition's
messages (up to ``--batch``, as the worker takes them) and applied through ``RedisState.handle_batch``,
fan-outs republished as the worker does, over ``--partitions`` partitions. Measured per message, medians
of ``--repeats`` runs, each on a fresh Redis key prefix:

* the core's CPU time in this process (``time.process_time``): decoding, join steps, scoring, the
  commit's encoding; the part that more workers divide;
* redis-server's CPU time (``INFO cpu``, user + system) and the commands it ran (``INFO stats``
  ``total_commands_processed``; a Lua call counts its inner commands too): the part one Redis (or one
  Redis Cluster shard) must absorb for every worker;
* Redis memory per sampled session while the session is kept (``used_memory`` growth / sessions).

The peer, in the same run: the same messages only decoded (``decode_event``), the floor of any worker.

Redis must not be busy with anything else during a run (the CPU it reports is the whole server's).

    .venv/bin/python benchmarks/scaling.py                 # about a minute
    .venv/bin/python benchmarks/scaling.py --sessions 1000 # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
import time
import uuid
from dataclasses import dataclass

from redis.asyncio import Redis

from monitor.core.decoding import decode_event
from monitor.core.grades import SEED_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.pipeline.writer import RedisState
from monitor.sim import SimConfig, simulate

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from common import (  # benchmarks/common.py
    apply_round_robin,
    partition_queues,
    round_robin_arguments,
    services,
)

CONFIG = StreamConfig(budget={"head": 1e9, "torso": 1e9, "tail": 1e9})


@dataclass
class Run:
    messages: int
    sessions: int
    wall: float
    core_cpu: float
    redis_cpu: float
    commands: int
    memory: int

    def per_message(self, value: float) -> float:
        return value / self.messages


async def redis_counters(redis: Redis) -> tuple[float, int, int]:
    cpu, stats, memory = await redis.info("cpu"), await redis.info("stats"), await redis.info("memory")
    return (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), int(stats["total_commands_processed"]),
            int(memory["used_memory"]))


async def one_run(redis_url: str, events: list[tuple[str, bytes, bytes]], partitions: int, batch: int,
                  sessions: int) -> Run:
    redis = Redis.from_url(redis_url)
    prefix = f"bench-scaling-{uuid.uuid4().hex[:8]}"
    state = RedisState(redis, CONFIG, SEED_SCALE, partitions, prefix=prefix)
    queues = partition_queues(events, partitions)
    try:
        cpu0, commands0, memory0 = await redis_counters(redis)
        wall0, core0 = time.perf_counter(), time.process_time()
        await apply_round_robin(state, queues, batch)
        wall, core = time.perf_counter() - wall0, time.process_time() - core0
        cpu1, commands1, memory1 = await redis_counters(redis)
        return Run(len(events), sessions, wall, core, cpu1 - cpu0, commands1 - commands0, memory1 - memory0)
    finally:
        keys = [key async for key in redis.scan_iter(match=f"{prefix}*", count=1000)]
        keys += [key async for key in redis.scan_iter(match=f"*{prefix}*", count=1000)]
        for start in range(0, len(keys), 500):
            await redis.delete(*keys[start:start + 500])
        await redis.aclose()


def decode_only(events: list[tuple[str, bytes, bytes]]) -> float:
    start = time.process_time()
    for _, _, value in events:
        decode_event(value, SEED_SCALE)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    round_robin_arguments(parser, sessions=4000)
    parser.add_argument("--redis-url", help="Redis (default: MONITOR_REDIS_URL or monitor services)")
    args = parser.parse_args()
    _, redis_url = services("unused", args.redis_url) if args.redis_url else services(None, None)

    result = simulate(SimConfig(seed=7, n_sessions=args.sessions, duration_s=6 * 3600, invalid_rate=0.0))
    events = [(e.topic, e.key, e.value) for e in result.events]
    impressions = sum(1 for topic, _, _ in events if topic == "impressions")
    print(f"{len(events):,} messages ({impressions:,} impressions, {len(events) - impressions:,} labels and "
          f"deploys), {args.partitions} partitions, batches of ≤ {args.batch}", file=sys.stderr)
    runs, peers = [], []
    for repeat in range(args.repeats):
        peers.append(decode_only(events))
        runs.append(asyncio.run(one_run(redis_url, events, args.partitions, args.batch, impressions)))
        r = runs[-1]
        print(f"run {repeat + 1}: {r.messages / r.wall:,.0f} msg/s, "
              f"core {r.per_message(r.core_cpu) * 1e6:.0f} µs,"
              f" redis {r.per_message(r.redis_cpu) * 1e6:.1f} µs, {r.per_message(r.commands):.2f} commands"
              " per message", file=sys.stderr)

    def median(values: list[float]) -> float:
        return statistics.median(values)

    core = median([r.per_message(r.core_cpu) for r in runs])
    redis_cpu = median([r.per_message(r.redis_cpu) for r in runs])
    commands = median([r.per_message(r.commands) for r in runs])
    rate = median([r.messages / r.wall for r in runs])
    decode = median([p / len(events) for p in peers])
    memory = median([r.memory / r.sessions for r in runs])
    print(f"| per message (median of {len(runs)} runs) | value |")
    print("|---|---|")
    print(f"| core CPU in the worker process | {core * 1e6:.0f} µs |")
    print(f"| peer: decode only | {decode * 1e6:.1f} µs (core / peer = {core / decode:.1f}) |")
    print(f"| redis-server CPU | {redis_cpu * 1e6:.1f} µs |")
    print(f"| Redis commands (Lua inner commands included) | {commands:.2f} |")
    print(f"| core + Redis, no Kafka/Faust, one process | {rate:,.0f} msg/s |")
    print(f"| Redis memory per sampled session (kept for state_ttl) | {memory / 1024:.2f} KiB |")
    capacity = 1.0 / redis_cpu if redis_cpu > 0 else math.inf
    print(f"\nOne Redis core absorbs ≈ {capacity:,.0f} msg/s; one worker core's core-only ceiling "
          f"≈ {1 / core:,.0f} msg/s.")


if __name__ == "__main__":
    main()
