"""The reads a partition's batch makes before its steps: what the batch's events will read, in one pipelined
round trip, plus one for records due to close that the batch does not touch.

Session records, early labels, the sketch cells of impressions without ``query_bucket`` (from the slices
held in memory, :class:`~monitor.store.sketch_cache.SketchCache`; a slice it lacks is read whole), the
deadlines due by the batch's last event time and the shared grades the batch's refreshes name, as a
:class:`~monitor.store.partition_state.PartitionState` (with the budget spent, read by the caller with
the partition's ``meta``); and, from the queries' own slots,
their judgments, the judgments' ts and their shared grades, **only for the impressions that may be
sampled** (:func:`~monitor.core.stream.sampling.may_sample`, given the budget at the batch's start). An
impression that cannot be sampled reads nothing of its query: the rule does not read the query's judgments.
Most traffic is impressions of sessions that are not sampled: they cost two keys of one ``MGET`` each, and
no read of their query.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.core.events import Annotation, Event, Impression
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.held_grades import Labels, Stamps
from monitor.core.stream.join import frequency_slices
from monitor.core.stream.lean import frequency_fields
from monitor.core.stream.sampling import budget_period, may_sample
from monitor.core.stream.session import SessionRecord, query_key
from monitor.store.client import RedisClient, queue_mget
from monitor.store.keys import Keys, text
from monitor.store.partition_state import PartitionState
from monitor.store.scripts import LazyShared, Scripts, parse_early
from monitor.store.sketch_cache import SketchCache


@dataclass
class Prefetched:
    """What a batch's steps read: the partition's state, and the queries' judgments, their ts and shared
    grades for the queries in :attr:`loaded` (none of the impressions of every other query of the batch can
    be sampled, and a step that does not sample reads nothing of its query: it must not read more of it)."""

    state: PartitionState
    query_labels: dict[str, Labels] = field(default_factory=dict)
    query_stamps: dict[str, Stamps] = field(default_factory=dict)
    shared: LazyShared = field(default_factory=LazyShared)  # each parsed when a step reads it
    loaded: set[str] = field(default_factory=set)


def _queue_query(pipe: Any, keys: Keys, qkey: str) -> None:
    pipe.hgetall(keys.q(qkey, "labels"))
    pipe.hgetall(keys.q(qkey, "label_ts"))
    pipe.hgetall(keys.q(qkey, "shared"))


def _take_query(out: Prefetched, qkey: str, results: Sequence[Any], at: int) -> int:
    out.query_labels[qkey] = {text(k): int(v) for k, v in results[at].items()}
    out.query_stamps[qkey] = {text(k): float(v) for k, v in results[at + 1].items()}
    out.shared.hold(qkey, results[at + 2])
    out.loaded.add(qkey)
    return at + 3


def candidates(events: Sequence[Event], spent: Mapping[tuple[str, int], float], config: StreamConfig,
               partitions: int) -> set[str]:
    """The queries of the batch's impressions that may be sampled (read in full), by
    :func:`~monitor.core.stream.sampling.may_sample` with each budget period's spend gathered once."""
    full: set[str] = set()
    budgets: dict[int, dict[str, float]] = {}
    for e in events:
        if not isinstance(e, Impression):
            continue
        period = budget_period(e.ts, config)
        budget = budgets.get(period)
        if budget is None:
            budget = budgets[period] = {b: spent.get((b, period), 0.0) for b in config.budget}
        if may_sample(e, budget, config, partitions):
            full.add(query_key(e.query))
    return full


async def prefetch(redis: RedisClient, keys: Keys, scripts: Scripts, config: StreamConfig, partition: int,
                   watermark: float, events: Sequence[Event], spent: Mapping[tuple[str, int], float],
                   partitions: int, sketches: SketchCache) -> Prefetched:
    """What ``events`` will read, from one pipelined round trip (two when records are due that no event
    touches); ``spent``: (bucket, period) → the budget spent, as read with ``meta``;
    ``sketches``: the partitions' sketch slices held in memory (the slices it lacks are read whole into
    it)."""
    state = PartitionState(watermark=watermark)
    state.budget.update(spent)
    out = Prefetched(state)
    session_ids = sorted({e.session_id for e in events
                          if isinstance(e, Impression | Annotation) and e.session_id is not None})
    impressions = [e for e in events if isinstance(e, Impression)]
    full = candidates(events, spent, config, partitions)
    refreshed = sorted({e.query_key for e in events if isinstance(e, Annotation) and e.query_key is not None}
                       - full)
    # every slice any impression without a bucket reads, each with the cells of all of them: a superset of
    # what each slice's impressions read (true counts too), found and looked up once per batch
    windows: set[range] = set()
    wanted: dict[str, None] = {}
    final = watermark
    for e in impressions:
        if e.query_bucket is None:  # only an impression without a bucket reads the sketch
            wanted.update(dict.fromkeys(frequency_fields(e.query, config)))
            windows.add(frequency_slices(e.ts, config))
        final = max(final, e.ts)
    pipe = redis.pipeline(transaction=False)
    records_at, early_at = keys.p(partition, "s", ""), keys.p(partition, "e", "")  # + the session id
    queue_mget(pipe, [records_at + s for s in session_ids] or [keys.p(partition, "-")])
    queue_mget(pipe, [early_at + s for s in session_ids] or [keys.p(partition, "-")])
    full_order = sorted(full)
    for qkey in full_order:
        _queue_query(pipe, keys, qkey)
    for qkey in refreshed:
        pipe.hgetall(keys.q(qkey, "shared"))
    sketch_order = sorted({index for window in windows for index in window})
    sketches.prune(partition, sketch_order)
    whole = sketches.missing(partition, sketch_order)
    for index in whole:  # the counters, and the hash of a slice written before them
        pipe.get(keys.p(partition, "cmsb", index))
        pipe.hgetall(keys.p(partition, "cms", index))
    limit = config.max_closes_per_step * max(len(events), 1)
    if math.isfinite(final):
        pipe.zrangebyscore(keys.p(partition, "dl"), "-inf", final, start=0, num=limit, withscores=True)
    results = await scripts.execute(redis, pipe, ())
    records, early = results[0], results[1]
    for session_id, record, labels in zip(session_ids, records, early, strict=False):
        if record:
            state.records[session_id] = SessionRecord.from_json(record)
        if labels:
            state.early[session_id], stamps = parse_early(labels)
            if stamps:
                state.early_stamps[session_id] = stamps
    at = 2
    for qkey in full_order:
        at = _take_query(out, qkey, results, at)
    for qkey in refreshed:
        out.shared.hold(qkey, results[at])
        at += 1
    for index in whole:
        sketches.load(partition, index, results[at], results[at + 1])
        at += 2
    state.sketch.update(sketches.counts_of(partition, sketch_order, list(wanted)))
    due: list[tuple[str, float]] = []
    if math.isfinite(final):
        due = [(text(member), float(score)) for member, score in results[at]]
    missing = [s for s, _ in due if s not in state.records]
    if missing:  # the second round trip: records due that no event touches
        again = redis.pipeline(transaction=False)
        queue_mget(again, [keys.p(partition, "s", s) for s in missing] or [keys.p(partition, "-")])
        more = await again.execute()
        for session_id, record in zip(missing, more[0], strict=False):
            if record:
                state.records[session_id] = SessionRecord.from_json(record)
    for session_id, deadline in due:
        if session_id in state.records:
            state.deadlines[session_id] = deadline
            heapq.heappush(state.heap, (deadline, session_id))
    return out
