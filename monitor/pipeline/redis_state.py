"""The stream core with its state in Redis: what the Kafka worker runs, one message at a time.

Per message: read the partition's applied offset (a redelivered message changes nothing), decode and
validate, load what :func:`~monitor.core.stream.join.step` needs, and write the whole transition together
with the new offset in one ``MULTI``/``EXEC``. Keys carry the partition as a Redis Cluster hash tag
(``srm:{p3}:…``), so one partition's session records, early labels, deadlines, aggregate slices, sketch,
budget counters and offsets live in one slot and one transaction. Query-level labels and the index of a
query's sessions in the join are per query (``srm:{q:<hash>}:…``), written idempotently before the
transaction. Everything has a TTL.

The exporter reads the same keys (:meth:`RedisState.snapshot`), so several workers export one truth.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis

from monitor.core.events import (
    DEFAULT_LIMITS,
    Annotation,
    Event,
    EventError,
    Impression,
    Limits,
    decode_event,
    expect_topic,
)
from monitor.core.grades import Scale
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.join import (
    Labels,
    Loaded,
    Transition,
    budget_period,
    close_step,
    fan_out_annotation,
    frequency_cells,
    frequency_slices,
    next_watermark,
    step,
)
from monitor.core.stream.rollup import rollup, slice_keys, wanted_slices
from monitor.core.stream.session import SessionRecord, query_key
from monitor.core.stream.sketch import cell_field
from monitor.core.stream.stats import Stats, is_removal
from monitor.export.snapshot import Snapshot


@dataclass(frozen=True)
class Outcome:
    """What handling one message did: skipped (already applied), a dead letter, or a transition."""

    skipped: bool = False
    dead_letter: EventError | None = None
    transition: Transition | None = None
    fan_out: tuple[tuple[str, Annotation], ...] = ()  # (session id, annotation) to publish, keyed by session


Outbox = Callable[[Outcome], Sequence[bytes]]
"""What a message's outcome must publish (dead letter, annotation requests, fan-out annotations), as
opaque entries the adapter can send later: they are committed in the message's transaction."""


