"""The stream core with in-process state in place of Kafka and Redis (the embedded default).

Events are submitted as raw bytes with their topic, validated exactly as the worker validates them
(invalid ones become dead letters with their reason), routed to a partition by key, and run through the
same :func:`monitor.core.stream.join.step`; what each step adds to the shared aggregates is folded by the
same :class:`~monitor.core.stream.effects.Aggregates` the Redis batch encodes. Query-level judgments fan
out to the query's sessions through the same path as session annotations, as the worker does through
Kafka, and so do the refreshes of a query's shared grades (a session's own grades reused by the query's
other sessions).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from monitor.core.events import (
    DEFAULT_LIMITS,
    Annotation,
    Event,
    EventError,
    Impression,
    Limits,
)
from monitor.core.grades import Scale
from monitor.core.stream.admission import admit, declared_shadow, past_error, undeclared_value
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.counters import (
    EARLY_SESSIONS_EVICTED,
    LABELS_EVICTED,
    SHADOW_RANKER,
    STALE_LABELS,
    Counter,
    dead_letter,
)
from monitor.core.stream.effects import Aggregates
from monitor.core.stream.held_grades import (
    Labels,
    SharedGrades,
    Stamps,
    fan_out_annotation,
    merge_grades,
    merge_shared,
    shared_refresh,
)
from monitor.core.stream.history import History, merge_seen
from monitor.core.stream.join import close_step, quiet_horizon, step
from monitor.core.stream.partition import partition_for
from monitor.core.stream.snapshot import Snapshot
from monitor.core.stream.stats import Stats
from monitor.core.stream.transition import AnnotationRequest, Loaded, Transition
from monitor.core.stream.window_merge import rollup
from monitor.store.partition_state import PartitionState

TOPICS = ("impressions", "annotations", "deploys")
MAX_UNDECLARED = 50  # undeclared variant or ranker values tallied by name (``undeclared_seen``)


@dataclass(frozen=True)
class DeadLetter:
    topic: str
    partition: int
    offset: int
    code: str
    field: str
    reason: str
    raw: bytes


def partition_of(key: bytes | None, partitions: int) -> int:
    """The partition Kafka's default partitioner gives ``key``, so in-process state matches the worker's."""
    return partition_for(key, partitions)


class MemoryPipeline:
    """The whole join-and-aggregate pipeline in one process."""

    def __init__(self, config: StreamConfig, scale: Scale, partitions: int = 1,
                 limits: Limits = DEFAULT_LIMITS, keep: int | None = None, prune_every: int = 1000,
                 clock: Callable[[], float | None] = time.time) -> None:
        """``keep``: how many dead letters, annotation requests and deploys to keep (None: all, for
        tests; a long-running demo keeps the latest). State older than ``state_ttl`` in event time is
        forgotten every ``prune_every`` events, as Redis expires it, so memory stays bounded. ``clock``:
        the wall clock an impression or deploy may not be ``max_future`` ahead of (None: no check)."""
        if partitions < 1:
            raise ValueError(f"partitions must be ≥ 1, got {partitions}")
        self.config, self.scale, self.limits, self.partitions = config, scale, limits, partitions
        self.clock = clock
        self.state = [PartitionState() for _ in range(partitions)]
        self.query_labels: dict[str, Labels] = {}
        self.query_stamps: dict[str, Stamps] = {}  # the ts of each query judgment that came with one
        self.shared: dict[str, SharedGrades] = {}  # query key → its shared grades
        self.pending_queries: dict[str, set[tuple[int, str]]] = {}
        # one per partition, summed when read, as the Redis reader sums the partitions' keys: the same
        # grouping of float sums, so both stores give the same numbers to the last bit
        self.aggregates = [Aggregates() for _ in range(partitions)]
        self.dead_letters: deque[DeadLetter] = deque(maxlen=keep)
        self.requests: deque[AnnotationRequest] = deque(maxlen=keep)
        self.deploys: deque[Event] = deque(maxlen=keep)
        self.query_seen: dict[str, float] = {}
        self.shared_seen: dict[str, float] = {}
        self.prune_every, self._submitted = prune_every, 0
        self.dead_lettered = 0  # every dead letter so far (``dead_letters`` keeps the latest ``keep``)
        self.earliest = math.inf  # the earliest time of an admitted impression
        # impressions of an undeclared variant or ranker, by (reason, value): the first MAX_UNDECLARED
        # values (the counter ``undeclared{reason}`` has them all), so a summary can name them
        self.undeclared_seen: dict[tuple[str, str], int] = {}
        self._queue: deque[tuple[int, Event]] = deque()
        self.ended = False  # advanced to the end (a replay's): every session closed, no event to come

    # -- input ----------------------------------------------------------------------------------------
    def submit(self, topic: str, key: bytes | None, value: bytes) -> None:
        """One raw event from ``topic``; invalid events become dead letters."""
        partition = self._next(key)
        state = self.state[partition]
        offset = state.offsets.get(topic, -1) + 1
        state.offsets[topic] = offset
        try:
            if topic not in TOPICS:
                raise EventError("topic", f"unknown topic {topic!r}", "invalid_value")
            event = admit(value, topic, self.scale, self.config, self.clock(), self.limits)
            target = self._target(event, partition)
        except EventError as error:
            self.dead_letters.append(DeadLetter(topic, partition, offset, error.code, error.field,
                                                error.reason, value))
            self.dead_lettered += 1
            self.aggregates[partition].count(dead_letter(error.code))
            return
        self._accept(event, target)

    def submit_event(self, topic: str, key: bytes | None, event: Event) -> None:
        """One event already decoded and valid (a simulator's, made as the schemas say): what
        :meth:`submit` does after admission, without the encoding and decoding. An event the stream's
        checks after admission refuse (dated before what the partition keeps) raises
        :class:`EventError`, since there are no bytes to dead-letter."""
        partition = self._next(key)
        state = self.state[partition]
        state.offsets[topic] = state.offsets.get(topic, -1) + 1
        self._accept(event, self._target(event, partition))

    def _next(self, key: bytes | None) -> int:
        self._submitted += 1
        if self._submitted % self.prune_every == 0:
            self.prune()
        return partition_of(key, self.partitions)

    def _target(self, event: Event, partition: int) -> int:
        """The partition an admitted event from ``partition`` is processed in (its session's); raises
        the :class:`EventError` of an event older than what that partition keeps."""
        target = partition
        if isinstance(event, Impression | Annotation) and event.session_id is not None:
            target = partition_of(event.session_id.encode(), self.partitions)
        error = past_error(event, self.state[target].watermark, self.config)
        if error is not None:
            raise error
        return target

    def _accept(self, event: Event, target: int) -> None:
        """An admitted event, processed in partition ``target`` with the fan-outs it causes."""
        if isinstance(event, Impression):
            self.earliest = min(self.earliest, event.ts)
            seen = undeclared_value(event, self.config)
            tally = self.undeclared_seen
            if seen is not None and (seen in tally or len(tally) < MAX_UNDECLARED):
                tally[seen] = tally.get(seen, 0) + 1
        event, dropped = declared_shadow(event, self.config)
        if dropped:
            self.aggregates[target].count(SHADOW_RANKER, float(dropped))
        self._queue.append((target, event))
        while self._queue:
            self._process(*self._queue.popleft())
        if isinstance(event, Impression) and self.partitions > 1:
            self._close_quiet()

    def _close_quiet(self) -> None:
        """Close the due sessions of partitions whose traffic stopped (``idle_after`` behind the others:
        :func:`~monitor.core.stream.join.quiet_horizon`), as the worker does; checked after each
        impression, so a replay does it at the same point of the stream every time."""
        stream = self.watermark
        for partition, state in enumerate(self.state):
            if not state.heap:
                continue
            horizon = quiet_horizon(state.watermark, stream, self.config)
            if horizon is None or state.heap[0][0] > horizon:
                continue
            while True:
                due = state.due(horizon, self.config.max_closes_per_step)
                t = close_step(Loaded(watermark=state.watermark, due=due), horizon, self.config, self.scale,
                               move=False)
                self._apply(partition, t)
                if not due:
                    break

    # -- one step -------------------------------------------------------------------------------------
    def _process(self, partition: int, event: Event) -> None:
        state = self.state[partition]
        if isinstance(event, Impression):  # most of real traffic is only counted: the writer's lean path
            counted = state.count_only(event, self.config, self.partitions)
            if counted is not None:
                self.aggregates[partition].add_counted(counted)
                return
        loaded = state.load(event, self.query_labels, self.config, self.shared,
                                            self.query_stamps)
        transition = step(event, loaded, self.config, self.scale, self.partitions)
        self._apply(partition, transition)

    def _apply(self, partition: int, t: Transition) -> None:
        state = self.state[partition]
        evicted = state.apply(t, self.config.max_early_sessions)
        shared = self.aggregates[partition]
        if evicted:  # a flood of labels for sessions never shown: the oldest waiting ones make room
            shared.count(LABELS_EVICTED, float(sum(len(labels) for _, labels in evicted)))
            shared.count(EARLY_SESSIONS_EVICTED, float(len(evicted)))
        shared.add(t, self.config)
        for query, session_id in t.pending_queries:
            self.pending_queries.setdefault(query, set()).add((partition, session_id))
        self.requests.extend(t.requests)
        self.deploys.extend(shared.deploys)  # kept here, the latest ``keep`` of them
        shared.deploys.clear()
        if t.query_labels is not None:
            key, labels = t.query_labels
            merged, stamps, winners, stale = merge_grades(self.query_labels.get(key, {}),
                                                          self.query_stamps.get(key, {}), labels, t.query_ts)
            self.query_labels[key] = merged
            if stamps:
                self.query_stamps[key] = stamps
            if stale:
                shared.count(STALE_LABELS, float(stale))
            self.query_seen[key] = self.watermark
            if winners:  # only the grades that won reach the sessions
                self._fan_out(key, winners, t.query_ts)
        if t.shared is not None:
            key, origin, ts, labels = t.shared
            entries = self.shared.setdefault(key, {})
            won: Labels = {}
            for doc, level in labels.items():
                entries[doc], first = merge_shared(entries.get(doc, {}), origin, ts, level)
                if first:
                    won[doc] = level
            self.shared_seen[key] = self.watermark
            if won:  # what the query's other sessions take changed: they read it again
                for member, session_id in sorted(self.pending_queries.get(key, set())):
                    if session_id != origin and session_id in self.state[member].records:
                        self._queue.append((member, shared_refresh(session_id, key, won, self.scale)))

    def _fan_out(self, key: str, labels: Labels, ts: float | None = None) -> None:
        """Query-level judgments become session annotations for the query's sessions in the join."""
        for partition, session_id in sorted(self.pending_queries.get(key, set())):
            record = self.state[partition].records.get(session_id)
            if record is not None:
                self._queue.append((partition, fan_out_annotation(session_id, labels, self.scale, ts)))

    @property
    def counters(self) -> dict[Counter, float]:
        """Each :class:`~monitor.core.stream.counters.Counter` → its count, over all partitions."""
        out: dict[Counter, float] = {}
        for part in self.aggregates:
            for key, value in part.counters.items():
                out[key] = out.get(key, 0.0) + value
        return out

    def prune(self) -> None:
        """Forget state older than ``state_ttl`` in event time (what Redis would have expired): sessions,
        early labels, query judgments and their session index, and the aggregates no reader needs
        (:meth:`~monitor.core.stream.effects.Aggregates.prune`)."""
        watermark = self.watermark
        if not math.isfinite(watermark):
            return
        gone: set[tuple[int, str]] = set()
        for partition, state in enumerate(self.state):
            gone.update((partition, sid) for sid in state.prune(self.config))
        for part in self.aggregates:
            part.prune(watermark, self.config)
        horizon = watermark - self.config.state_ttl
        for query in [q for q, seen in self.query_seen.items() if seen == -math.inf]:
            self.query_seen[query] = watermark  # judged before any impression: kept from the first prune on
        for query in [q for q, seen in self.query_seen.items() if seen < horizon]:
            del self.query_seen[query]
            self.query_labels.pop(query, None)
            self.query_stamps.pop(query, None)
        for query in [q for q, seen in self.shared_seen.items() if seen < horizon]:
            del self.shared_seen[query]  # like Redis's TTL of the query's shared grades, renewed by writes
            self.shared.pop(query, None)
        for query in list(self.pending_queries):
            members = {(p, sid) for p, sid in self.pending_queries[query] - gone
                       if sid in self.state[p].records}
            if members:
                self.pending_queries[query] = members
            else:
                del self.pending_queries[query]

    # -- output ---------------------------------------------------------------------------------------
    @property
    def watermark(self) -> float:
        return max(s.watermark for s in self.state)

    def advance(self, watermark: float) -> None:
        """Move every partition's watermark forward (end of a replay) and close what is due; ``inf``
        ends the stream (:attr:`ended`)."""
        self.ended = self.ended or watermark == math.inf
        for partition, state in enumerate(self.state):
            while True:
                due = state.due(watermark, self.config.max_closes_per_step)
                t = close_step(Loaded(watermark=state.watermark, due=due), watermark, self.config, self.scale)
                self._apply(partition, t)
                if not due:
                    break

    def windows(self, watermark: float | None = None) -> dict[tuple[str, str], Stats]:
        at = self.watermark if watermark is None else watermark
        return rollup([part.slices for part in self.aggregates], at, self.config)

    def snapshot(self) -> Snapshot:
        """The state an exporter reads (see :class:`monitor.core.stream.snapshot.Snapshot`)."""
        added: dict[str, Stats] = {}
        removed: dict[str, Stats] = {}
        for part in self.aggregates:
            for into, groups in ((added, part.added), (removed, part.removed)):
                for group, stats in groups.items():
                    into.setdefault(group, Stats()).add(stats)
        return Snapshot(self.config, self.watermark, self.windows(), self.counters, added, removed)

    def history(self) -> History:
        """The canary comparisons' input: every epoch kept and when each ranker was seen."""
        def summed(kind: str) -> dict[int, dict[str, Stats]]:
            out: dict[int, dict[str, Stats]] = {}
            for part in self.aggregates:
                for index, groups in getattr(part, kind).items():
                    into = out.setdefault(index, {})
                    for group, stats in groups.items():
                        into.setdefault(group, Stats()).add(stats)
            return out

        seen = merge_seen([part.seen for part in self.aggregates])
        return History(self.config.epoch, summed("epochs"), seen, summed("query_epochs"), self.ended,
                       self.watermark)

    def counter(self, name: str, group: str = "", label: str = "") -> float:
        """The count of ``Counter(name, group, label)`` over all partitions (0 when never counted)."""
        key = Counter(name, group, label)
        return sum(part.counters.get(key, 0.0) for part in self.aggregates)
