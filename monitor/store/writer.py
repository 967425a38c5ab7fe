"""The Redis state's write path, and :class:`RedisState`: what the Kafka worker runs, a batch at a time.

Per batch of one partition's messages: read the applied offsets (redelivered messages change nothing),
decode and validate, read in one round trip everything the batch's steps need
(:func:`~monitor.store.prefetch.prefetch`), run :func:`~monitor.core.stream.join.step` for each message
in order over that state in memory, write the per-query keys idempotently
(:func:`~monitor.store.query_writes.query_writes`), and write every change together with the new
offsets and the outbox entries in one Lua script call (atomic; :meth:`~monitor.store.batch.Batch.ops`).
The keys are those of :mod:`monitor.store.keys`; everything has a TTL.

The applied offsets in ``meta`` (``off:<topic>``), not Kafka's committed offsets, say what the state
holds. Two guards keep them true (docs/worker.md, "Failure and recovery"): every commit is fenced by the
partition's commit counter (``seq``: compare, increment, or write nothing and raise
:class:`~monitor.store.batch.Fenced`), so a worker that lost the partition in a rebalance cannot write
over its new owner's commits; and a caller that passes ``previous`` gets
:class:`~monitor.store.batch.StateBehind` instead of a hole when Redis is behind the messages it is
given (Redis lost acknowledged writes after Kafka's offsets were committed past them).

Also the outbox (:meth:`RedisState.drain`) and the closing of due sessions without new messages
(:meth:`RedisState.advance`, :meth:`RedisState.close_quiet`). The exporters' reads of the same keys are
:class:`~monitor.store.reader.Reader`'s, which :class:`RedisState` extends, so several workers export
one truth.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

import msgspec
from redis.exceptions import ResponseError

from monitor.core.events import (
    DEFAULT_LIMITS,
    Event,
    EventError,
    Impression,
    Limits,
)
from monitor.core.grades import Scale
from monitor.core.stream.admission import declared_shadow, past_error
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.counters import SHADOW_RANKER, STALE_LABELS, dead_letter
from monitor.core.stream.held_grades import merge_grades
from monitor.core.stream.join import close_step, quiet_horizon, step
from monitor.core.stream.sampling import budget_period
from monitor.core.stream.session import SessionRecord
from monitor.core.stream.transition import Loaded, Transition
from monitor.store.admitting import BatchDecoder
from monitor.store.batch import COUNTED, Batch, Fenced, LayoutError, Message, Outbox, Outcome, StateBehind
from monitor.store.client import RedisClient
from monitor.store.keys import DEFAULT_GROUPS, SEQ, Keys, text
from monitor.store.prefetch import prefetch
from monitor.store.query_writes import query_writes
from monitor.store.reader import Reader
from monitor.store.scripts import Scripts, merged_shared
from monitor.store.session_index import SessionIndex
from monitor.store.sketch_cache import SketchCache


class RedisState(Reader):
    """One worker's view of the state in Redis: the write path here, the read model from :class:`Reader`."""

    def __init__(self, redis: RedisClient, config: StreamConfig, scale: Scale, partitions: int,
                 prefix: str = "srm", limits: Limits = DEFAULT_LIMITS,
                 clock: Callable[[], float | None] = time.time, groups: int = DEFAULT_GROUPS) -> None:
        super().__init__(redis, config, Keys(prefix, groups))
        self.scale, self.partitions = scale, partitions
        self.prefix, self.limits = prefix, limits
        self.clock = clock  # the wall clock of the max_future rule (admission.clock_error); None: no check
        self._registered: set[int] = set()  # partitions already in the global set (one SADD each)
        self._layout_checked = False  # check_layout passed (once per process: the worker's start, or here)
        # CPU seconds of this thread in the batch's synchronous stages (decode, join, encode); the rest of
        # a worker's CPU is Kafka, the Redis client and the event loop (search_relevance_worker_cpu_seconds)
        self.cpu: dict[str, float] = {"decode": 0.0, "join": 0.0, "encode": 0.0}
        self.scripts = Scripts.register(redis)
        self.sketches = SketchCache(config)  # the owned partitions' sketch slices (sketch_cache.py)
        self.index = SessionIndex(config)  # their sessions with a record or early labels (session_index.py)
        self.decoder = BatchDecoder(scale, config, limits, lambda: self.clock())  # (admitting.py)
        self.undeclared_new = self.decoder.undeclared_new  # logged once each by the worker, then cleared

    # -- messages -------------------------------------------------------------------------------------
    async def handle(self, partition: int, topic: str, offset: int, raw: bytes, outbox: Outbox | None = None,
                     role: str | None = None, key: bytes | None = None) -> Outcome:
        """One message (a batch of one): see :meth:`handle_batch`."""
        return (await self.handle_batch(partition, [Message(topic, offset, raw, role, outbox, key)]))[0]

    async def handle_batch(self, partition: int, messages: Sequence[Message],
                           previous: Mapping[str, int] | None = None) -> list[Outcome]:
        """Apply ``messages`` of one partition, in order, skipping those whose offset is already applied.

        One read of everything the batch touches, the steps in memory over that state
        (:class:`~monitor.store.partition_state.PartitionState`), the per-query writes (idempotent),
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
        started = time.thread_time()
        decoded = list(map(self.decoder.decode, messages))
        self.cpu["decode"] += time.thread_time() - started
        config, ttl = self.config, self.config.state_ttl
        periods = {budget_period(e.ts, config) for e in decoded if isinstance(e, Impression)}
        meta, spent = await self._meta(partition, periods)
        applied = {k[4:]: int(v) for k, v in meta.items() if k.startswith("off:")}
        if previous is not None:
            self._check_behind(partition, messages, applied, previous)
        outcomes: list[Outcome | None] = [None] * len(messages)
        events: list[tuple[int, Event]] = []
        rejected: list[tuple[int, EventError]] = []
        for index, (message, event) in enumerate(zip(messages, decoded, strict=True)):
            if applied.get(message.topic, -1) >= message.offset:
                outcomes[index] = Outcome(skipped=True)
                continue
            applied[message.topic] = message.offset
            if isinstance(event, EventError):
                rejected.append((index, event))
            else:
                events.append((index, event))
        watermark = float(meta["wm"]) if "wm" in meta else -math.inf
        batch = Batch(partition)
        held, load, batch.index_since = self.index.before(partition, meta, watermark)
        for index, error in rejected:
            outcomes[index] = Outcome(dead_letter=error)
            batch.count(dead_letter(error.code))
        read = await prefetch(self.redis, self.keys, self.scripts, self.config, self.scale, partition,
                              watermark, [e for _, e in events], spent, self.partitions, self.sketches,
                              held, load_index=load)
        if read.index is not None:
            self.index.load(partition, meta.get(SEQ, ""), *read.index)
        state, query_labels, shared, query_stamps = (read.state, read.query_labels, read.shared,
                                                     read.query_stamps)
        steps: list[tuple[int, Transition, Loaded]] = []
        started = time.thread_time()
        impressions = full = 0  # (for the decoder: how the next batch is decoded)
        for index, event in events:  # (past_error, declared_shadow: for the impressions they may change)
            stale = past_error(event, state.watermark, self.config) if isinstance(event, Impression) \
                and event.ts < state.watermark - ttl else None
            if stale is not None:
                outcomes[index] = Outcome(dead_letter=stale)
                batch.count(dead_letter(stale.code))
                continue
            if isinstance(event, Impression) and event.shadow:
                event, dropped = declared_shadow(event, self.config)
                if dropped:
                    batch.count(SHADOW_RANKER, float(dropped))
            if isinstance(event, Impression):  # most traffic: only counted, no Loaded, step or Transition
                impressions += 1
                counted = state.count_only(event, self.config, self.partitions)
                if counted is not None:
                    batch.add_counted(state.watermark, counted)
                    outcomes[index] = COUNTED
                    continue
                full += 1
                event = self.decoder.shown(messages[index], event)  # (with its results)
            loaded = state.load(event, query_labels, self.config, shared, query_stamps)
            transition = step(event, loaded, self.config, self.scale, self.partitions)
            if transition.pending_queries and transition.pending_queries[0][0] not in read.loaded:
                raise RuntimeError(f"a session of query {transition.pending_queries[0][0]} was sampled "
                                   "without its judgments read (prefetch.sampled_queries names it)")
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
        self.decoder.learn(impressions, full)
        self.cpu["join"] += time.thread_time() - started
        spread, lost = await query_writes(self.redis, self.keys, self.scripts, self.config, self.scale,
                                          partition, steps)
        if lost:
            batch.count(STALE_LABELS, float(lost))
        for index, transition, _ in steps:
            outcomes[index] = Outcome(transition=transition, fan_out=tuple(spread.get(index, ())))
        for message, outcome in zip(messages, outcomes, strict=True):
            if outcome is not COUNTED and outcome is not None and message.outbox is not None \
                    and outcome.publishes():  # (COUNTED, most messages, publishes nothing)
                batch.entries.extend(message.outbox(partition, message, outcome))
        offsets = {m.topic: m.offset for m, o in zip(messages, outcomes, strict=True)
                   if o is not None and not o.skipped}
        await self._commit(partition, batch, offsets, fence=meta.get(SEQ, ""))
        return [o if o is not None else Outcome(skipped=True) for o in outcomes]

    async def _meta(self, partition: int, periods: Iterable[int] = ()
                    ) -> tuple[dict[str, str], dict[tuple[str, int], float]]:
        """The partition's ``meta`` hash (watermark, applied offsets, commit counter) and the budget spent
        per (bucket, period) in ``periods``: one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.keys.p(partition, "meta"))
        ordered = sorted(periods)
        for period in ordered:
            pipe.hgetall(self.keys.p(partition, "bud", period))
        stored, *budgets = await pipe.execute()
        spent = {(text(bucket), period): float(used)
                 for period, fields in zip(ordered, budgets, strict=True) for bucket, used in fields.items()}
        return {text(k): text(v) for k, v in stored.items()}, spent

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
        meta = await self.redis.hgetall(self.keys.p(partition, "meta"))
        return {text(k)[4:]: int(v) for k, v in meta.items() if text(k).startswith("off:")}

    def forget(self, partition: int) -> None:
        """The partition changed hands, or Redis lost writes: register it again (in the set the exporters
        read), and read its sketch from Redis again."""
        self._registered.discard(partition)
        self.sketches.forget(partition)
        self.index.forget(partition)

    async def reject(self, partition: int, message: Message, error: EventError) -> Outcome:
        """Count a message as a dead letter (by reason code) and commit its offset (fenced; skipped if
        already applied)."""
        meta, _ = await self._meta(partition)
        if int(meta.get(f"off:{message.topic}", -1)) >= message.offset:
            return Outcome(skipped=True)
        outcome = Outcome(dead_letter=error)
        batch = Batch(partition)
        batch.count(dead_letter(error.code))
        if message.outbox is not None:
            batch.entries.extend(message.outbox(partition, message, outcome))
        await self._commit(partition, batch, {message.topic: message.offset}, fence=meta.get(SEQ, ""))
        return outcome

    async def apply_event(self, partition: int, event: Event) -> Outcome:
        """An event that did not come from a topic (tests apply fan-outs with it): no offset."""
        periods = [budget_period(event.ts, self.config)] if isinstance(event, Impression) else []
        meta, spent = await self._meta(partition, periods)
        watermark = float(meta["wm"]) if "wm" in meta else -math.inf
        read = await prefetch(self.redis, self.keys, self.scripts, self.config, self.scale, partition,
                              watermark, [event], spent, self.partitions, self.sketches)
        loaded = read.state.load(event, read.query_labels, self.config, read.shared, read.query_stamps)
        transition = step(event, loaded, self.config, self.scale, self.partitions)
        batch = Batch(partition)
        batch.add(transition, self.config)
        spread, lost = await query_writes(self.redis, self.keys, self.scripts, self.config, self.scale,
                                          partition, [(0, transition, loaded)])
        if lost:
            batch.count(STALE_LABELS, float(lost))
        await self._commit(partition, batch, {})
        return Outcome(transition=transition, fan_out=tuple(spread.get(0, ())))

    async def _commit(self, partition: int, batch: Batch, offsets: Mapping[str, int],
                      fence: str | None = None) -> None:
        """Everything ``batch`` changed, its outbox entries and ``offsets``: one Lua script call, so one
        atomic step and one round trip (every key is in the hash slot of the partition's group).

        ``fence``: the partition's commit counter (``meta`` field ``seq``) as read before the batch; the
        script first checks it is unchanged and increments it, or writes nothing (:class:`Fenced`)."""
        if partition not in self._registered:
            if not self._layout_checked:
                await self.check_layout()
            await self.redis.sadd(self.keys.partitions, partition)
            self._registered.add(partition)
        started = time.thread_time()
        ops = batch.ops(self.keys, self.config, offsets, fence)
        encoded = msgspec.msgpack.encode(ops.ops)  # MessagePack: what the script unpacks fastest
        self.cpu["encode"] += time.thread_time() - started
        if ops.ops:
            try:
                await self.scripts.apply_ops(keys=ops.keys, args=[encoded, *ops.values])
            except BaseException as error:  # not committed, or not known to be: the sketch is read again
                self.sketches.forget(partition)
                self.index.forget(partition)
                if isinstance(error, ResponseError) and str(error).startswith("FENCED"):
                    raise Fenced(f"partition {partition}: {error}") from None
                raise
        self.sketches.committed(partition, batch.sketch)
        self.index.committed(partition, fence, batch.watermark, batch.records.values(), batch.early)

    async def check_layout(self) -> None:
        """Record the number of groups the state is laid out in, or check it is the one recorded; raise
        :class:`LayoutError` where Redis holds state laid out otherwise (other groups, or a version
        before groups: partition keys ``srm:{p<N>}:…``), which this worker would neither read nor add to."""
        layout, groups = self.keys.layout, self.keys.groups
        if await self.redis.hsetnx(layout, "groups", groups):  # the first worker of this state
            held = await self.partitions_held()
            pipe = self.redis.pipeline(transaction=False)
            for partition in held:
                pipe.exists(f"{self.prefix}:{{p{partition}}}:meta")
            old = [p for p, found in zip(held, await pipe.execute() if held else [], strict=True) if found]
            if old:
                await self.redis.delete(layout)
                raise LayoutError(
                    f"Redis holds state under {self.prefix!r} written before partitions were grouped "
                    f"(keys {self.prefix}:{{p<N>}}:…, partitions {old[:5]}), which this version neither "
                    f"reads nor adds to. Start on a new MONITOR_REDIS_PREFIX: the worker rebuilds the state "
                    f"from what the topics retain (docs/worker.md, \"Upgrading\")")
            self._layout_checked = True
            return
        recorded = text(await self.redis.hget(layout, "groups") or b"")
        if recorded != str(groups):
            raise LayoutError(
                f"Redis holds state under {self.prefix!r} laid out in {recorded} groups, and this worker was "
                f"started with MONITOR_REDIS_GROUPS={groups}; every worker of a deployment must use the "
                f"same number (or start on an empty prefix)")
        self._layout_checked = True

    async def drain(self, partition: int, send: Callable[[Sequence[bytes]], Awaitable[None]],
                    limit: int = 1000) -> int:
        """Send the partition's committed outbox entries, then drop them (at least once: a crash between
        the two sends them again). Only the partition's owner drains, after its messages."""
        key = self.keys.p(partition, "outbox")
        stored = await self.redis.lrange(key, 0, limit - 1)
        entries = [e if isinstance(e, bytes) else e.encode() for e in stored]
        if not entries:
            return 0
        await send(entries)
        await self.redis.ltrim(key, len(entries), -1)
        return len(entries)

    async def advance(self, watermark: float) -> None:
        """Close every partition's sessions due by ``watermark`` (``inf``: all; the end of a replay)."""
        for partition in await self.partitions_held():
            while True:
                pipe = self.redis.pipeline(transaction=False)
                pipe.hget(self.keys.p(partition, "meta"), "wm")
                pipe.zrangebyscore(self.keys.p(partition, "dl"), "-inf", watermark, start=0,
                                   num=self.config.max_closes_per_step)
                raw, ids = await pipe.execute()
                current = float(raw) if raw is not None else -math.inf
                keys = [self.keys.p(partition, "s", text(i)) for i in ids]
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
        partitions = await self.partitions_held()
        if partition not in partitions:
            return 0
        closed = 0
        while True:
            pipe = self.redis.pipeline(transaction=False)
            for p in partitions:
                pipe.hmget(self.keys.p(p, "meta"), "wm", SEQ)
            rows = await pipe.execute()
            marks = {p: float(row[0]) for p, row in zip(partitions, rows, strict=True) if row[0] is not None}
            own = marks.get(partition, -math.inf)
            horizon = quiet_horizon(own, max(marks.values(), default=-math.inf), self.config, wall_elapsed)
            if horizon is None:
                return closed
            ids = await self.redis.zrangebyscore(self.keys.p(partition, "dl"), "-inf", horizon, start=0,
                                                 num=self.config.max_closes_per_step)
            if not ids:
                return closed
            records = await self.redis.mget([self.keys.p(partition, "s", text(i)) for i in ids])
            due = [SessionRecord.from_json(r) for r in records if r]
            closing = close_step(Loaded(watermark=own, due=due), horizon, self.config, self.scale, move=False)
            batch = Batch(partition)
            batch.add(closing, self.config)
            batch.watermark = None  # the partition's own watermark is not moved
            batch.deadlines.update({text(i): None for i in ids})  # records gone by TTL leave the index too
            seq = rows[partitions.index(partition)][1]
            await self._commit(partition, batch, {}, fence=text(seq) if seq is not None else "")
            closed += sum(1 for r in closing.records)
