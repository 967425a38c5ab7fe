"""Benchmark: what a Redis Cluster, and waiting for its replicas (WAIT), cost the worker's writes.

The stream core with its state in real Redis, without Kafka and Faust (as ``benchmarks/scaling.py``): a
simulated stream cut into batches of one partition's messages (up to ``--batch``), applied through
``RedisState.handle_batch`` with fan-outs republished, over ``--partitions`` partitions. Four setups, each
on servers of its own started here (local processes, appendfsync always, as ``monitor services``):

* ``one``: one redis-server;
* ``cluster``: a Redis Cluster of three primaries with one replica each, the per-query writes not waiting
  for a replica (what the worker did before WAIT);
* ``cluster+wait``: the same, the per-query writes ending with ``WAIT 1`` on each node written (what the
  worker does: ``monitor.store.client.execute_replicated``);
* ``cluster+wait+commit``: also the commit followed by ``WAIT 1`` on its node, in one pipeline (not what
  the worker does: a failover that loses a commit is caught up from Kafka).

Reported per setup, medians of ``--repeats`` runs: messages per second, and the median wall time of one
commit (its script call, with the WAIT where there is one) and of one pipeline of per-query writes (those
that write something). The machine's load changes the figures; compare setups within
one run of this script.

    .venv/bin/python benchmarks/redis_wait.py                 # a few minutes
    .venv/bin/python benchmarks/redis_wait.py --sessions 500  # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from redis.asyncio import RedisCluster
from redis.asyncio.cluster import ClusterPipeline

import monitor.store.scripts as scripts_module
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.services.ports import free_port
from monitor.services.redis_cluster import RedisClusterServer
from monitor.services.redis_server import RedisServer
from monitor.sim import SimConfig, simulate
from monitor.store.client import RedisClient, RedisPipeline, connect, execute_replicated, queue_waits
from monitor.store.writer import RedisState

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import apply_round_robin, partition_queues, round_robin_arguments  # benchmarks/common.py

CONFIG = StreamConfig(budget={"head": 1e9, "torso": 1e9, "tail": 1e9})
SETUPS = ("one", "cluster", "cluster+wait", "cluster+wait+commit")


async def plain_execute(redis: RedisClient, pipe: RedisPipeline, keys: Any) -> list[Any]:
    return list(await pipe.execute())


@contextlib.contextmanager
def replication(setup: str, times: list[float]) -> Iterator[None]:
    """The per-query writes' pipeline with or without WAIT, for ``setup``, its wall times in ``times``."""
    chosen = execute_replicated if setup.startswith("cluster+wait") else plain_execute
    saved = scripts_module.execute_replicated
    scripts_module.execute_replicated = timed(times, chosen)  # type: ignore[assignment]
    try:
        yield
    finally:
        scripts_module.execute_replicated = saved


class WaitingCommit:
    """The commit script run in a cluster pipeline followed by WAIT 1 on the node of its keys."""

    def __init__(self, redis: RedisCluster, script: str) -> None:
        self.redis, self.script = redis, script

    async def __call__(self, keys: Sequence[str], args: Sequence[Any], client: Any = None) -> Any:
        pipe = self.redis.pipeline(transaction=False)
        assert isinstance(pipe, ClusterPipeline)
        pipe.execute_command("EVAL", self.script, len(keys), *keys, *args)
        waits = queue_waits(self.redis, pipe, keys[:1])
        replies = await pipe.execute(raise_on_error=False)
        if isinstance(replies[0], Exception):
            raise replies[0]
        assert all(replies[place] >= 1 for place in waits), replies
        return replies[0]


def timed(into: list[float], call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await call(*args, **kwargs)
        finally:
            into.append(time.perf_counter() - started)
    return wrapper


async def one_run(url: str, setup: str, events: list[tuple[str, bytes, bytes]], partitions: int,
                  batch: int) -> tuple[float, float, float]:
    """(messages per second, median commit seconds, median per-query writes seconds)."""
    redis = connect(url, socket_timeout=30)
    state = RedisState(redis, CONFIG, FOUR_LEVEL_SCALE, partitions,
                       prefix=f"bench-wait-{uuid.uuid4().hex[:8]}")
    if setup == "cluster+wait+commit":
        assert isinstance(redis, RedisCluster)
        state.scripts = dataclasses.replace(state.scripts, apply_ops=WaitingCommit(  # type: ignore[arg-type]
            redis, state.scripts.apply_ops.registered.script))
    commits: list[float] = []
    writes: list[float] = []
    state._commit = timed(commits, state._commit)  # type: ignore[method-assign]
    queues = partition_queues(events, partitions)
    try:
        with replication(setup, writes):
            started = time.perf_counter()
            await apply_round_robin(state, queues, batch)
            wall = time.perf_counter() - started
    finally:
        await redis.aclose()
    return len(events) / wall, statistics.median(commits), statistics.median(writes or [0.0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    round_robin_arguments(parser, sessions=2000)
    args = parser.parse_args()

    result = simulate(SimConfig(seed=7, n_sessions=args.sessions, duration_s=6 * 3600, invalid_rate=0.0))
    events = [(e.topic, e.key, e.value) for e in result.events]
    workdir = Path(tempfile.mkdtemp(prefix="bench-redis-wait-"))
    single = RedisServer(workdir, free_port())
    cluster = RedisClusterServer(workdir, [free_port() for _ in range(6)], [free_port() for _ in range(6)],
                                 replicas=1)
    for server in (single, cluster):
        server.start(die_with_parent=True)
    try:
        single.wait_ready()
        cluster.wait_ready()
        print(f"{len(events):,} messages, {args.partitions} partitions, batches of ≤ {args.batch}; "
              f"one redis-server, and a cluster of 3 primaries + 3 replicas", file=sys.stderr)
        rows: dict[str, list[tuple[float, float, float]]] = {setup: [] for setup in SETUPS}
        for repeat in range(args.repeats):
            for setup in SETUPS:  # interleaved, so a change of the machine's load hits every setup alike
                url = single.address if setup == "one" else cluster.address
                rows[setup].append(asyncio.run(one_run(url, setup, events, args.partitions, args.batch)))
                rate, commit, writes = rows[setup][-1]
                print(f"run {repeat + 1} {setup:<20} {rate:8,.0f} msg/s, commit {commit * 1e3:.2f} ms, "
                      f"per-query writes {writes * 1e3:.2f} ms", file=sys.stderr)
    finally:
        single.stop()
        cluster.stop()
    print(f"| setup (median of {args.repeats} runs) | msg/s | commit (median) | per-query writes (median) |")
    print("|---|---|---|---|")
    for setup, runs in rows.items():
        rate = statistics.median(r[0] for r in runs)
        commit = statistics.median(r[1] for r in runs)
        writes = statistics.median(r[2] for r in runs)
        print(f"| {setup} | {rate:,.0f} | {commit * 1e3:.2f} ms | {writes * 1e3:.2f} ms |")


if __name__ == "__main__":
    main()
