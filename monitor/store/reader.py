"""The read model over the worker's Redis state: what the exporters, the HTTP server and the canary read.

The groups' totals (:mod:`monitor.store.keys`: each commit adds a partition's aggregates to its group's
keys in the same atomic call) summed or merged: the windows' aggregates (:meth:`Reader.snapshot`), the
epochs and ranker spans the canary compares (:meth:`Reader.history`), the recorded deploys
(:meth:`Reader.deploys`) and the join's health (:meth:`Reader.health`). Each pipelines its reads over the
groups (a round trip per dependent step), so what a rollup reads is bounded by the number of groups, not
of partitions, and several workers export one truth.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from redis.asyncio import RedisCluster

from monitor.core.canary import CanaryConfig, first_epoch
from monitor.core.events import Deploy
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.counters import Counter, decode_field
from monitor.core.stream.history import History, Seen, epoch_of, merge_seen
from monitor.core.stream.snapshot import Snapshot
from monitor.core.stream.stats import Stats
from monitor.core.stream.window_merge import rollup, wanted_slices
from monitor.store.client import RedisClient, used_memory
from monitor.store.keys import Keys, text


class Reader:
    """Reads of the state under ``keys`` (no writes)."""

    def __init__(self, redis: RedisClient, config: StreamConfig, keys: Keys) -> None:
        self.redis, self.config, self.keys = redis, config, keys

    async def partitions_held(self) -> list[int]:
        """The partitions that hold state, in order."""
        return sorted(int(p) for p in await self.redis.smembers(self.keys.partitions))

    async def watermarks(self, partitions: Sequence[int]) -> list[float | None]:
        """Each partition's watermark (``None``: none yet), one round trip."""
        if not partitions:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for partition in partitions:
            pipe.hget(self.keys.p(partition, "meta"), "wm")
        return [float(raw) if raw is not None else None for raw in await pipe.execute()]

    async def watermark(self) -> float:
        """The largest watermark of any partition (``-inf``: none yet): the groups' ``wm``, one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for group in range(self.keys.groups):
            pipe.hget(self.keys.g(group, "meta"), "wm")
        return max((float(raw) for raw in await pipe.execute() if raw is not None), default=-math.inf)

    async def health(self) -> tuple[int, int]:
        """(sessions waiting in the join over all partitions, Redis used_memory in bytes)."""
        pipe = self.redis.pipeline(transaction=False)
        for group in range(self.keys.groups):
            pipe.hget(self.keys.g(group, "meta"), "waiting")
        if isinstance(self.redis, RedisCluster):  # INFO goes to each primary, outside the pipeline
            counts = await pipe.execute()
            return sum(int(n or 0) for n in counts), await used_memory(self.redis)
        pipe.info("memory")
        *counts, info = await pipe.execute()
        return sum(int(n or 0) for n in counts), int(info.get("used_memory", 0))

    async def deploys(self) -> list[Deploy]:
        """Every deploy event the partitions recorded, oldest first (by event time)."""
        pipe = self.redis.pipeline(transaction=False)
        for group in range(self.keys.groups):
            pipe.lrange(self.keys.g(group, "deploys"), 0, -1)
        out = []
        for raw in (r for rows in await pipe.execute() for r in rows):
            obj = json.loads(raw)
            share = obj.get("share")  # absent in records of deploys without one (and older ones)
            out.append(Deploy(obj["kind"], obj["ranker"], float(obj["ts"]), obj.get("previous"),
                              None if share is None else float(share)))
        return sorted(out, key=lambda d: d.ts)

    async def history(self, deploys: Sequence[Deploy], canary: CanaryConfig) -> History:
        """The epochs the comparisons of ``deploys`` and of the canaries seen may read (from
        :func:`~monitor.core.canary.first_epoch` to the watermark's) and when each ranker was seen, summed
        over the groups; rankers not seen within ``history`` of the watermark are left out."""
        groups = range(self.keys.groups)
        pipe = self.redis.pipeline(transaction=False)
        for group in groups:
            pipe.hget(self.keys.g(group, "meta"), "wm")
            pipe.hgetall(self.keys.g(group, "seen"))
        results = await pipe.execute()
        marks = [float(raw) for raw in results[0::2] if raw is not None]
        watermark = max(marks) if marks else -math.inf
        parts: list[Seen] = []
        for raw in results[1::2]:
            spans: dict[tuple[str, str], list[float]] = {}
            for key, value in raw.items():
                end, arm, ranker = text(key).split("|", 2)
                span = spans.setdefault((arm, ranker), [math.inf, -math.inf])
                span[0 if end == "first" else 1] = float(value)
            parts.append({k: (v[0], v[1]) for k, v in spans.items() if math.isfinite(v[0])})
        width = self.config.epoch
        seen = {k: v for k, v in merge_seen(parts).items() if v[1] >= watermark - self.config.history}
        first = first_epoch(History(width, {}, seen), deploys, canary)
        if first is None or not math.isfinite(watermark):
            return History(width, {}, seen, watermark=watermark)
        indices = range(max(first, epoch_of(watermark - self.config.history, width)),
                        epoch_of(watermark, width) + 1)
        kinds = ("ep", "qep") if self.config.query_history and canary.adjust_queries else ("ep",)
        pipe = self.redis.pipeline(transaction=False)
        for group in groups:
            for kind in kinds:
                for index in indices:
                    pipe.hgetall(self.keys.g(group, kind, index))
        read: dict[str, dict[int, dict[str, Stats]]] = {kind: {} for kind in ("ep", "qep")}
        for position, raw in enumerate(await pipe.execute()):
            kind = kinds[position // len(indices) % len(kinds)]
            index = indices[position % len(indices)]
            for group_name, stats in grouped(raw).items():
                read[kind].setdefault(index, {}).setdefault(group_name, Stats()).add(stats)
        return History(width, read["ep"], seen, read["qep"], watermark=watermark)

    async def snapshot(self) -> Snapshot:
        """Every window's slices summed over the groups, with the counters and the running totals: two
        round trips (the groups' watermarks, then their totals), whatever the partitions."""
        watermark = await self.watermark()
        wanted = wanted_slices(watermark, self.config) if math.isfinite(watermark) else []
        pipe = self.redis.pipeline(transaction=False)
        for group in range(self.keys.groups):
            for window, index in wanted:
                pipe.hgetall(self.keys.g(group, "agg", window, index))
            pipe.hgetall(self.keys.g(group, "cnt"))
            pipe.hgetall(self.keys.g(group, "add"))
            pipe.hgetall(self.keys.g(group, "rem"))
        results = await pipe.execute()
        sliced = []
        counters: dict[Counter, float] = {}
        added: dict[str, Stats] = {}
        removed: dict[str, Stats] = {}
        per = len(wanted) + 3  # each group's replies, in the order asked
        for at in range(0, len(results), per):
            rows = results[at:at + per]
            sliced.append({key: grouped(raw) for key, raw in zip(wanted, rows, strict=False)})
            for field, value in rows[-3].items():
                counter = decode_field(text(field))
                counters[counter] = counters.get(counter, 0.0) + float(value)
            for target, raw in ((added, rows[-2]), (removed, rows[-1])):
                for name_of_group, stats in grouped(raw).items():
                    into = target.setdefault(name_of_group, Stats())
                    for name, value in stats.items():
                        into[name] = into.get(name, 0.0) + value
        windows = rollup(sliced, watermark, self.config)
        return Snapshot(self.config, watermark, windows, counters, added, removed)


def grouped(raw: Mapping[Any, Any]) -> dict[str, dict[str, float]]:
    """A hash of ``<group>|<stat>`` fields (sums of statistics, ``batch._fields``) as group → stat →
    value. (The counters' hash, ``cnt``, is read with :func:`~monitor.core.stream.counters.decode_field`.)"""
    out: dict[str, dict[str, float]] = {}
    for key, value in raw.items():
        group, _, name = text(key).rpartition("|")
        out.setdefault(group, {})[name] = float(value)
    return out
