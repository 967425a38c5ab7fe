"""One partition's batch: the messages a batch is given, what handling each did, and what the batch's
transitions change, merged, then encoded as the writes of one atomic commit (:meth:`Batch.ops`).

Also the two reasons a batch is not committed: :class:`Fenced` (another commit reached the partition
first) and :class:`StateBehind` (Redis lost writes the batch would build on).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from monitor.core.events import Annotation, Deploy, EventError
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.counters import EARLY_SESSIONS_EVICTED, LABELS_EVICTED, Counter, encode_field
from monitor.core.stream.effects import Aggregates, Retention
from monitor.core.stream.held_grades import Labels, Stamps
from monitor.core.stream.lean import Counted
from monitor.core.stream.session import SessionRecord
from monitor.core.stream.transition import Transition
from monitor.store.keys import SEQ, Keys
from monitor.store.scripts import Ops, early_json
from monitor.store.session_index import SINCE
from monitor.store.sketch_cache import bitfield_offset


def deploy_record(deploy: Deploy) -> dict[str, object]:
    """A deploy as the partition's deploy list holds it (JSON; ``share`` only when declared, so records
    written before it existed and readers that predate it are unaffected): what
    :meth:`~monitor.store.reader.Reader.deploys` reads back."""
    record: dict[str, object] = {"kind": deploy.kind, "ranker": deploy.ranker, "previous": deploy.previous,
                                 "ts": deploy.ts}
    if deploy.share is not None:
        record["share"] = deploy.share
    return record


def _fields(groups: Mapping[str, Mapping[str, float]]) -> list[str]:
    """HINCRBYFLOAT's arguments for a hash of ``group|stat`` fields (the Redis encoding of grouped sums:
    ``reader.grouped`` splits them back at the last ``|``)."""
    return [a for group, stats in groups.items() for name, value in stats.items()
            for a in (f"{group}|{name}", repr(value))]


class Outcome(NamedTuple):
    """What handling one message did: skipped (already applied), a dead letter, or a transition. (Named
    tuples here and in :class:`Message`: one of each per message, built at a fraction of a frozen
    dataclass's cost.)"""

    skipped: bool = False
    dead_letter: EventError | None = None
    transition: Transition | None = None
    fan_out: tuple[tuple[str, Annotation], ...] = ()  # (session id, annotation) to publish, keyed by session

    def publishes(self) -> bool:
        """Whether it has anything to publish: a dead letter, annotation requests or fan-outs."""
        return self.dead_letter is not None or bool(self.fan_out) or (
            self.transition is not None and bool(self.transition.requests))


COUNTED = Outcome()
"""The outcome of an impression the step only counts (applied; nothing to publish, no transition kept)."""

FanOut = list[tuple[str, Annotation]]
Outbox = Callable[[int, "Message", Outcome], Sequence[bytes]]
"""What a message's outcome must publish (dead letter, annotation requests, fan-out annotations), as
opaque entries the adapter can send later: they are committed in the message's transaction. Called with
the partition, the message and its outcome, only when the outcome :meth:`~Outcome.publishes`."""


class Message(NamedTuple):
    """One consumed message: where it came from, its bytes, the topic's role, its outbox and its key."""

    topic: str
    offset: int
    raw: bytes
    role: str | None = None
    outbox: Outbox | None = None
    key: bytes | None = None


class LayoutError(Exception):
    """Redis holds state laid out in another number of groups than this worker's (or before groups)."""


class Fenced(Exception):
    """Another commit reached the partition between this batch's read and its commit (a worker that lost
    the partition in a rebalance and still writes, or any concurrent writer): nothing was written; read
    again and redo the batch (what the other commit applied is then skipped)."""


class StateBehind(Exception):
    """Redis has applied ``topic``'s messages of ``partition`` only up to ``stored``, but the batch starts
    at ``offset`` and nothing says there is no message in between: Redis lost acknowledged writes (a
    crash with ``appendfsync everysec``, an older backup) while Kafka's committed offsets moved on. The
    messages after ``stored`` must be applied first (the worker reads them from Kafka again)."""

    def __init__(self, partition: int, topic: str, stored: int, offset: int) -> None:
        super().__init__(f"{topic}[{partition}]: Redis has applied up to offset {stored}, "
                         f"the next message is {offset}")
        self.partition, self.topic, self.stored, self.offset = partition, topic, stored, offset


@dataclass
class Batch:
    """What a batch's transitions change, merged: the last value of each record, early-label set,
    deadline and watermark, the sketch and budget increments (the partition's own state), and the shared
    aggregates folded by :class:`~monitor.core.stream.effects.Aggregates` (``aggregates``)."""

    partition: int
    watermark: float | None = None
    records: dict[str, SessionRecord] = field(default_factory=dict)
    early: dict[str, Labels | None] = field(default_factory=dict)
    early_stamps: dict[str, Stamps] = field(default_factory=dict)  # the ts of each early label set's grades
    deadlines: dict[str, float | None] = field(default_factory=dict)
    aggregates: Aggregates = field(default_factory=Aggregates)
    sketch: dict[int, dict[str, float]] = field(default_factory=dict)
    budget: dict[tuple[str, int], float] = field(default_factory=lambda: defaultdict(float))
    entries: list[bytes] = field(default_factory=list)
    index_since: str | None = None  # the partition's first commit with the session index: meta sxs

    def add(self, t: Transition, config: StreamConfig) -> None:
        self.watermark = t.watermark
        for record in t.records:
            self.records[record.session_id] = record
        for session_id, labels in t.early_labels.items():
            self.early[session_id] = labels
            self.early_stamps[session_id] = t.early_stamps.get(session_id, {})
        for session_id in t.drop_early_labels:
            self.early[session_id] = None
            self.early_stamps.pop(session_id, None)
        for session_id, deadline in t.deadlines.items():
            self.deadlines[session_id] = deadline
        for session_id in t.drop_deadlines:
            self.deadlines[session_id] = None
        self.aggregates.add(t, config)
        for index, cell in t.sketch:
            cells = self.sketch.setdefault(index, defaultdict(float))
            cells[cell] += 1.0
        if t.budget is not None:
            bucket, period, amount = t.budget
            self.budget[(bucket, period)] += amount

    def add_counted(self, watermark: float, counted: Counted) -> None:
        """:meth:`add` of the transition of an impression the step only counts
        (:meth:`~monitor.store.partition_state.PartitionState.count_only`), without building it."""
        self.watermark = watermark
        self.aggregates.add_counted(counted)
        cells = self.sketch.get(counted.slice)
        if cells is None:
            cells = self.sketch[counted.slice] = defaultdict(float)
        for name in counted.fields:
            cells[name] += 1.0

    def count(self, counter: Counter, amount: float = 1.0) -> None:
        """A counter of the partition outside the steps (dead letters, stale labels)."""
        self.aggregates.count(counter, amount)

    def ops(self, keys: Keys, config: StreamConfig, offsets: Mapping[str, int],
            fence: str | None = None) -> Ops:
        """Everything the batch changed, its outbox entries and ``offsets`` as the writes of one
        :data:`~monitor.store.scripts.APPLY_OPS` call (every key is in the hash slot of the partition's group:
        its own keys, and the group's totals, which the same call adds the batch's aggregates to).
        ``fence``: the partition's commit counter as read before the batch (``None``: not fenced)."""
        retention = Retention(config)
        partition, ttl = self.partition, str(int(retention.session))
        ops = Ops()
        meta = keys.p(partition, "meta")
        if fence is not None:
            ops.add("fence", meta, SEQ, fence)
        group_meta = keys.t(partition, "meta")
        if self.watermark is not None and math.isfinite(self.watermark):
            ops.add("hset", meta, "wm", repr(self.watermark))
            ops.add("hmax", group_meta, "wm", repr(self.watermark))
        for session_id, record in self.records.items():
            ops.add("setv", keys.p(partition, "s", session_id), ops.value(record.to_json()), ttl)
        indexed = keys.p(partition, "sx")  # the sessions with a record, by its ts (session_index.py)
        if self.records:
            ops.add("zadd", indexed, *(a for s, r in self.records.items() for a in (repr(float(r.ts)), s)))
            ops.add("expire", indexed, ttl)
        if self.watermark is not None and math.isfinite(self.watermark):
            ops.add("zcut", indexed, repr(self.watermark - config.state_ttl))
        if self.index_since is not None:
            ops.add("hset", meta, SINCE, self.index_since)
        waiting = keys.p(partition, "early")
        for session_id, labels in self.early.items():
            if labels is None:
                ops.add("del", keys.p(partition, "e", session_id))
                ops.add("zrem", waiting, session_id)
            else:
                ops.add("setv", keys.p(partition, "e", session_id),
                        ops.value(early_json(labels, self.early_stamps.get(session_id, {}))), ttl)
        arrived = [s for s, labels in self.early.items() if labels is not None]
        if arrived:  # registered in arrival order, the oldest evicted beyond max_early_sessions
            ops.add("early", waiting, meta, keys.p(partition, "e", ""), keys.t(partition, "cnt"),
                    str(config.max_early_sessions), encode_field(LABELS_EVICTED),
                    encode_field(EARLY_SESSIONS_EVICTED), *arrived)
        added = [a for s, d in self.deadlines.items() if d is not None for a in (repr(d), s)]
        dropped = [s for s, d in self.deadlines.items() if d is None]
        if added:  # the group's count of waiting sessions follows what ZADD and ZREM did (reader.health)
            ops.add("zaddn", keys.p(partition, "dl"), group_meta, "waiting", *added)
        if dropped:
            ops.add("zremn", keys.p(partition, "dl"), group_meta, "waiting", *dropped)
        shared = self.aggregates
        for (window, index), groups in shared.slices.items():
            key = keys.t(partition, "agg", window, index)
            ops.add("hincr", key, *_fields(groups))
            ops.add("expire", key, str(int(retention.slice(window))))
        for direction, totals in (("add", shared.added), ("rem", shared.removed)):
            if totals:
                ops.add("hincr", keys.t(partition, direction), *_fields(totals))
        for kind, epochs in (("ep", shared.epochs), ("qep", shared.query_epochs)):
            for index, groups in epochs.items():
                key = keys.t(partition, kind, index)
                ops.add("hincr", key, *_fields(groups))
                ops.add("expire", key, str(int(retention.epoch)))
        if shared.seen:
            seen = keys.t(partition, "seen")
            ops.add("hmin", seen, *(a for (arm, ranker), (first, _) in shared.seen.items()
                                    for a in (f"first|{arm}|{ranker}", repr(first))))
            ops.add("hmax", seen, *(a for (arm, ranker), (_, last) in shared.seen.items()
                                    for a in (f"last|{arm}|{ranker}", repr(last))))
        if shared.counters:
            ops.add("hincr", keys.t(partition, "cnt"), *(a for counter, n in shared.counters.items()
                                                         for a in (encode_field(counter), repr(n))))
        width = config.sketch_width
        for index, cells in self.sketch.items():  # one BITFIELD of u32 counters per slice (sketch_cache.py)
            key = keys.p(partition, "cmsb", index)
            first, last = ops.span([a for cell, count in cells.items() for a in (
                "INCRBY", "u32", bitfield_offset(cell, width), "1" if count == 1.0 else str(int(count)))])
            ops.add("bitincr", key, first, last)
            ops.add("expire", key, str(int(retention.sketch)))
        for (bucket, period), used in self.budget.items():
            key = keys.p(partition, "bud", period)
            ops.add("hincr", key, bucket, repr(used))
            ops.add("expire", key, str(int(retention.budget)))
        if shared.deploys:
            ops.add("rpushv", keys.t(partition, "deploys"),
                    *(ops.value(json.dumps(deploy_record(d))) for d in shared.deploys))
        if self.entries:
            ops.add("rpushv", keys.p(partition, "outbox"), *(ops.value(e) for e in self.entries))
        if offsets:
            ops.add("hset", meta, *(a for topic, offset in offsets.items()
                                    for a in (f"off:{topic}", str(offset))))
        return ops
