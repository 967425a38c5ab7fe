"""The reads a partition's batch makes before its steps: what the batch's events will read, in one pipelined
round trip, and a second when the batch samples a session or has records due to close that it does not
touch.

Session records, early labels, the sketch cells of impressions without ``query_bucket`` (from the slices
held in memory, :class:`~monitor.store.sketch_cache.SketchCache`; a slice it lacks is read whole), the
deadlines due by the batch's last event time and the shared grades the batch's refreshes name, as a
:class:`~monitor.store.partition_state.PartitionState` (with the budget spent, read by the caller with
the partition's ``meta``); then, from the queries' own slots, their judgments, the judgments' ts and their
shared grades **only for the impressions the batch samples** (:func:`sampled_queries`: exactly those in
``sessions`` mode, from what the first read gave; those that may be in ``judgments`` mode). A step that
does not sample reads nothing of its query: the rule does not read the query's judgments. Most traffic is
impressions of sessions that are not sampled: they cost two keys of one ``MGET`` each, and no read of
their query.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.core.events import Annotation, Event, Impression
from monitor.core.grades import Scale
from monitor.core.stream.admission import past_error, undeclared
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.held_grades import Labels, Stamps
from monitor.core.stream.join import frequency_slices, step
from monitor.core.stream.lean import frequency_fields
from monitor.core.stream.sampling import allowance, budget_period, may_sample
from monitor.core.stream.session import SessionRecord, query_key
from monitor.core.stream.windows import slice_index
from monitor.store.client import RedisClient, queue_mget
from monitor.store.keys import Keys, text
from monitor.store.partition_state import PartitionState
from monitor.store.scripts import LazyShared, Scripts, parse_early
from monitor.store.session_index import Held, has_state
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
    index: tuple[Any, Any] | None = None  # the session index as read (``load_index``): sx, early


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
    """The queries of the batch's impressions that may be sampled, by
    :func:`~monitor.core.stream.sampling.may_sample` from the spend at the batch's start alone (``spent``:
    (bucket, period) → spent): a superset (what :func:`sampled_queries` reads in judgments mode, where a
    session's cost depends on its query's judgments)."""
    return {query_key(e.query) for e in events
            if isinstance(e, Impression) and may_sample(e, spent, config, partitions)}


class _Slices(dict[int, dict[str, float]]):
    """Sketch slices that share the read ones until a step writes one (``setdefault``: then a copy)."""

    def __init__(self, read: Mapping[int, dict[str, float]]) -> None:
        super().__init__(read)
        self._own: set[int] = set()

    def setdefault(self, key: int, default: dict[str, float] | None = None) -> dict[str, float]:
        if key not in self._own:
            self._own.add(key)
            self[key] = dict(self.get(key, default or {}))
        return self[key]


def sampled_queries(events: Sequence[Event], state: PartitionState, config: StreamConfig, scale: Scale,
                    partitions: int) -> set[str]:
    """The queries of the impressions the batch's steps will sample, from the partition's state as read
    (``state``: its records, sketch slices, budget spent and watermark; not changed).

    In ``sessions`` mode that is exact: whether an impression is sampled depends only on the partition's
    own impressions before it (its bucket, carried or estimated from the sketch they count into; a
    duplicate's record; the spend their samples add; the watermark that makes an old one a dead letter),
    never on a query's judgments or on the batch's annotations. So the impressions run through the same
    steps on a scratch copy of that part of the state (``count_only``, else ``step`` with no judgments
    loaded), up to the last one that may still be sampled. An impression that cannot be
    (:func:`~monitor.core.stream.sampling.may_sample` false with the spend so far: the spend only grows, and
    the allowance is taken at the impression's own ``ts``) only counts: the sketch and the watermark, which
    later impressions read. A batch none of whose impressions may be sampled at the spend it starts from
    reads nothing, with no steps.
    When every bucket has room for all the batch's impressions at the earliest ``ts`` of each period they
    touch (an unlimited budget: the allowance only grows within a period), and in ``judgments`` mode (a
    session's cost depends on what its query has graded): the superset of :func:`candidates`, with no
    steps.

    The writer checks every sampled session's query was read (a step that samples one without raises)."""
    if config.budget_unit != "sessions":
        return candidates(events, state.budget, config, partitions)
    budget = state.budget
    end = _last_possible(events, len(events) - 1, -1, budget, config, partitions)
    if end < 0:  # no impression of the batch can be sampled
        return set()
    room = 0
    first: dict[int, float] = {}  # a period the batch's impressions touch → their earliest ts
    for e in events:
        if isinstance(e, Impression):
            room += 1
            period = budget_period(e.ts, config)
            if e.ts < first.get(period, math.inf):
                first[period] = e.ts
    if all(budget.get((b, period), 0.0) + room < allowance(b, ts, config, partitions)
           for period, ts in first.items() for b in config.budget):
        # every bucket of every period has room for all of them (an unlimited budget): each one not a
        # duplicate is sampled, whatever its bucket; the superset costs no steps
        return candidates(events, budget, config, partitions)
    scratch = PartitionState(watermark=state.watermark, records=dict(state.records),
                             sketch=_Slices(state.sketch), windows=state.windows, budget=dict(budget))
    length = config.frequency_window / config.frequency_slices
    out: set[str] = set()
    for index, e in enumerate(events):
        if index > end:  # no later impression can be sampled
            break
        if not isinstance(e, Impression) or past_error(e, scratch.watermark, config) is not None:
            continue
        if not may_sample(e, scratch.budget, config, partitions):  # only counted: what later ones read
            scratch.watermark = max(scratch.watermark, e.ts)
            if e.session_id not in scratch.records and undeclared(e, config) is None:
                slot = scratch.sketch.setdefault(slice_index(e.ts, length), {})
                for name in frequency_fields(e.query, config):
                    slot[name] = slot.get(name, 0.0) + 1.0
            continue
        if scratch.count_only(e, config, partitions) is not None:
            continue
        transition = step(e, scratch.load(e, {}, config, {}, {}), config, scale, partitions)
        transition.deadlines.clear()  # (no closes: they change no record's existence, spend or sketch)
        scratch.apply(transition)
        if transition.budget is not None:  # sampled: its query is read; the spend grew
            out.add(transition.pending_queries[0][0])
            end = _last_possible(events, end, index, scratch.budget, config, partitions)
    return out


def _last_possible(events: Sequence[Event], end: int, after: int, spent: Mapping[tuple[str, int], float],
                   config: StreamConfig, partitions: int) -> int:
    """The index of the last impression after ``after`` and at or before ``end`` that may be sampled with
    ``spent`` (:func:`~monitor.core.stream.sampling.may_sample`), or ``after`` if none: searched from
    ``end`` backwards (as the spend only grows, that index only moves back)."""
    for index in range(end, after, -1):
        e = events[index]
        if isinstance(e, Impression) and may_sample(e, spent, config, partitions):
            return index
    return after


async def prefetch(redis: RedisClient, keys: Keys, scripts: Scripts, config: StreamConfig, scale: Scale,
                   partition: int, watermark: float, events: Sequence[Event],
                   spent: Mapping[tuple[str, int], float], partitions: int, sketches: SketchCache,
                   held: Held | None = None, load_index: bool = False) -> Prefetched:
    """What ``events`` will read: one pipelined round trip, and a second for the judgments of the queries
    the batch samples (:func:`sampled_queries`) and the records due that no event touches, when there are
    any; ``spent``: (bucket, period) → the budget spent, as read with ``meta``; ``sketches``: the
    partitions' sketch slices held in memory (the slices it lacks are read whole into it); ``held``: the
    partition's sessions with state (:mod:`~monitor.store.session_index`): an impression of another
    session reads nothing of it (None: every session is read); ``load_index``: read the index too."""
    state = PartitionState(watermark=watermark)
    state.budget.update(spent)
    out = Prefetched(state)
    session_ids = sorted({e.session_id for e in events
                          if isinstance(e, Annotation) and e.session_id is not None}
                         | {e.session_id for e in events if isinstance(e, Impression)
                            and (held is None or has_state(held, e.session_id))})
    impressions = [e for e in events if isinstance(e, Impression)]
    refreshed = sorted({e.query_key for e in events if isinstance(e, Annotation) and e.query_key is not None})
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
    if load_index:
        pipe.zrange(keys.p(partition, "sx"), 0, -1, withscores=True)
        pipe.zrange(keys.p(partition, "early"), 0, -1)
    results = await scripts.execute(redis, pipe, ())
    if load_index:
        out.index = (results[-2], results[-1])
    records, early = results[0], results[1]
    for session_id, record, labels in zip(session_ids, records, early, strict=False):
        if record:
            state.records[session_id] = SessionRecord.from_json(record)
        if labels:
            state.early[session_id], stamps = parse_early(labels)
            if stamps:
                state.early_stamps[session_id] = stamps
    at = 2
    shared_at = dict(zip(refreshed, results[at:at + len(refreshed)], strict=True))
    at += len(refreshed)
    for index in whole:
        sketches.load(partition, index, results[at], results[at + 1])
        at += 2
    fields = list(wanted)
    state.windows.update((window, sketches.sums(partition, window, fields)) for window in windows)
    due: list[tuple[str, float]] = []
    if math.isfinite(final):
        due = [(text(member), float(score)) for member, score in results[at]]
    missing = [s for s, _ in due if s not in state.records]
    full = sorted(sampled_queries(events, state, config, scale, partitions))
    if missing or full:  # the second round trip: the sampled queries, records due that no event touches
        again = redis.pipeline(transaction=False)
        queue_mget(again, [keys.p(partition, "s", s) for s in missing] or [keys.p(partition, "-")])
        for qkey in full:
            _queue_query(again, keys, qkey)
        more = await scripts.execute(redis, again, ())
        for session_id, record in zip(missing, more[0], strict=False):
            if record:
                state.records[session_id] = SessionRecord.from_json(record)
        at = 1
        for qkey in full:
            at = _take_query(out, qkey, more, at)
    for qkey, stored in shared_at.items():
        if qkey not in out.loaded:  # (a sampled query's, read again with its judgments, is newer)
            out.shared.hold(qkey, stored)
    for session_id, deadline in due:
        if session_id in state.records:
            state.deadlines[session_id] = deadline
            heapq.heappush(state.heap, (deadline, session_id))
    return out
