"""Benchmark: what one message costs the worker's core and what it costs Redis, for docs/scaling.md.

The stream core with its state in a real Redis (one ``redis-server``, or a Redis Cluster given as a
``redis+cluster://`` URL), without Kafka and Faust: a simulated stream is cut into batches of one
partition's messages (up to ``--batch``, as the worker takes them) and applied through
``RedisState.handle_batch``, fan-outs applied as the worker would publish them, over ``--partitions``
partitions. Two worlds (``--world``):

* ``realistic`` (default): impressions dominate, only the sessions the budget samples get labels
  (``tests/support/realistic_mix.py``: ~2% sampled, ~72% of messages impressions, 20% without a bucket);
* ``annotation-heavy``: every session sampled and labelled (an unlimited budget): the heaviest path.

Measured per message of the stream (what the worker consumes besides is the fan-out annotations it
publishes to itself, counted apart: their cost is in the figures), medians of ``--repeats`` runs, each on
a fresh Redis key prefix:

* the core's CPU time in this process (``time.process_time``): decoding, join steps, scoring, the
  commit's encoding, the Redis client; the part that more workers divide;
* Redis's CPU time (``INFO cpu``, user + system, summed over a cluster's primaries, and the busiest
  primary's share) and the commands it ran (``total_commands_processed``; a Lua call counts its inner
  commands too): the part one Redis, or each shard of a cluster, must absorb for every worker;
* Redis memory per sampled session while the session is kept (``used_memory`` growth / sessions).

The peer, in the same run: the same messages only decoded (``decode_event``), the floor of any worker.
Redis must not be busy with anything else during a run (the CPU it reports is the whole server's).

    .venv/bin/python benchmarks/scaling.py                                   # about a minute
    .venv/bin/python benchmarks/scaling.py --redis-url redis+cluster://127.0.0.1:17000/0
    .venv/bin/python benchmarks/scaling.py --world annotation-heavy --sessions 4000
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import (  # benchmarks/common.py
    apply_round_robin,
    partition_queues,
    round_robin_arguments,
    services,
)
from redis.asyncio import RedisCluster

from monitor.core.decoding import decode_event
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.sim import SimConfig, simulate
from monitor.store.client import RedisClient, connect
from monitor.store.writer import RedisState
from tests.support.realistic_mix import RealisticMix

UNLIMITED = StreamConfig(budget={"head": 1e9, "torso": 1e9, "tail": 1e9})


@dataclass
class Run:
    messages: int
    sampled: int
    wall: float
    core_cpu: float
    redis_cpu: float
    busiest: float  # the busiest primary's share of redis_cpu (1.0 on one server)
    commands: int
    memory: int
    fan_outs: int = 0  # annotations the stream published back to itself (applied as the worker would)

    def per_message(self, value: float) -> float:
        return value / self.messages


async def redis_counters(redis: RedisClient) -> tuple[dict[str, float], int, int]:
    """CPU seconds per primary, commands and used_memory (summed over a cluster's primaries)."""
    if isinstance(redis, RedisCluster):
        nodes = RedisCluster.PRIMARIES
        cpu = await redis.info("cpu", target_nodes=nodes)
        stats = await redis.info("stats", target_nodes=nodes)
        memory = await redis.info("memory", target_nodes=nodes)
        return ({n: float(i["used_cpu_user"]) + float(i["used_cpu_sys"]) for n, i in cpu.items()},
                sum(int(i["total_commands_processed"]) for i in stats.values()),
                sum(int(i["used_memory"]) for i in memory.values()))
    cpu1, stats1, memory1 = await redis.info("cpu"), await redis.info("stats"), await redis.info("memory")
    return ({"redis": float(cpu1["used_cpu_user"]) + float(cpu1["used_cpu_sys"])},
            int(stats1["total_commands_processed"]), int(memory1["used_memory"]))


Events = list[tuple[str, bytes, bytes]]


async def one_run(redis_url: str, events: Events, config: StreamConfig, partitions: int, batch: int,
                  sampled: int) -> Run:
    redis = connect(redis_url, socket_timeout=30)
    prefix = f"bench-scaling-{uuid.uuid4().hex[:8]}"
    state = RedisState(redis, config, FOUR_LEVEL_SCALE, partitions, prefix=prefix, clock=lambda: None)
    queues = partition_queues(events, partitions)
    try:
        cpu0, commands0, memory0 = await redis_counters(redis)
        wall0, core0 = time.perf_counter(), time.process_time()
        fan_outs = await apply_round_robin(state, queues, batch)
        wall, core = time.perf_counter() - wall0, time.process_time() - core0
        cpu1, commands1, memory1 = await redis_counters(redis)
        used = {node: cpu1[node] - cpu0.get(node, 0.0) for node in cpu1}
        total = sum(used.values())
        return Run(len(events), sampled, wall, core, total, max(used.values()) / total if total else 1.0,
                   commands1 - commands0, memory1 - memory0, fan_outs)
    finally:
        await drop(redis, prefix)
        await redis.aclose()


async def drop(redis: RedisClient, prefix: str) -> None:
    keys = [key async for key in redis.scan_iter(match=f"*{prefix}*", count=1000)]
    for key in keys:  # one by one: a cluster's DEL takes keys of one slot
        await redis.unlink(key)


def decode_only(events: Events) -> float:
    start = time.process_time()
    for _, _, value in events:
        decode_event(value, FOUR_LEVEL_SCALE)
    return time.process_time() - start


def world(name: str, sessions: int, partitions: int) -> tuple[Events, StreamConfig, int, str]:
    """(messages, the stream settings, sessions sampled, a description) of a world."""
    if name == "realistic":
        mix = RealisticMix(sessions=sessions, partitions=partitions)
        backlog = mix.backlog()
        return ([(e.topic, e.key, e.value) for e in backlog.events], backlog.stream, backlog.sampled,
                "realistic: " + backlog.describe())
    result = simulate(SimConfig(seed=7, n_sessions=sessions, duration_s=6 * 3600, invalid_rate=0.0))
    events = [(e.topic, e.key, e.value) for e in result.events]
    impressions = sum(1 for topic, _, _ in events if topic == "impressions")
    return (events, UNLIMITED, impressions, f"annotation-heavy: {len(events):,} messages ({impressions:,} "
            "impressions, every session sampled and labelled)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    round_robin_arguments(parser, sessions=40000)
    parser.add_argument("--world", choices=("realistic", "annotation-heavy"), default="realistic")
    parser.add_argument("--redis-url",
                        help="Redis or redis+cluster:// (default: MONITOR_REDIS_URL or monitor services)")
    args = parser.parse_args()
    _, redis_url = services("unused", args.redis_url) if args.redis_url else services(None, None)
    events, config, sampled, described = world(args.world, args.sessions, args.partitions)
    print(f"{described}; {args.partitions} partitions, batches of ≤ {args.batch}; Redis {redis_url}",
          file=sys.stderr)
    runs, peers = [], []
    for repeat in range(args.repeats):
        peers.append(decode_only(events))
        runs.append(asyncio.run(one_run(redis_url, events, config, args.partitions, args.batch, sampled)))
        r = runs[-1]
        print(f"run {repeat + 1}: {r.messages / r.wall:,.0f} msg/s, "
              f"core {r.per_message(r.core_cpu) * 1e6:.0f} µs,"
              f" redis {r.per_message(r.redis_cpu) * 1e6:.1f} µs (busiest node {r.busiest:.0%}), "
              f"{r.per_message(r.commands):.2f} commands per message; {r.fan_outs:,} fan-outs",
              file=sys.stderr)

    def median(values: list[float]) -> float:
        return statistics.median(values)

    core = median([r.per_message(r.core_cpu) for r in runs])
    redis_cpu = median([r.per_message(r.redis_cpu) for r in runs])
    busiest = median([r.busiest for r in runs])
    commands = median([r.per_message(r.commands) for r in runs])
    rate = median([r.messages / r.wall for r in runs])
    decode = median([p / len(events) for p in peers])
    memory = median([r.memory / max(r.sampled, 1) for r in runs])
    print(f"World: {described}.")
    print(f"| per message (median of {len(runs)} runs) | value |")
    print("|---|---|")
    print(f"| core CPU in the worker process (decode, join, encode, Redis client) | {core * 1e6:.0f} µs |")
    print(f"| peer: decode only | {decode * 1e6:.1f} µs (core / peer = {core / decode:.1f}) |")
    print(f"| Redis CPU, all primaries | {redis_cpu * 1e6:.1f} µs (the busiest primary: {busiest:.0%}) |")
    print(f"| Redis commands (Lua inner commands included) | {commands:.2f} |")
    print(f"| core + Redis, no Kafka/Faust, one process | {rate:,.0f} msg/s |")
    print(f"| Redis memory per sampled session (kept for state_ttl) | {memory / 1024:.2f} KiB |")
    capacity = 1.0 / (redis_cpu * busiest) if redis_cpu > 0 else math.inf
    print(f"\nThe busiest Redis core absorbs ≈ {capacity:,.0f} msg/s; one worker core's core-only ceiling "
          f"≈ {1 / core:,.0f} msg/s.")


if __name__ == "__main__":
    main()
