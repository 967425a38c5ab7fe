"""The stream core with its state in Redis: what the Kafka worker runs, a batch of messages at a time.

Per batch of one partition's messages: read the applied offsets (redelivered messages change nothing),
decode and validate, read in one round trip everything the batch's steps need, run
:func:`~monitor.core.stream.join.step` for each message in order over that state in memory, and write
every change together with the new offsets and the outbox entries in one Lua script call (atomic). Keys carry
the partition as a Redis Cluster hash tag
(``srm:{p3}:…``), so one partition's session records, early labels, deadlines, aggregate slices, sketch,
budget counters and offsets live in one slot and one transaction. Query-level labels (with the ``ts`` of
each, merged by :data:`QUERY_MERGE`: the latest ``ts`` wins) and the index of a query's sessions in the
join are per query (``srm:{q:<hash>}:…``), written idempotently before the transaction. Everything has a TTL.

The applied offsets in ``meta`` (``off:<topic>``), not Kafka's committed offsets, say what the state
holds. Two guards keep them true (docs/worker.md, "Failure and recovery"): every commit is fenced by the
partition's commit counter (``seq``: compare, increment, or write nothing and raise :class:`Fenced`), so
a worker that lost the partition in a rebalance cannot write over its new owner's commits; and a caller
that passes ``previous`` gets :class:`StateBehind` instead of a hole when Redis is behind the messages it
is given (Redis lost acknowledged writes after Kafka's offsets were committed past them).

The exporter reads the same keys (:meth:`RedisState.snapshot`), so several workers export one truth.
"""

from __future__ import annotations

import heapq
import json
import math
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from monitor.core.canary import CanaryConfig, first_epoch
from monitor.core.events import (
    DEFAULT_LIMITS,
    Annotation,
    Deploy,
    Event,
    EventError,
    Impression,
    Limits,
    decode_event,
    expect_topic,
)
from monitor.core.grades import Scale
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.history import History, Seen, epoch_of, merge_seen, see
from monitor.core.stream.join import (
    SHARED_KEEP,
    Labels,
    Loaded,
    SharedGrades,
    Stamps,
    Transition,
    budget_period,
    close_step,
    fan_out_annotation,
    fan_outs,
    frequency_cells,
    frequency_slices,
    future_error,
    merge_grades,
    merge_shared,
    past_error,
    quiet_horizon,
    shared_grades,
    shared_refresh,
    step,
    undeclared_error,
)
from monitor.core.stream.rollup import rollup, slice_keys, wanted_slices
from monitor.core.stream.session import SessionRecord, query_key
from monitor.core.stream.sketch import cell_field
from monitor.core.stream.stats import Stats, add, is_removal
from monitor.export.snapshot import Snapshot
from monitor.pipeline.partition_state import PartitionState


@dataclass(frozen=True)
class Outcome:
    """What handling one message did: skipped (already applied), a dead letter, or a transition."""

    skipped: bool = False
    dead_letter: EventError | None = None
    transition: Transition | None = None
    fan_out: tuple[tuple[str, Annotation], ...] = ()  # (session id, annotation) to publish, keyed by session


FanOut = list[tuple[str, Annotation]]
Outbox = Callable[[Outcome], Sequence[bytes]]
"""What a message's outcome must publish (dead letter, annotation requests, fan-out annotations), as
opaque entries the adapter can send later: they are committed in the message's transaction."""


@dataclass(frozen=True)
class Message:
    """One consumed message: where it came from, its bytes, the topic's role and its outbox."""

    topic: str
    offset: int
    raw: bytes
    role: str | None = None
    outbox: Outbox | None = None


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
    deadline and watermark; sums of the aggregate, counter, sketch and budget increments."""

    partition: int
    watermark: float | None = None
    records: dict[str, SessionRecord] = field(default_factory=dict)
    early: dict[str, Labels | None] = field(default_factory=dict)
    early_stamps: dict[str, Stamps] = field(default_factory=dict)  # the ts of each early label set's grades
    deadlines: dict[str, float | None] = field(default_factory=dict)
    slices: dict[tuple[str, int], dict[str, float]] = field(default_factory=dict)
    added: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    removed: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    counters: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    epochs: dict[int, dict[str, float]] = field(default_factory=dict)
    query_epochs: dict[int, dict[str, float]] = field(default_factory=dict)
    seen: Seen = field(default_factory=dict)
    sketch: dict[int, dict[str, float]] = field(default_factory=dict)
    budget: dict[tuple[str, int], float] = field(default_factory=lambda: defaultdict(float))
    deploys: list[Deploy] = field(default_factory=list)
    entries: list[bytes] = field(default_factory=list)

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
        for ts, group, delta in t.deltas:
            for key in slice_keys(ts, config):
                fields = self.slices.setdefault(key, defaultdict(float))
                for name, value in delta.items():
                    fields[f"{group}|{name}"] += value
            removal = is_removal(delta)
            totals = self.removed if removal else self.added
            for name, value in delta.items():
                totals[f"{group}|{name}"] += -value if removal else value
            fields = self.epochs.setdefault(epoch_of(ts, config.epoch), defaultdict(float))
            for name, value in delta.items():
                fields[f"{group}|{name}"] += value
        if config.query_history:
            for ts, query_group, delta in t.query_deltas:
                fields = self.query_epochs.setdefault(epoch_of(ts, config.epoch), defaultdict(float))
                for name, value in delta.items():
                    fields[f"{query_group}|{name}"] += value
        if t.seen is not None:
            see(self.seen, *t.seen)
        for group, name, amount in t.counters:
            self.counters[(group, name)] += amount
        for index, cell in t.sketch:
            cells = self.sketch.setdefault(index, defaultdict(float))
            cells[cell] += 1.0
        if t.budget is not None:
            bucket, period, amount = t.budget
            self.budget[(bucket, period)] += amount
        self.deploys.extend(t.deploys)


SEQ = "seq"
"""The ``meta`` field counting a partition's fenced commits (compared and set by the commit script)."""

