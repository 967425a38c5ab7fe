"""The one read a partition's batch makes before its steps: everything the batch's events will read, in
one pipelined round trip (plus one for records due to close that the batch does not touch).

Session records, early labels, the sketch cells and budget periods the impressions count in, and the
deadlines due by the batch's last event time, as a :class:`~monitor.pipeline.partition_state.PartitionState`;
and, from the queries' own slots, their judgments, the judgments' ts and their shared grades.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from monitor.core.events import Annotation, Event, Impression
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.join import budget_period, frequency_cells, frequency_slices
from monitor.core.stream.labels import Labels, SharedGrades, Stamps
from monitor.core.stream.session import SessionRecord, query_key
from monitor.core.stream.sketch import cell_field
from monitor.pipeline.client import RedisClient, queue_mget
from monitor.pipeline.keys import Keys, text
from monitor.pipeline.partition_state import PartitionState
from monitor.pipeline.scripts import parse_early, parse_shared


async def prefetch(redis: RedisClient, keys: Keys, config: StreamConfig, partition: int, watermark: float,
                   events: Sequence[Event]
                   ) -> tuple[PartitionState, dict[str, Labels], dict[str, SharedGrades], dict[str, Stamps]]:
    """A :class:`PartitionState` holding what ``events`` will read, from one pipelined round trip, and
    the queries' judgments, their ts and their shared grades."""
    state = PartitionState(watermark=watermark)
    session_ids = sorted({e.session_id for e in events
                          if isinstance(e, Impression | Annotation) and e.session_id is not None})
    impressions = [e for e in events if isinstance(e, Impression)]
    query_keys = sorted({query_key(e.query) for e in impressions})
    shared_keys = sorted({*query_keys, *(e.query_key for e in events
                                         if isinstance(e, Annotation) and e.query_key is not None)})
    cells: dict[int, set[str]] = {}
    periods: set[int] = set()
    final = watermark
    for e in impressions:
        fields = [cell_field(c) for c in frequency_cells(e.query, config)]
        for index in frequency_slices(e.ts, config):
            cells.setdefault(index, set()).update(fields)
        periods.add(budget_period(e.ts, config))
        final = max(final, e.ts)
    pipe = redis.pipeline(transaction=False)
    queue_mget(pipe, [keys.p(partition, "s", s) for s in session_ids] or [keys.p(partition, "-")])
    queue_mget(pipe, [keys.p(partition, "e", s) for s in session_ids] or [keys.p(partition, "-")])
    for qkey in query_keys:
        pipe.hgetall(keys.q(qkey, "labels"))
        pipe.hgetall(keys.q(qkey, "label_ts"))
    for qkey in shared_keys:
        pipe.hgetall(keys.q(qkey, "shared"))
    sketch_order = sorted(cells)
    for index in sketch_order:
        pipe.hmget(keys.p(partition, "cms", index), sorted(cells[index]))
    period_order = sorted(periods)
    for period in period_order:
        pipe.hgetall(keys.p(partition, "bud", period))
    limit = config.max_closes_per_step * max(len(events), 1)
    if math.isfinite(final):
        pipe.zrangebyscore(keys.p(partition, "dl"), "-inf", final, start=0, num=limit, withscores=True)
    results = await pipe.execute()
    records, early = results[0], results[1]
    for session_id, record, labels in zip(session_ids, records, early, strict=False):
        if record:
            state.records[session_id] = SessionRecord.from_json(record)
        if labels:
            state.early[session_id], stamps = parse_early(labels)
            if stamps:
                state.early_stamps[session_id] = stamps
    at = 2
    query_labels: dict[str, Labels] = {}
    query_stamps: dict[str, Stamps] = {}
    for qkey in query_keys:
        query_labels[qkey] = {text(k): int(v) for k, v in results[at].items()}
        query_stamps[qkey] = {text(k): float(v) for k, v in results[at + 1].items()}
        at += 2
    shared: dict[str, SharedGrades] = {}
    for qkey in shared_keys:
        shared[qkey] = parse_shared(results[at])
        at += 1
    for index in sketch_order:
        state.sketch[index] = {f: float(v) for f, v in zip(sorted(cells[index]), results[at], strict=True)
                               if v is not None}
        at += 1
    for period in period_order:
        for bucket, used in results[at].items():
            state.budget[(text(bucket), period)] = float(used)
        at += 1
    if math.isfinite(final):
        due = [(text(member), float(score)) for member, score in results[at]]
        missing = [s for s, _ in due if s not in state.records]
        if missing:
            loaded = await redis.mget([keys.p(partition, "s", s) for s in missing])
            for session_id, record in zip(missing, loaded, strict=True):
                if record:
                    state.records[session_id] = SessionRecord.from_json(record)
        for session_id, deadline in due:
            if session_id in state.records:
                state.deadlines[session_id] = deadline
                heapq.heappush(state.heap, (deadline, session_id))
    return state, query_labels, shared, query_stamps
