"""One partition's join state in memory, and how a step reads and updates it.

The in-process pipeline keeps one :class:`PartitionState` per partition for the whole stream; the Redis
adapter fills one from Redis for a batch of messages (only the keys the batch touches), runs the same
steps over it, and writes back what the transitions changed. Either way each step sees exactly the state
the previous steps left, so a batch gives what one message at a time would give.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from monitor.core.events import Annotation, Event, Impression
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.held_grades import Labels, SharedGrades, Stamps
from monitor.core.stream.join import frequency_slices, next_watermark
from monitor.core.stream.lean import Counted, only_counted
from monitor.core.stream.sampling import budget_period
from monitor.core.stream.session import SessionRecord, query_key
from monitor.core.stream.transition import Loaded, Transition

_EMPTY: Labels = {}  # what load gives for none: shared, never changed (nobody changes what load gives)
_EMPTY_STAMPS: Stamps = {}
_EMPTY_SLICE: dict[str, float] = {}


@dataclass
class PartitionState:
    watermark: float = -math.inf
    offsets: dict[str, int] = field(default_factory=dict)
    records: dict[str, SessionRecord] = field(default_factory=dict)
    early: dict[str, Labels] = field(default_factory=dict)
    early_stamps: dict[str, Stamps] = field(default_factory=dict)  # their ts, for those that had one
    deadlines: dict[str, float] = field(default_factory=dict)
    heap: list[tuple[float, str]] = field(default_factory=list)
    sketch: dict[int, dict[str, float]] = field(default_factory=dict)
    # counts summed over a window of slices that ``sketch`` does not hold (the Redis path reads them so: a
    # batch's ``sketch`` is then only its own increments); a window's estimate reads both
    windows: dict[range, dict[str, float]] = field(default_factory=dict)
    budget: dict[tuple[str, int], float] = field(default_factory=dict)  # (bucket, period) -> spent
    early_since: dict[str, float] = field(default_factory=dict)  # watermark when early labels came

    def prune(self, config: StreamConfig) -> set[str]:
        """Forget what the Redis state would have let expire, in event time: sessions and early labels
        older than ``state_ttl`` (a pending session waits for its close first), sketch slices past the
        frequency window, budget periods before the last. Returns the sessions forgotten."""
        if not math.isfinite(self.watermark):
            return set()
        horizon = self.watermark - config.state_ttl
        for sid in [s for s, since in self.early_since.items() if since == -math.inf]:
            self.early_since[sid] = self.watermark  # came before any impression: kept from the first prune on
        gone = {sid for sid, r in self.records.items() if r.ts < horizon and sid not in self.deadlines}
        for sid in gone:
            del self.records[sid]
        for sid in [s for s, since in self.early_since.items() if since < horizon]:
            self.early.pop(sid, None)
            self.early_stamps.pop(sid, None)
            del self.early_since[sid]
        first = min(frequency_slices(self.watermark, config))
        for index in [i for i in self.sketch if i < first]:
            del self.sketch[index]
        current = budget_period(self.watermark, config)
        for key in [k for k in self.budget if k[1] < current - 1]:
            del self.budget[key]
        return gone

    def due(self, watermark: float, limit: int) -> list[SessionRecord]:
        """Pending sessions with deadline at or before ``watermark``, earliest first, at most ``limit``."""
        out: list[SessionRecord] = []
        if not self.heap or self.heap[0][0] > watermark:
            return out
        for deadline, session_id in heapq.nsmallest(limit * 2, self.heap):
            if deadline > watermark or len(out) >= limit:
                break
            if self.deadlines.get(session_id) == deadline:
                out.append(self.records[session_id])
        return out

    def count_only(self, event: Impression, config: StreamConfig, partitions: int) -> Counted | None:
        """An impression the step would only count (:func:`~monitor.core.stream.lean.only_counted`),
        applied to this state as :meth:`apply` would apply its transition (the watermark and the sketch);
        None, and nothing changed, when the step must run: the session has a record (a duplicate) or early
        labels, a session may be due to close by the new watermark, or the impression may be sampled."""
        session_id = event.session_id
        if session_id in self.records or session_id in self.early:
            return None
        watermark = self.watermark if self.watermark >= event.ts else event.ts
        if self.heap and self.heap[0][0] <= watermark:
            return None
        sketch = self.window(frequency_slices(event.ts, config)) if event.query_bucket is None else []
        counted = only_counted(event, sketch, self.budget, config, partitions)
        if counted is None:
            return None
        self.watermark = watermark
        slot = self.sketch.setdefault(counted.slice, {})
        for name in counted.fields:
            slot[name] = slot.get(name, 0.0) + 1.0
        return counted

    def window(self, slices: range) -> list[dict[str, float]]:
        """The counts an estimate over ``slices`` sums: their sum as read (:attr:`windows`), if any, and
        the slices held (an estimate is a sum over them: which ones hold a cell's count changes nothing)."""
        held = self.sketch
        return [self.windows.get(slices, _EMPTY_SLICE), *(held[i] for i in slices if i in held)]

    def load(self, event: Event, query_labels: Mapping[str, Labels], config: StreamConfig,
             shared: Mapping[str, SharedGrades] | None = None,
             query_stamps: Mapping[str, Stamps] | None = None) -> Loaded:
        """What :func:`~monitor.core.stream.join.step` reads for ``event`` (``shared``: the queries' shared
        grades, read by impressions and shared-grade refreshes; ``query_stamps``: the ts of the queries'
        judgments). Nothing is copied: the step only reads what it loads, and every store replaces a
        mapping it changes (a session's early labels, a query's judgments or shared grades) with a new
        one rather than changing it in place."""
        loaded = Loaded(watermark=self.watermark)
        if isinstance(event, Impression | Annotation) and event.session_id is not None:
            loaded.record = self.records.get(event.session_id)
            loaded.early_labels = self.early.get(event.session_id, _EMPTY)
            loaded.early_stamps = self.early_stamps.get(event.session_id, _EMPTY_STAMPS)
        if isinstance(event, Annotation) and event.query_key is not None and shared is not None:
            loaded.shared = shared.get(event.query_key, {})
        if isinstance(event, Impression):
            key = query_key(event.query)
            loaded.query_labels = query_labels.get(key, _EMPTY)
            if query_stamps is not None:
                loaded.query_stamps = query_stamps.get(key, _EMPTY_STAMPS)
            if shared is not None:
                loaded.shared = shared.get(key, {})
            if event.query_bucket is None:  # only then is the bucket estimated from the sketch
                loaded.sketch = self.window(frequency_slices(event.ts, config))
            period = budget_period(event.ts, config)
            loaded.budget_used = {b: self.budget.get((b, period), 0.0) for b in config.k}
        loaded.due = self.due(next_watermark(self.watermark, event), config.max_closes_per_step)
        return loaded

    def apply(self, t: Transition, max_early: int | None = None) -> list[tuple[str, Labels]]:
        """The partition-local part of a transition (not the aggregates, counters or per-query state).
        Returns the early labels evicted because more than ``max_early`` sessions' labels were waiting for
        their impressions: the oldest first, in the order their first labels came (as Redis does)."""
        self.watermark = t.watermark
        for record in t.records:
            self.records[record.session_id] = record
        for session_id, labels in t.early_labels.items():
            self.early[session_id] = labels  # a dict keeps the first arrival's place: eviction order
            self.early_since[session_id] = t.watermark  # kept state_ttl from the last write, as in Redis
        for session_id, stamps in t.early_stamps.items():
            if stamps:
                self.early_stamps[session_id] = stamps
            else:
                self.early_stamps.pop(session_id, None)
        for session_id in t.drop_early_labels:
            self.early.pop(session_id, None)
            self.early_stamps.pop(session_id, None)
            self.early_since.pop(session_id, None)
        evicted: list[tuple[str, Labels]] = []
        while max_early is not None and len(self.early) > max_early:
            session_id = next(iter(self.early))
            evicted.append((session_id, self.early.pop(session_id)))
            self.early_since.pop(session_id, None)
            self.early_stamps.pop(session_id, None)
        for session_id, deadline in t.deadlines.items():
            self.deadlines[session_id] = deadline
            heapq.heappush(self.heap, (deadline, session_id))
        for session_id in t.drop_deadlines:
            self.deadlines.pop(session_id, None)
        while self.heap and self.heap[0][1] not in self.deadlines:
            heapq.heappop(self.heap)
        for index, cell in t.sketch:
            slot = self.sketch.setdefault(index, {})
            slot[cell] = slot.get(cell, 0.0) + 1.0
        if t.budget is not None:
            bucket, period, amount = t.budget
            self.budget[(bucket, period)] = self.budget.get((bucket, period), 0.0) + amount
        return evicted
