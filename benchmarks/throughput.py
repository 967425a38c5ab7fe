"""Part 1 of ``benchmarks/stream.py``: draining a backlog, for two worlds of traffic, with the peers in the
same run, and where the CPU goes.

Worlds:

* ``realistic`` (the headline): every search is an impression (20–40 results), only the sessions the
  worker's budget samples get labels (``--sampled-share``, default 2%), 20% of impressions carry no bucket,
  the query mix follows the clock (:mod:`tests.support.realistic_mix`; about 72% of messages are
  impressions, 1.2 KB on average);
* ``annotation-heavy``: the simulator's defaults with an unlimited budget, every session sampled and
  labelled (about 6% impressions): the heaviest path per session, the old headline.

Per world, ``--repeats`` times, each on fresh topics holding the same backlog (a worker publishes fan-outs
into its annotations topic, which a later run must not read): the worker of this checkout, the baseline
worker (``--baseline REV``, a git revision run from a temporary worktree: what "before" means), and raw
aiokafka reading every partition to its end with ``json.loads`` of every value. Rates are medians; the
ratios are of medians. CPU per message over the drain: the worker process (from /proc), split by the
worker's own ``search_relevance_worker_cpu_seconds_total{stage}`` (decode, join, encode; the rest is
Kafka, the Redis client and the event loop), redis-server (``INFO cpu``) and the Kafka broker (/proc).

With a baseline, part 1 is also an A/B of the worker's CPU: one drain first that is not counted (a run's
first drain is its slowest), then per repeat the two workers in turn, the order alternating (now, base /
base, now), and a row with each pair's worker CPU per message, now / baseline, and their median. The
same code measures a few µs apart from run to run on this shared machine, as much as one change is
worth; a pair shares the machine's state of the moment. ``--baseline HEAD~1 --worlds realistic
--processes none --parts 1`` is the comparison of one change.

Processes: the realistic backlog drained by one worker process and by ``monitor worker --processes 2`` (on
this 2-core machine the broker and Redis share the cores with them), with the CPU of each part per
message, so that docs/scaling.md can say what one process per core gives where cores are to spare.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import statistics
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from common import (
    PARTITIONS,
    Cleanup,
    Drain,
    broker_pid,
    drop_prefix,
    end_offsets,
    raw_consume,
    say,
    worker_drain,
)

from monitor.sim import SimConfig, generate
from monitor.sim.records import SimEvent
from tests.support.realistic_mix import RealisticMix
from tests.support.worker_harness import Group, Stream

VARIANTS_TOML = 'variants = ["control", "canary", "probe"]\n'
UNLIMITED_TOML = "[stream]\nbudget = { head = 1e9, torso = 1e9, tail = 1e9 }\n" + VARIANTS_TOML


@dataclass
class World:
    name: str
    events: list[SimEvent]
    toml: str
    describe: str


def realistic_world(messages: int, sampled_share: float, seed: int = 11) -> World:
    mix = RealisticMix(sessions=max(int(messages * 0.72), 100), sampled_share=sampled_share, seed=seed)
    backlog = mix.backlog()
    return World("realistic", backlog.events, mix.stream_toml(), backlog.describe())


def heavy_world(messages: int, seed: int = 11) -> World:
    config = SimConfig(seed=seed, n_sessions=messages // 12 + 10, duration_s=6 * 3600, invalid_rate=0.0)
    events = list(itertools.islice(generate(config), messages))
    impressions = sum(1 for e in events if e.topic == "impressions")
    return World("annotation-heavy", events, UNLIMITED_TOML,
                 f"{len(events):,} messages: {impressions:,} impressions ({impressions / len(events):.0%}), "
                 "every session sampled and labelled (unlimited budget)")


@dataclass
class Options:
    messages: int
    repeats: int
    sampled_share: float
    baseline: Path | None  # a checkout of the baseline revision, or None
    baseline_name: str
    processes: tuple[int, ...]  # part 1b's process counts (none: skipped)
    uvloop: bool = False  # also the current worker with MONITOR_EVENT_LOOP=uvloop, each repeat


@dataclass
class Result:
    current: list[Drain] = field(default_factory=list)
    baseline: list[Drain] = field(default_factory=list)
    uvloop: list[Drain] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)


def fresh(world: World, bootstrap: str, cleanup: Cleanup, tag: str
          ) -> tuple[Stream, dict[tuple[str, int], int]]:
    stream = cleanup.stream(Stream(bootstrap, tag=tag, partitions=PARTITIONS))
    stream.send(world.events)
    ends = asyncio.run(end_offsets(stream))
    if sum(ends.values()) != len(world.events):
        raise SystemExit(f"the topics hold {sum(ends.values())} messages, not {len(world.events)}")
    return stream, ends


def drain(world: World, bootstrap: str, redis_url: str, scratch: Path, cleanup: Cleanup, tag: str,
          source: Path | None = None, args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> Drain:
    stream, ends = fresh(world, bootstrap, cleanup, tag)
    group = cleanup.group(Group(stream, redis_url, scratch, tag.rsplit("-", 1)[-1], world.toml, args=args,
                                source=source, extra_env=env or {}))
    result = worker_drain(group, redis_url, ends, timeout=max(300.0, len(world.events) / 100),
                          broker=broker_pid())
    asyncio.run(drop_prefix(redis_url, group.app_id))
    return result


def run_world(world: World, options: Options, bootstrap: str, redis_url: str, scratch: Path, cleanup: Cleanup,
              tag: str) -> Result:
    say(f"1. {world.name}: {world.describe}")
    out = Result()
    if options.baseline is not None:  # a first drain not counted: a run's first drain is its slowest (cold
        drain(world, bootstrap, redis_url, scratch, cleanup, f"{tag}-warm")  # caches), and would be "now"
    for repeat in range(options.repeats):
        # with a baseline, the order alternates (now, base / base, now): an A/B whose pairs share the
        # machine's drift, so that a change of a few µs per message shows against noise of about as much
        order = ("now", "base") if repeat % 2 == 0 else ("base", "now")
        for which in order:
            name = f"{tag}-{repeat}-{which}"
            if which == "now":
                out.current.append(drain(world, bootstrap, redis_url, scratch, cleanup, name))
            elif options.baseline is not None:
                out.baseline.append(drain(world, bootstrap, redis_url, scratch, cleanup, name,
                                          source=options.baseline))
        if options.uvloop:
            out.uvloop.append(drain(world, bootstrap, redis_url, scratch, cleanup, f"{tag}-{repeat}-uvl",
                                    env={"MONITOR_EVENT_LOOP": "uvloop"}))
        stream, ends = fresh(world, bootstrap, cleanup, f"{tag}-{repeat}-raw")
        n, seconds = asyncio.run(raw_consume(stream, ends))
        out.raw.append(n / seconds)
        base = f"; baseline {out.baseline[-1].applied_rate:,.0f}/s" if out.baseline else ""
        base += f"; uvloop {out.uvloop[-1].applied_rate:,.0f}/s" if out.uvloop else ""
        say(f"  repeat {repeat + 1}: worker {out.current[-1].applied_rate:,.0f}/s applied "
            f"({out.current[-1].rate:,.0f}/s committed){base}; raw {out.raw[-1]:,.0f}/s")
    return out


def _median(drains: list[Drain], value: Callable[[Drain], float]) -> float:
    values = [value(d) for d in drains if not math.isnan(value(d))]
    return statistics.median(values) if values else math.nan


def cpu_rows(part: str, label: str, drains: list[Drain], stages: bool = True
             ) -> list[tuple[str, str, str, str, str]]:
    """CPU µs per message of the worker (split by stage), Redis and the broker (medians)."""
    def us(value: Callable[[Drain], float]) -> float:
        return _median(drains, lambda d: d.per_message_us(value(d)))

    worker = us(lambda d: d.worker_cpu)
    split = {s: _median(drains, lambda d, s=s: 1e6 * d.stages.get(s, math.nan) / d.messages)
             for s in ("decode", "join", "encode")}
    known = [(s, v) for s, v in split.items() if not math.isnan(v)]
    what = "worker processes"
    if stages and known:
        rest = worker - sum(v for _, v in known)
        what = ("worker process (stages: " + ", ".join(f"{s} {v:.0f}" for s, v in known)
                + f"; Kafka, the Redis client, the event loop and the rest {rest:.0f})")
    rows = [(part, f"{label}: CPU per message, {what}", f"{worker:.0f} µs", "", "")]
    rows.append((part, f"{label}: CPU per message, redis-server", f"{us(lambda d: d.redis_cpu):.1f} µs",
                 "goal ≤ 10 µs (realistic)", ""))
    broker = us(lambda d: d.broker_cpu)
    if not math.isnan(broker):
        rows.append((part, f"{label}: CPU per message, Kafka broker", f"{broker:.0f} µs", "", ""))
    return rows


def report_world(world: World, result: Result, options: Options) -> list[tuple[str, str, str, str, str]]:
    n = options.repeats
    now = _median(result.current, lambda d: d.applied_rate)
    committed = _median(result.current, lambda d: d.rate)
    raw = statistics.median(result.raw)
    rows = [
        ("1", f"{world.name}: one worker draining the backlog, to the last offset applied in Redis "
              f"(median of {n})", f"{now:,.0f} msg/s", f"aiokafka + json.loads: {raw:,.0f} msg/s",
         f"**{now / raw:.3f}**"),
        ("1", f"{world.name}: the same, to the group's committed offsets", f"{committed:,.0f} msg/s",
         "same peer", f"{committed / raw:.3f}"),
    ]
    if result.baseline:
        before = _median(result.baseline, lambda d: d.applied_rate)
        rows.append(("1", f"{world.name}: the baseline worker ({options.baseline_name}), same backlog, "
                          "same run", f"{before:,.0f} msg/s",
                     f"now / baseline; its ratio to raw {before / raw:.3f}", f"**{now / before:.2f}×**"))
        rows += cpu_rows("1", f"{world.name}, baseline", result.baseline)
        paired = [c.per_message_us(c.worker_cpu) / b.per_message_us(b.worker_cpu)
                  for c, b in zip(result.current, result.baseline, strict=True)]
        rows.append(("1", f"{world.name}: worker CPU per message, now / baseline, per pair (order "
                          "alternating)", ", ".join(f"{r:.3f}" for r in paired),
                     f"median of {len(paired)} pairs", f"**{statistics.median(paired):.3f}**"))
    rows += cpu_rows("1", f"{world.name}, now", result.current)
    if result.uvloop:
        fast = _median(result.uvloop, lambda d: d.applied_rate)
        rows.append(("1", f"{world.name}: the same worker with MONITOR_EVENT_LOOP=uvloop, same backlog, same "
                          "run", f"{fast:,.0f} msg/s", f"uvloop / asyncio; its ratio to raw {fast / raw:.3f}",
                     f"**{fast / now:.2f}×**"))
        rows += cpu_rows("1", f"{world.name}, uvloop", result.uvloop)
    rows.append(("1", f"{world.name}: worker RSS at the end / start to /readyz (median)",
                 f"{_median(result.current, lambda d: d.rss_mib):.0f} MiB / "
                 f"{_median(result.current, lambda d: d.ready_s):.1f} s", "", ""))
    return rows


def part_processes(world: World, options: Options, bootstrap: str, redis_url: str, scratch: Path,
                   cleanup: Cleanup, tag: str) -> list[tuple[str, str, str, str, str]]:
    """The realistic backlog drained by ``monitor worker --processes N`` for each N of
    ``options.processes`` (1: one plain worker process)."""
    counts = options.processes
    say(f"1b. processes: --processes {', '.join(map(str, counts))} on the realistic backlog")
    drains: dict[int, list[Drain]] = {n: [] for n in counts}
    for repeat in range(options.repeats):
        for n in counts:
            args = ("--processes", str(n)) if n > 1 else ()
            drains[n].append(drain(world, bootstrap, redis_url, scratch, cleanup, f"{tag}-{repeat}-p{n}",
                                   args=args))
        say(f"  repeat {repeat + 1}: " + ", ".join(f"{n} processes {drains[n][-1].applied_rate:,.0f}/s"
                                                   for n in counts))
    rates = {n: _median(drains[n], lambda d: d.applied_rate) for n in counts}
    first = counts[0]
    rows = [("1b", f"realistic: {n} worker process{'es' if n > 1 else ''} draining the backlog, to the last "
                   f"offset applied (median of {options.repeats})", f"{rates[n]:,.0f} msg/s",
             f"{os.cpu_count()} cores shared with the broker and Redis", f"{rates[n] / rates[first]:.2f}×")
            for n in counts]
    for n in counts:
        rows += cpu_rows("1b", f"realistic, {n} process{'es' if n > 1 else ''}", drains[n], stages=n == 1)
    return rows


def checkout(revision: str, scratch: Path) -> Path:
    """A worktree of ``revision`` (its workers run from it: ``python -m monitor`` imports the folder's)."""
    target = scratch / f"baseline-{revision}"
    root = Path(__file__).resolve().parents[1]
    subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", "-f", str(target), revision],
                   check=True, capture_output=True)
    return target


def remove_checkout(path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(path)], capture_output=True)


def part_throughput(options: Options, worlds: list[World], bootstrap: str, redis_url: str, scratch: Path,
                    cleanup: Cleanup, tag: str) -> tuple[list[tuple[str, str, str, str, str]], float]:
    """Rows of part 1, and the realistic world's median drain rate (applied) of this checkout's worker."""
    rows: list[tuple[str, str, str, str, str]] = []
    sustained = math.nan
    for world in worlds:
        result = run_world(world, options, bootstrap, redis_url, scratch, cleanup, f"{tag}-{world.name[:4]}")
        rows += report_world(world, result, options)
        if world.name == "realistic":
            sustained = _median(result.current, lambda d: d.applied_rate)
            if options.processes:
                rows += part_processes(world, options, bootstrap, redis_url, scratch, cleanup,
                                       f"{tag}-proc")
    return rows, sustained