APPLY_OPS = """
local ops = cjson.decode(ARGV[1])
for _, op in ipairs(ops) do
  local name, key = op[1], KEYS[op[2]]
  if name == 'fence' then  -- always the first op: compare-and-increment the partition's commit counter
    local stored = redis.call('HGET', key, op[3]) or ''
    if stored ~= op[4] then
      return redis.error_reply('FENCED ' .. op[3] .. ' is ' .. stored .. ', expected ' .. op[4])
    end
    redis.call('HINCRBY', key, op[3], 1)
  elseif name == 'hincr' then
    for i = 3, #op, 2 do redis.call('HINCRBYFLOAT', key, op[i], op[i + 1]) end
  elseif name == 'hset' then
    for i = 3, #op, 2 do redis.call('HSET', key, op[i], op[i + 1]) end
  elseif name == 'set' then
    redis.call('SET', key, op[3], 'EX', op[4])
  elseif name == 'del' then
    redis.call('DEL', key)
  elseif name == 'zadd' then
    for i = 3, #op, 2 do redis.call('ZADD', key, op[i], op[i + 1]) end
  elseif name == 'zrem' then
    for i = 3, #op do redis.call('ZREM', key, op[i]) end
  elseif name == 'expire' then
    redis.call('EXPIRE', key, op[3])
  elseif name == 'hmin' or name == 'hmax' then
    for i = 3, #op, 2 do
      local old = redis.call('HGET', key, op[i])
      local new = tonumber(op[i + 1])
      if not old or (name == 'hmin' and new < tonumber(old)) or (name == 'hmax' and new > tonumber(old)) then
        redis.call('HSET', key, op[i], op[i + 1])
      end
    end
  elseif name == 'early' then
    -- sessions whose labels wait for their impression (KEYS: the partition's zset of them, by arrival):
    -- register the new ones, then evict the oldest beyond the cap, counting their sessions and grades
    local meta, prefix, counters, cap = op[3], op[4], op[5], tonumber(op[6])
    for i = 7, #op do
      if not redis.call('ZSCORE', key, op[i]) then
        redis.call('ZADD', key, redis.call('HINCRBY', meta, 'eseq', 1), op[i])
      end
    end
    local excess = redis.call('ZCARD', key) - cap
    if excess > 0 then
      local popped = redis.call('ZPOPMIN', key, excess)
      local sessions, grades = 0, 0
      for j = 1, #popped, 2 do
        local raw = redis.call('GET', prefix .. popped[j])
        if raw then
          sessions = sessions + 1
          local stored = cjson.decode(raw)
          if type(stored[1]) == 'table' then stored = stored[1] end  -- [grades, their ts] (early_json)
          for _ in pairs(stored) do grades = grades + 1 end
          redis.call('DEL', prefix .. popped[j])
        end
      end
      redis.call('HINCRBYFLOAT', counters, '|labels_dropped:evicted', grades)
      redis.call('HINCRBYFLOAT', counters, '|early_sessions_evicted', sessions)
    end
  elseif name == 'rpush' then
    for i = 3, #op do redis.call('RPUSH', key, op[i]) end
  else
    return redis.error_reply('unknown op ' .. tostring(name))
  end
end
return #ops
"""


class Ops:
    """The writes of one commit as a list for :data:`APPLY_OPS`: ``[name, key index, args...]``."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.ops: list[list[str | int]] = []
        self._index: dict[str, int] = {}

    def add(self, name: str, key: str, *args: str) -> None:
        index = self._index.get(key)
        if index is None:
            self.keys.append(key)
            index = self._index[key] = len(self.keys)
        self.ops.append([name, index, *args])


# One grading session's grades merged into a query's shared grades (KEYS[1], a hash: document → JSON list
# of [session, ts as text, level], the earliest first), keeping the SHARED_KEEP earliest sessions per
# document, as monitor.core.stream.join.merge_shared does; returns the documents whose earliest grading
# session is now this one (the query's other sessions must read them again). ARGV: session, its
# impression ts (Python's repr: compared as a double, kept as text so no digit is lost), the TTL, the
# number kept, then document and level pairs.
SHARED_MERGE = """
local origin, ts, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
local won = {}
for i = 5, #ARGV, 2 do
  local doc, level = ARGV[i], tonumber(ARGV[i + 1])
  local raw = redis.call('HGET', KEYS[1], doc)
  local entries = {}
  if raw then
    for _, e in ipairs(cjson.decode(raw)) do
      if e[1] ~= origin then table.insert(entries, e) end
    end
  end
  table.insert(entries, {origin, ARGV[2], level})
  table.sort(entries, function(a, b)
    local ta, tb = tonumber(a[2]), tonumber(b[2])
    if ta ~= tb then return ta < tb end
    return a[1] < b[1]
  end)
  while #entries > keep do table.remove(entries) end
  if entries[1][1] == origin then table.insert(won, doc) end
  redis.call('HSET', KEYS[1], doc, cjson.encode(entries))
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
return won
"""


# One query annotation's grades merged into the query's judgments (KEYS[1]: document → level) and their ts
# (KEYS[2]: document → ts, for grades that came with one), as monitor.core.stream.join.merge_grades does:
# a grade with ts replaces the held one unless the held ts is later (a tie: this one, delivered later);
# a grade without ts always replaces it and leaves the held ts. Returns the documents whose grade won (only
# those are fanned out). ARGV: the ts (Python's repr, or '' for none), the TTL, then document and level
# pairs. Idempotent under redelivery: the same grade again ties with itself.
QUERY_MERGE = """
local ts, ttl = ARGV[1], ARGV[2]
local won = {}
for i = 3, #ARGV, 2 do
  local doc = ARGV[i]
  local held = (ts ~= '') and redis.call('HGET', KEYS[2], doc) or false
  if not held or tonumber(held) <= tonumber(ts) then
    redis.call('HSET', KEYS[1], doc, ARGV[i + 1])
    if ts ~= '' then redis.call('HSET', KEYS[2], doc, ts) end
    table.insert(won, doc)
  end