class RedisState:
    def __init__(self, redis: Redis, config: StreamConfig, scale: Scale, partitions: int,
                 prefix: str = "srm", limits: Limits = DEFAULT_LIMITS) -> None:
        self.redis, self.config, self.scale, self.partitions = redis, config, scale, partitions
        self.prefix, self.limits = prefix, limits
        self._registered: set[int] = set()  # partitions already in the global set (one SADD each)

    # -- keys -----------------------------------------------------------------------------------------
    def _p(self, partition: int, *parts: object) -> str:
        return ":".join([f"{self.prefix}:{{p{partition}}}", *map(str, parts)])

    def _q(self, key: str, part: str) -> str:
        return f"{self.prefix}:{{q:{key}}}:{part}"

    # -- one message ----------------------------------------------------------------------------------
    async def handle(self, partition: int, topic: str, offset: int, raw: bytes,
                     outbox: Outbox | None = None, role: str | None = None) -> Outcome:
        """Apply one message unless its offset is already applied.

        ``outbox`` turns the outcome into entries to publish; they join the same transaction as the state
        and the offset (a transactional outbox: see :meth:`drain`), so nothing is published for a message
        whose state was not committed, and nothing committed goes unpublished. ``role`` (impressions,
        annotations, deploys) refuses events of another type."""
        meta = self._p(partition, "meta")
        applied = await self.redis.hget(meta, f"off:{topic}")
        if applied is not None and int(applied) >= offset:
            return Outcome(skipped=True)
        try:
            event = decode_event(raw, self.scale, self.limits)
            if role is not None:
                expect_topic(event, role)
        except EventError as error:
            return await self.reject(partition, topic, offset, error, outbox)
        return await self.apply_event(partition, event, topic, offset, outbox)

    async def reject(self, partition: int, topic: str, offset: int, error: EventError,
                     outbox: Outbox | None = None) -> Outcome:
        """Count a message as a dead letter (by reason code) and commit its offset."""
        outcome = Outcome(dead_letter=error)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hincrbyfloat(self._p(partition, "cnt"), f"|dead_letter:{error.code}", 1.0)
        if outbox is not None and (entries := outbox(outcome)):
            pipe.rpush(self._p(partition, "outbox"), *entries)
        pipe.hset(self._p(partition, "meta"), f"off:{topic}", offset)
        await pipe.execute()
        return outcome

    async def apply_event(self, partition: int, event: Event, topic: str | None = None,
                          offset: int | None = None, outbox: Outbox | None = None) -> Outcome:
        loaded = await self._load(partition, event)
        transition = step(event, loaded, self.config, self.scale, self.partitions)
        fan_out = await self._query_writes(partition, transition, loaded)
        outcome = Outcome(transition=transition, fan_out=fan_out)
        await self._write(partition, transition, topic, offset, outbox(outcome) if outbox else ())
        return outcome

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

    async def _watermark(self, partition: int) -> float:
        raw = await self.redis.hget(self._p(partition, "meta"), "wm")
        return float(raw) if raw is not None else -math.inf

    async def _due(self, partition: int, watermark: float) -> list[SessionRecord]:
        """Pending sessions whose deadline is at or before ``watermark`` (at most one step's worth)."""
        if watermark == -math.inf:
            return []
        ids = await self.redis.zrangebyscore(self._p(partition, "dl"), "-inf", watermark, start=0,
                                             num=self.config.max_closes_per_step)
        if not ids:
            return []
        records = await self.redis.mget([self._p(partition, "s", _text(i)) for i in ids])
        return [SessionRecord.from_json(r) for r in records if r]

    async def _load(self, partition: int, event: Event) -> Loaded:
        loaded = Loaded(watermark=await self._watermark(partition))
        session_id = event.session_id if isinstance(event, Impression | Annotation) else None
        if session_id is not None:
            record, early = await self.redis.mget(self._p(partition, "s", session_id),
                                                  self._p(partition, "e", session_id))
            loaded.record = SessionRecord.from_json(record) if record else None
            loaded.early_labels = json.loads(early) if early else {}
        if isinstance(event, Impression):
            qkey = query_key(event.query)
            loaded.query_labels = {_text(k): int(v) for k, v in
                                   (await self.redis.hgetall(self._q(qkey, "labels"))).items()}
            fields = [cell_field(c) for c in frequency_cells(event.query, self.config)]
            pipe = self.redis.pipeline(transaction=False)
            for index in frequency_slices(event.ts, self.config):
                pipe.hmget(self._p(partition, "cms", index), fields)
            loaded.sketch = [{f: float(v) for f, v in zip(fields, values, strict=True) if v is not None}
                             for values in await pipe.execute()]
            budget = await self.redis.hgetall(self._p(partition, "bud", budget_period(event.ts, self.config)))
            loaded.budget_used = {_text(k): float(v) for k, v in budget.items()}
        loaded.due = await self._due(partition, next_watermark(loaded.watermark, event))
        return loaded

    async def _query_writes(self, partition: int, t: Transition,
                            loaded: Loaded) -> tuple[tuple[str, Annotation], ...]:
        """Per-query keys live in other slots: idempotent writes before the transaction, and the
        query-level labels to fan out to sessions (to publish, keyed by session)."""
        ttl = int(self.config.state_ttl)
        fan_out: list[tuple[str, Annotation]] = []
        for qkey, session_id in t.pending_queries:
            await self.redis.sadd(self._q(qkey, "pending"), f"{partition}:{session_id}")
            await self.redis.expire(self._q(qkey, "pending"), ttl)
            # A judgment for the query written on another partition after this impression read the
            # query's labels, and fanned out before the SADD above, reached no one: catch it here.
            # (Either its fan-out saw this session, or this read sees its labels; both is harmless.)
            stored = await self.redis.hgetall(self._q(qkey, "labels"))
            labels = {_text(k): int(v) for k, v in stored.items()}
            missed = {d: g for d, g in labels.items() if loaded.query_labels.get(d) != g}
            if missed:
                fan_out.append((session_id, fan_out_annotation(session_id, missed, self.scale)))
        if t.query_labels is not None:
            qkey, labels = t.query_labels
            await self.redis.hset(self._q(qkey, "labels"), mapping=cast(Any, labels))
            await self.redis.expire(self._q(qkey, "labels"), ttl)
            fan_out.extend(await self._fan_out(qkey, labels))
        return tuple(fan_out)

    async def _write(self, partition: int, t: Transition, topic: str | None, offset: int | None,
                     entries: Sequence[bytes] = ()) -> None:
        config, ttl = self.config, int(self.config.state_ttl)
        if partition not in self._registered:
            await self.redis.sadd(f"{self.prefix}:partitions", partition)
            self._registered.add(partition)

        pipe = self.redis.pipeline(transaction=True)
        meta = self._p(partition, "meta")
        if math.isfinite(t.watermark):
            pipe.hset(meta, "wm", repr(t.watermark))
        for record in t.records:
            pipe.set(self._p(partition, "s", record.session_id), record.to_json(), ex=ttl)
        for session_id, labels in t.early_labels.items():
            pipe.set(self._p(partition, "e", session_id), json.dumps(labels), ex=ttl)
        for session_id in t.drop_early_labels:
            pipe.delete(self._p(partition, "e", session_id))
        if t.deadlines:
            pipe.zadd(self._p(partition, "dl"), t.deadlines)
        if t.drop_deadlines:
            pipe.zrem(self._p(partition, "dl"), *t.drop_deadlines)
        for ts, group, delta in t.deltas:
            for window, index in slice_keys(ts, config):
                key = self._p(partition, "agg", window, index)
                for name, value in delta.items():
                    pipe.hincrbyfloat(key, f"{group}|{name}", value)
                pipe.expire(key, int(config.windows[window] + 2 * config.slice_width(window)))
            removal = is_removal(delta)
            totals = self._p(partition, "rem" if removal else "add")
            for name, value in delta.items():
                pipe.hincrbyfloat(totals, f"{group}|{name}", -value if removal else value)
        for group, name, amount in t.counters:
            pipe.hincrbyfloat(self._p(partition, "cnt"), f"{group}|{name}", amount)
        for index, cell in t.sketch:
            key = self._p(partition, "cms", index)
            pipe.hincrbyfloat(key, cell, 1.0)
            pipe.expire(key, int(config.frequency_window * 2))
        if t.budget is not None:
            key = self._p(partition, "bud", t.budget[1])
            pipe.hincrbyfloat(key, t.budget[0], 1.0)
            pipe.expire(key, int(config.budget_period * 2))
        for deploy in t.deploys:
            pipe.rpush(self._p(partition, "deploys"), json.dumps(
                {"kind": deploy.kind, "ranker": deploy.ranker, "previous": deploy.previous, "ts": deploy.ts}))
        if entries:
            pipe.rpush(self._p(partition, "outbox"), *entries)
        if topic is not None and offset is not None:
            pipe.hset(meta, f"off:{topic}", offset)
        await pipe.execute()

    async def _fan_out(self, qkey: str, labels: Labels) -> list[tuple[str, Annotation]]:
        members = sorted(_text(m) for m in await self.redis.smembers(self._q(qkey, "pending")))
        session_ids = [m.split(":", 1)[1] for m in members]
        return [(sid, fan_out_annotation(sid, labels, self.scale)) for sid in session_ids]

    async def advance(self, watermark: float) -> None:
        """Close every partition's sessions due by ``watermark`` (``inf``: all; the end of a replay)."""
        for partition in sorted(int(p) for p in await self.redis.smembers(f"{self.prefix}:partitions")):
            while True:
                due = await self._due(partition, watermark)
                loaded = Loaded(watermark=await self._watermark(partition), due=due)
                closing = close_step(loaded, watermark, self.config, self.scale)
                await self._write(partition, closing, None, None)
                if not due:
                    break

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
    for field, value in raw.items():
        group, _, name = (field.decode() if isinstance(field, bytes) else field).rpartition("|")
        out[(group, name)] = float(value)
    return out


def _grouped(raw: Mapping[Any, Any]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for (group, name), value in _pairs(raw).items():
        out.setdefault(group, {})[name] = value
    return out