end
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[2], ttl)
return won
"""


def early_json(labels: Labels, stamps: Stamps) -> str:
    """A session's early labels as stored: the grades, or ``[grades, their ts]`` when some had a ts."""
    return json.dumps([labels, stamps] if stamps else labels)


def parse_early(raw: str | bytes) -> tuple[Labels, Stamps]:
    """:func:`early_json` read back (a plain mapping: stored before the ts, or without any)."""
    value = json.loads(raw)
    if isinstance(value, list):
        return value[0], value[1]
    return value, {}


def parse_shared(stored: Mapping[bytes | str, bytes | str]) -> SharedGrades:
    """A query's ``shared`` hash (:data:`SHARED_MERGE`) as the core reads it."""
    return {_text(doc): {origin: (float(ts), int(level)) for origin, ts, level in json.loads(raw)}
            for doc, raw in stored.items()}


def merged_shared(entries: SharedGrades, write: tuple[str, str, float, Labels]) -> SharedGrades:
    """``entries`` with one session's grades merged (a new mapping; ``entries`` is left as it is)."""
    _, origin, ts, labels = write
    out = dict(entries)
    for doc, level in labels.items():
        out[doc] = merge_shared(out.get(doc, {}), origin, ts, level)[0]
    return out


class RedisState:
    def __init__(self, redis: Redis, config: StreamConfig, scale: Scale, partitions: int,
                 prefix: str = "srm", limits: Limits = DEFAULT_LIMITS,
                 clock: Callable[[], float | None] = time.time) -> None:
        self.redis, self.config, self.scale, self.partitions = redis, config, scale, partitions
        self.prefix, self.limits = prefix, limits
        self.clock = clock  # the wall clock of the max_future rule (join.future_error); None: no check
        self._registered: set[int] = set()  # partitions already in the global set (one SADD each)
        self._apply_ops = redis.register_script(APPLY_OPS)
        self._shared_merge = redis.register_script(SHARED_MERGE)
        self._query_merge = redis.register_script(QUERY_MERGE)

    # -- keys -----------------------------------------------------------------------------------------
    def _p(self, partition: int, *parts: object) -> str:
        return ":".join([f"{self.prefix}:{{p{partition}}}", *map(str, parts)])

    def _q(self, key: str, part: str) -> str:
        return f"{self.prefix}:{{q:{key}}}:{part}"

    # -- messages -------------------------------------------------------------------------------------
    async def handle(self, partition: int, topic: str, offset: int, raw: bytes,
                     outbox: Outbox | None = None, role: str | None = None) -> Outcome:
        """One message (a batch of one): see :meth:`handle_batch`."""
        return (await self.handle_batch(partition, [Message(topic, offset, raw, role, outbox)]))[0]

    async def handle_batch(self, partition: int, messages: Sequence[Message],
                           previous: Mapping[str, int] | None = None) -> list[Outcome]:
        """Apply ``messages`` of one partition, in order, skipping those whose offset is already applied.

        One read of everything the batch touches, the steps in memory over that state
        (:class:`~monitor.pipeline.partition_state.PartitionState`), the per-query writes (idempotent),
        then one atomic script call with every change, the outbox entries and the new offsets. A crash
        anywhere leaves either none or all of the batch applied, and a redelivery skips what was applied.

        A message's ``outbox`` turns its outcome into entries to publish (dead letter, annotation requests,
        fan-out annotations); they are committed in the same transaction (a transactional outbox, see
        :meth:`drain`). ``role`` (impressions, annotations, deploys) refuses events of another type.

        The commit is fenced: it applies only if no other commit reached the partition since the read
        (else :class:`Fenced`, nothing written). With ``previous`` (topic → offset of the message the
        caller saw just before this batch on that topic, if any), a batch that would leave a hole raises
        :class:`StateBehind` before anything is written: a topic's first new message must follow Redis's
        applied offset directly, or Redis must have applied ``previous`` (nothing lies in between)."""
        meta = {_text(k): _text(v) for k, v in (await self.redis.hgetall(self._p(partition, "meta"))).items()}
        applied = {k[4:]: int(v) for k, v in meta.items() if k.startswith("off:")}
        if previous is not None:
            self._check_behind(partition, messages, applied, previous)
        outcomes: list[Outcome | None] = [None] * len(messages)
        events: list[tuple[int, Event]] = []
        rejected: list[tuple[int, EventError]] = []
        for index, message in enumerate(messages):
            if applied.get(message.topic, -1) >= message.offset:
                outcomes[index] = Outcome(skipped=True)
                continue
            applied[message.topic] = message.offset
            try:
                event = decode_event(message.raw, self.scale, self.limits)
                if message.role is not None:
                    expect_topic(event, message.role)
                ahead = undeclared_error(event, self.config) or future_error(event, self.clock(), self.config)
                if ahead is not None:
                    raise ahead
            except EventError as invalid:
                rejected.append((index, invalid))
                continue
            events.append((index, event))
        watermark = float(meta["wm"]) if "wm" in meta else -math.inf
        batch = Batch(partition)
        for index, error in rejected:
            outcomes[index] = Outcome(dead_letter=error)
            batch.counters[("", f"dead_letter:{error.code}")] += 1.0
        state, query_labels, shared, query_stamps = await self._prefetch(partition, watermark,
                                                                         [e for _, e in events])
        steps: list[tuple[int, Transition, Loaded]] = []
        for index, event in events:
            stale = past_error(event, state.watermark, self.config)
            if stale is not None:
                outcomes[index] = Outcome(dead_letter=stale)
                batch.counters[("", f"dead_letter:{stale.code}")] += 1.0
                continue
            loaded = state.load(event, query_labels, self.config, shared, query_stamps)
            transition = step(event, loaded, self.config, self.scale, self.partitions)
            state.apply(transition)
            if transition.query_labels is not None:  # what the batch's later impressions read
                key, labels = transition.query_labels
                query_labels[key], query_stamps[key], _, _ = merge_grades(
                    query_labels.get(key, {}), query_stamps.get(key, {}), labels, transition.query_ts)
            if transition.shared is not None:  # a new mapping: what earlier steps loaded stays as it was
                key = transition.shared[0]
                shared[key] = merged_shared(shared.get(key, {}), transition.shared)
            batch.add(transition, self.config)
            steps.append((index, transition, loaded))
        spread, lost = await self._query_writes(partition, steps)
        if lost:
            batch.counters[("", "stale_labels")] += float(lost)
        for index, transition, _ in steps:
            outcomes[index] = Outcome(transition=transition, fan_out=tuple(spread.get(index, ())))
        for index, message in enumerate(messages):
            outcome = outcomes[index]
            if message.outbox is not None and outcome is not None and not outcome.skipped:
                batch.entries.extend(message.outbox(outcome))
        offsets = {m.topic: m.offset for m, o in zip(messages, outcomes, strict=True)
                   if o is not None and not o.skipped}
        await self._commit(partition, batch, offsets, fence=meta.get(SEQ, ""))
        return [o if o is not None else Outcome(skipped=True) for o in outcomes]

    def _check_behind(self, partition: int, messages: Sequence[Message], applied: Mapping[str, int],
                      previous: Mapping[str, int]) -> None:
        firsts: dict[str, int] = {}
        for message in messages:
            firsts.setdefault(message.topic, message.offset)
        for topic, offset in firsts.items():
            stored = applied.get(topic, -1)
            if stored < offset - 1 and (topic not in previous or stored < previous[topic]):
                self._registered.discard(partition)  # the SADD may be among the lost writes
                raise StateBehind(partition, topic, stored, offset)

    async def applied(self, partition: int) -> dict[str, int]:
        """Topic → the partition's last applied offset, as Redis has it now."""
        meta = await self.redis.hgetall(self._p(partition, "meta"))
        return {_text(k)[4:]: int(v) for k, v in meta.items() if _text(k).startswith("off:")}

    def forget(self, partition: int) -> None:
        """After Redis lost writes: register the partition again (in the set the exporters read)."""
        self._registered.discard(partition)

    async def reject(self, partition: int, topic: str, offset: int, error: EventError,
                     outbox: Outbox | None = None) -> Outcome:
        """Count a message as a dead letter (by reason code) and commit its offset (fenced; skipped if
        already applied)."""
        meta = {_text(k): _text(v) for k, v in (await self.redis.hgetall(self._p(partition, "meta"))).items()}
        if int(meta.get(f"off:{topic}", -1)) >= offset:
            return Outcome(skipped=True)
        outcome = Outcome(dead_letter=error)
        batch = Batch(partition)
        batch.counters[("", f"dead_letter:{error.code}")] += 1.0
        if outbox is not None:
            batch.entries.extend(outbox(outcome))
        await self._commit(partition, batch, {topic: offset}, fence=meta.get(SEQ, ""))
        return outcome

    async def apply_event(self, partition: int, event: Event) -> Outcome:
        """An event that did not come from a topic (tests apply fan-outs with it): no offset."""
        meta = await self.redis.hget(self._p(partition, "meta"), "wm")
        state, query_labels, shared, query_stamps = await self._prefetch(
            partition, float(meta) if meta else -math.inf, [event])
        loaded = state.load(event, query_labels, self.config, shared, query_stamps)
        transition = step(event, loaded, self.config, self.scale, self.partitions)
        batch = Batch(partition)
        batch.add(transition, self.config)
        spread, lost = await self._query_writes(partition, [(0, transition, loaded)])
        if lost:
            batch.counters[("", "stale_labels")] += float(lost)
        await self._commit(partition, batch, {})
        return Outcome(transition=transition, fan_out=tuple(spread.get(0, ())))

    async def _prefetch(self, partition: int, watermark: float, events: Sequence[Event]
                        ) -> tuple[PartitionState, dict[str, Labels], dict[str, SharedGrades],
                                   dict[str, Stamps]]:
        """A :class:`PartitionState` holding what ``events`` will read, from one pipelined round trip, and
        the queries' judgments, their ts and their shared grades."""
        config = self.config
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
        pipe = self.redis.pipeline(transaction=False)
        pipe.mget([self._p(partition, "s", s) for s in session_ids] or ["-"])
        pipe.mget([self._p(partition, "e", s) for s in session_ids] or ["-"])
        for qkey in query_keys:
            pipe.hgetall(self._q(qkey, "labels"))
            pipe.hgetall(self._q(qkey, "label_ts"))
        for qkey in shared_keys:
            pipe.hgetall(self._q(qkey, "shared"))
        sketch_order = sorted(cells)
        for index in sketch_order:
            pipe.hmget(self._p(partition, "cms", index), sorted(cells[index]))
        period_order = sorted(periods)
        for period in period_order:
            pipe.hgetall(self._p(partition, "bud", period))
        limit = config.max_closes_per_step * max(len(events), 1)
        if math.isfinite(final):
            pipe.zrangebyscore(self._p(partition, "dl"), "-inf", final, start=0, num=limit, withscores=True)
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
            query_labels[qkey] = {_text(k): int(v) for k, v in results[at].items()}
            query_stamps[qkey] = {_text(k): float(v) for k, v in results[at + 1].items()}
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
                state.budget[(_text(bucket), period)] = float(used)
            at += 1
        if math.isfinite(final):
            due = [(_text(member), float(score)) for member, score in results[at]]
            missing = [s for s, _ in due if s not in state.records]
            if missing:
                loaded = await self.redis.mget([self._p(partition, "s", s) for s in missing])
                for session_id, record in zip(missing, loaded, strict=True):
                    if record:
                        state.records[session_id] = SessionRecord.from_json(record)
            for session_id, deadline in due:
                if session_id in state.records:
                    state.deadlines[session_id] = deadline
                    heapq.heappush(state.heap, (deadline, session_id))
        return state, query_labels, shared, query_stamps

    async def _query_writes(self, partition: int, steps: Sequence[tuple[int, Transition, Loaded]]
                            ) -> tuple[dict[int, FanOut], int]:
        """Per-query keys live in other slots: idempotent writes before the transaction, then the
        query-level labels to fan out to sessions (published keyed by session), and the refreshes of the
        query's shared grades, per step index; and how many query grades lost to a later ts.

        A query annotation's grades are merged by :data:`QUERY_MERGE` (the latest ts wins); only the
        grades that won are fanned out, with their ts, so a session applies the same rule to them.

        A judgment for a query written on another partition after an impression of the query read the
        query's labels, and fanned out before that impression's session joined the query's pending set,
        would reach no one; so each such impression re-reads the labels after joining the set. (Either
        the judgment's fan-out saw the session or this read sees the judgment; both is harmless.) The same
        for the query's shared grades: a session whose re-read differs from what its impression read gets
        a refresh. A refresh carries no grade that counts: the session takes the query's shared grades
        from Redis when it processes it, so an old refresh overtaking a newer one changes nothing."""
        ttl = int(self.config.state_ttl)
        writes = self.redis.pipeline(transaction=False)
        checks: list[tuple[int, str, str, Labels]] = []   # (step, query key, session, labels it saw)
        shared_checks: list[tuple[int, str, str, SharedGrades]] = []  # (step, query key, session, it saw)
        # (step, query key, labels, their ts, the merge's place in the pipeline)
        spreads: list[tuple[int, str, Labels, float | None, int]] = []
        # (step, query key, grading session, its grades, the merge's place in the pipeline)
        shares: list[tuple[int, str, str, Labels, int]] = []
        for index, t, loaded in steps:
            for qkey, session_id in t.pending_queries:
                writes.sadd(self._q(qkey, "pending"), f"{partition}:{session_id}")
                writes.expire(self._q(qkey, "pending"), ttl)
                checks.append((index, qkey, session_id, loaded.query_labels))
                if self.config.share_session_grades:
                    shared_checks.append((index, qkey, session_id, loaded.shared))
            if t.query_labels is not None:
                qkey, labels = t.query_labels
                spreads.append((index, qkey, labels, t.query_ts, len(writes)))
                merge: list[str | int] = ["" if t.query_ts is None else repr(float(t.query_ts)), ttl]
                for doc, level in labels.items():
                    merge += [doc, level]
                await self._query_merge(keys=[self._q(qkey, "labels"), self._q(qkey, "label_ts")], args=merge,
                                        client=writes)
            if t.shared is not None:
                qkey, origin, ts, labels = t.shared
                shares.append((index, qkey, origin, labels, len(writes)))
                args: list[str | int] = [origin, repr(float(ts)), ttl, SHARED_KEEP]
                for doc, level in labels.items():
                    args += [doc, level]
                await self._shared_merge(keys=[self._q(qkey, "shared")], args=args, client=writes)
        if not checks and not spreads and not shares:
            return {}, 0
        written = await writes.execute()
        reads = self.redis.pipeline(transaction=False)
        for _, qkey, _, _ in checks:
            reads.hgetall(self._q(qkey, "labels"))
            reads.hgetall(self._q(qkey, "label_ts"))
        for _, qkey, _, _ in shared_checks:
            reads.hgetall(self._q(qkey, "shared"))
        for _, qkey, _, _, _ in spreads:
            reads.smembers(self._q(qkey, "pending"))
        for _, qkey, _, _, _ in shares:
            reads.smembers(self._q(qkey, "pending"))
        results = iter(await reads.execute())
        out: dict[int, FanOut] = {}
        stale = 0
        for index, _, session_id, seen in checks:
            stored, stamps = next(results), next(results)
            labels = {_text(k): int(v) for k, v in stored.items()}
            missed = {d: g for d, g in labels.items() if seen.get(d) != g}
            if missed:  # with their ts: one fan-out per ts
                dated = {_text(k): float(v) for k, v in stamps.items()}
                for annotation in fan_outs(session_id, missed, dated, self.scale):
                    out.setdefault(index, []).append((session_id, annotation))
        for (index, qkey, session_id, seen_shared), stored in zip(shared_checks, results, strict=False):
            view = shared_grades(parse_shared(stored), session_id)
            seen_view = shared_grades(seen_shared, session_id)
            changed = {doc: level for doc, level in view.items() if seen_view.get(doc) != level}
            if changed:  # (its own grades, written in this batch, are in the hash too: not a change)
                out.setdefault(index, []).append(
                    (session_id, shared_refresh(session_id, qkey, changed, self.scale)))
        for (index, _, labels, when, place), members in zip(spreads, results, strict=False):
            won = {_text(doc) for doc in written[place]}
            stale += len(labels) - len(won)
            grades = {doc: level for doc, level in labels.items() if doc in won}
            if not grades:  # every grade lost to a later one: nothing reaches the sessions
                continue
            for member in sorted(_text(m) for m in members):
                session_id = member.split(":", 1)[1]
                annotation = fan_out_annotation(session_id, grades, self.scale, when)
                out.setdefault(index, []).append((session_id, annotation))
        for (index, qkey, origin, labels, place), members in zip(shares, results, strict=False):
            won = {_text(doc) for doc in written[place]}
            if not won:  # not the earliest grader of any of them: nobody else's grades changed
                continue
            grades = {doc: level for doc, level in labels.items() if doc in won}
            for member in sorted(_text(m) for m in members):
                session_id = member.split(":", 1)[1]
                if session_id != origin:
                    out.setdefault(index, []).append(
                        (session_id, shared_refresh(session_id, qkey, grades, self.scale)))
        return out, stale

    async def _commit(self, partition: int, batch: Batch, offsets: Mapping[str, int],
                      fence: str | None = None) -> None:
        """Everything ``batch`` changed, its outbox entries and ``offsets``: one Lua script call, so one
        atomic step and one round trip (every key is in the partition's hash slot).

        ``fence``: the partition's commit counter (``meta`` field ``seq``) as read before the batch; the
        script first checks it is unchanged and increments it, or writes nothing (:class:`Fenced`)."""
        if partition not in self._registered:
            await self.redis.sadd(f"{self.prefix}:partitions", partition)
            self._registered.add(partition)
        config, ttl = self.config, str(int(self.config.state_ttl))
        ops = Ops()
        meta = self._p(partition, "meta")
        if fence is not None:
            ops.add("fence", meta, SEQ, fence)
        if batch.watermark is not None and math.isfinite(batch.watermark):
            ops.add("hset", meta, "wm", repr(batch.watermark))
        for session_id, record in batch.records.items():
            ops.add("set", self._p(partition, "s", session_id), record.to_json(), ttl)
        waiting = self._p(partition, "early")
        for session_id, labels in batch.early.items():
            if labels is None:
                ops.add("del", self._p(partition, "e", session_id))
                ops.add("zrem", waiting, session_id)
            else:
                ops.add("set", self._p(partition, "e", session_id),
                        early_json(labels, batch.early_stamps.get(session_id, {})), ttl)
        arrived = [s for s, labels in batch.early.items() if labels is not None]
        if arrived:  # registered in arrival order, the oldest evicted beyond max_early_sessions
            ops.add("early", waiting, meta, self._p(partition, "e", ""), self._p(partition, "cnt"),
                    str(config.max_early_sessions), *arrived)
        added = [a for s, d in batch.deadlines.items() if d is not None for a in (repr(d), s)]
        dropped = [s for s, d in batch.deadlines.items() if d is None]
        if added:
            ops.add("zadd", self._p(partition, "dl"), *added)
        if dropped:
            ops.add("zrem", self._p(partition, "dl"), *dropped)
        for (window, index), fields in batch.slices.items():
            key = self._p(partition, "agg", window, index)
            ops.add("hincr", key, *(a for name, value in fields.items() for a in (name, repr(value))))
            ops.add("expire", key, str(int(config.windows[window] + 2 * config.slice_width(window))))
        for direction, totals in (("add", batch.added), ("rem", batch.removed)):
            if totals:
                ops.add("hincr", self._p(partition, direction),
                        *(a for name, value in totals.items() for a in (name, repr(value))))
        for kind, epochs in (("ep", batch.epochs), ("qep", batch.query_epochs)):
            for index, fields in epochs.items():
                key = self._p(partition, kind, index)
                ops.add("hincr", key, *(a for name, value in fields.items() for a in (name, repr(value))))
                ops.add("expire", key, str(int(config.history + 2 * config.epoch)))
        if batch.seen:
            seen = self._p(partition, "seen")
            ops.add("hmin", seen, *(a for (arm, ranker), (first, _) in batch.seen.items()
                                    for a in (f"first|{arm}|{ranker}", repr(first))))
            ops.add("hmax", seen, *(a for (arm, ranker), (_, last) in batch.seen.items()
                                    for a in (f"last|{arm}|{ranker}", repr(last))))
        if batch.counters:
            ops.add("hincr", self._p(partition, "cnt"),
                    *(a for (group, name), n in batch.counters.items() for a in (f"{group}|{name}", repr(n))))
        for index, cells in batch.sketch.items():
            key = self._p(partition, "cms", index)
            ops.add("hincr", key, *(a for cell, count in cells.items() for a in (cell, repr(count))))
            ops.add("expire", key, str(int(config.frequency_window * 2)))
        for (bucket, period), used in batch.budget.items():
            key = self._p(partition, "bud", period)
            ops.add("hincr", key, bucket, repr(used))
            ops.add("expire", key, str(int(config.budget_period * 2)))
        if batch.deploys:
            ops.add("rpush", self._p(partition, "deploys"), *(json.dumps(
                {"kind": d.kind, "ranker": d.ranker, "previous": d.previous, "ts": d.ts})
                for d in batch.deploys))
        if batch.entries:
            ops.add("rpush", self._p(partition, "outbox"), *(e.decode() for e in batch.entries))
        if offsets:
            ops.add("hset", meta, *(a for topic, offset in offsets.items()
                                    for a in (f"off:{topic}", str(offset))))
        if ops.ops:
            try:
                await self._apply_ops(keys=ops.keys, args=[json.dumps(ops.ops, ensure_ascii=False)])
            except ResponseError as error:
                if str(error).startswith("FENCED"):
                    raise Fenced(f"partition {partition}: {error}") from None
                raise

    async def drain(self, partition: int, send: Callable[[Sequence[bytes]], Awaitable[None]],
                    limit: int = 1000) -> int:
        """Send the partition's committed outbox entries, then drop them (at least once: a crash between
        the two sends them again). Only the partition's owner drains, after its messages."""
        key = self._p(partition, "outbox")
        stored = await self.redis.lrange(key, 0, limit - 1)
        entries = [e if isinstance(e, bytes) else e.encode() for e in stored]
        if not entries:
            return 0
        await send(entries)
        await self.redis.ltrim(key, len(entries), -1)
        return len(entries)

    async def advance(self, watermark: float) -> None:
        """Close every partition's sessions due by ``watermark`` (``inf``: all; the end of a replay)."""
        for partition in sorted(int(p) for p in await self.redis.smembers(f"{self.prefix}:partitions")):
            while True:
                raw = await self.redis.hget(self._p(partition, "meta"), "wm")
                current = float(raw) if raw is not None else -math.inf
                ids = await self.redis.zrangebyscore(self._p(partition, "dl"), "-inf", watermark, start=0,
                                                     num=self.config.max_closes_per_step)
                keys = [self._p(partition, "s", _text(i)) for i in ids]
                records = await self.redis.mget(keys) if keys else []
                due = [SessionRecord.from_json(r) for r in records if r]
                closing = close_step(Loaded(watermark=current, due=due), watermark, self.config, self.scale)
                batch = Batch(partition)
                batch.add(closing, self.config)
                await self._commit(partition, batch, {})
                if not due:
                    break

    async def close_quiet(self, partition: int, wall_elapsed: float = 0.0) -> int:
        """Close the due sessions of a quiet partition (one without an impression for a while: the worker
        calls this once ``idle_timeout`` wall seconds passed, ``wall_elapsed`` since its last impression) by
        :func:`~monitor.core.stream.join.quiet_horizon`: the other partitions' event time minus
        ``idle_after``, or its own watermark plus ``wall_elapsed`` when the whole stream is quiet. Its
        watermark stays; every commit is fenced like a batch's (:class:`Fenced` if another worker
        committed the partition meanwhile). Returns the sessions closed."""
        partitions = sorted(int(p) for p in await self.redis.smembers(f"{self.prefix}:partitions"))
        if partition not in partitions:
            return 0
        closed = 0
        while True:
            pipe = self.redis.pipeline(transaction=False)
            for p in partitions:
                pipe.hmget(self._p(p, "meta"), "wm", SEQ)
            rows = await pipe.execute()
            marks = {p: float(row[0]) for p, row in zip(partitions, rows, strict=True) if row[0] is not None}
            own = marks.get(partition, -math.inf)
            horizon = quiet_horizon(own, max(marks.values(), default=-math.inf), self.config, wall_elapsed)
            if horizon is None:
                return closed
            ids = await self.redis.zrangebyscore(self._p(partition, "dl"), "-inf", horizon, start=0,
                                                 num=self.config.max_closes_per_step)
            if not ids:
                return closed
            records = await self.redis.mget([self._p(partition, "s", _text(i)) for i in ids])
            due = [SessionRecord.from_json(r) for r in records if r]
            closing = close_step(Loaded(watermark=own, due=due), horizon, self.config, self.scale, move=False)
            batch = Batch(partition)
            batch.add(closing, self.config)
            batch.watermark = None  # the partition's own watermark is not moved
            batch.deadlines.update({_text(i): None for i in ids})  # records gone by TTL leave the index too
            seq = rows[partitions.index(partition)][1]
            await self._commit(partition, batch, {}, fence=_text(seq) if seq is not None else "")
            closed += sum(1 for r in closing.records)

    # -- export ---------------------------------------------------------------------------------------
    async def health(self) -> tuple[int, int]:
        """(sessions waiting in the join over all partitions, Redis used_memory in bytes)."""
        partitions = sorted(int(p) for p in await self.redis.smembers(f"{self.prefix}:partitions"))
        pipe = self.redis.pipeline(transaction=False)
        for partition in partitions:
            pipe.zcard(self._p(partition, "dl"))
        waiting = sum(int(n) for n in await pipe.execute()) if partitions else 0
        info = await self.redis.info("memory")
        return waiting, int(info.get("used_memory", 0))

    async def deploys(self) -> list[Deploy]:
        """Every deploy event the partitions recorded, oldest first (by event time)."""
        partitions = sorted(int(p) for p in await self.redis.smembers(f"{self.prefix}:partitions"))
        pipe = self.redis.pipeline(transaction=False)
        for partition in partitions:
            pipe.lrange(self._p(partition, "deploys"), 0, -1)
        out = []
        for raw in (r for rows in (await pipe.execute() if partitions else []) for r in rows):
            obj = json.loads(raw)
            out.append(Deploy(obj["kind"], obj["ranker"], float(obj["ts"]), obj.get("previous")))
        return sorted(out, key=lambda d: d.ts)

    async def history(self, deploys: Sequence[Deploy], canary: CanaryConfig) -> History:
        """The epochs the comparisons of ``deploys`` and of the canaries seen may read (from
        :func:`~monitor.core.canary.first_epoch` to the watermark's) and when each ranker was seen, summed
        over partitions; rankers not seen within ``history`` of the watermark are left out."""
        partitions = sorted(int(p) for p in await self.redis.smembers(f"{self.prefix}:partitions"))
        pipe = self.redis.pipeline(transaction=False)
        for partition in partitions:
            pipe.hget(self._p(partition, "meta"), "wm")
            pipe.hgetall(self._p(partition, "seen"))
        results = await pipe.execute() if partitions else []
        marks = [float(raw) for raw in results[0::2] if raw is not None]
        watermark = max(marks) if marks else -math.inf
        parts: list[Seen] = []
        for raw in results[1::2]:
            spans: dict[tuple[str, str], list[float]] = {}
            for key, value in raw.items():
                end, arm, ranker = _text(key).split("|", 2)
                span = spans.setdefault((arm, ranker), [math.inf, -math.inf])
                span[0 if end == "first" else 1] = float(value)
            parts.append({k: (v[0], v[1]) for k, v in spans.items()
                          if math.isfinite(v[0]) and v[1] >= watermark - self.config.history})
        width = self.config.epoch
        seen = merge_seen(parts)
        first = first_epoch(History(width, {}, seen), deploys, canary)
        if first is None or not math.isfinite(watermark):
            return History(width, {}, seen)
        indices = range(max(first, epoch_of(watermark - self.config.history, width)),
                        epoch_of(watermark, width) + 1)
        kinds = ("ep", "qep") if self.config.query_history and canary.adjust_queries else ("ep",)
        pipe = self.redis.pipeline(transaction=False)
        for partition in partitions:
            for kind in kinds:
                for index in indices:
                    pipe.hgetall(self._p(partition, kind, index))
        read: dict[str, dict[int, dict[str, Stats]]] = {kind: {} for kind in ("ep", "qep")}
        for position, raw in enumerate(await pipe.execute()):
            kind = kinds[position // len(indices) % len(kinds)]
            index = indices[position % len(indices)]
            for group, stats in _grouped(raw).items():
                add(read[kind].setdefault(index, {}).setdefault(group, {}), stats)
        return History(width, read["ep"], seen, read["qep"])

    async def snapshot(self) -> Snapshot:
        partitions = sorted(int(p) for p in await self.redis.smembers(f"{self.prefix}:partitions"))
        watermark = -math.inf
        for partition in partitions:
            raw = await self.redis.hget(self._p(partition, "meta"), "wm")
            if raw is not None:
                watermark = max(watermark, float(raw))
        sliced = []
        counters: dict[tuple[str, str], float] = {}
        added: dict[str, Stats] = {}
        removed: dict[str, Stats] = {}
        for partition in partitions:
            wanted = wanted_slices(watermark, self.config) if math.isfinite(watermark) else []
            pipe = self.redis.pipeline(transaction=False)
            for window, index in wanted:
                pipe.hgetall(self._p(partition, "agg", window, index))
            pipe.hgetall(self._p(partition, "cnt"))
            pipe.hgetall(self._p(partition, "add"))
            pipe.hgetall(self._p(partition, "rem"))
            results = await pipe.execute()
            sliced.append({key: _grouped(raw) for key, raw in zip(wanted, results, strict=False)})
            for (group, name), value in _pairs(results[-3]).items():
                counters[(group, name)] = counters.get((group, name), 0.0) + value
            for target, raw in ((added, results[-2]), (removed, results[-1])):
                for group, stats in _grouped(raw).items():
                    into = target.setdefault(group, {})
                    for name, value in stats.items():
                        into[name] = into.get(name, 0.0) + value
        windows = rollup(sliced, watermark, self.config)
        return Snapshot(self.config, watermark, windows, counters, added, removed)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _pairs(raw: Mapping[Any, Any]) -> dict[tuple[str, str], float]:
    out = {}
    for key, value in raw.items():
        group, _, name = (key.decode() if isinstance(key, bytes) else key).rpartition("|")
        out[(group, name)] = float(value)
    return out


def _grouped(raw: Mapping[Any, Any]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for (group, name), value in _pairs(raw).items():
        out.setdefault(group, {})[name] = value
    return out
