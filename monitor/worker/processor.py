"""The worker's per-message logic, free of Faust: hand a message to :class:`RedisState`, turn what it
produced into outbox entries, and keep the local counts the pipeline-health series need.

What a message publishes, and the outbox's wire format, are :mod:`monitor.worker.outbox`'s.

Redis, not Kafka's committed offsets, says what has been applied (docs/worker.md, "Failure and
recovery"). :attr:`Processor.positions` remembers, per (topic, partition), the last message this process
was given since it got the partition; each batch tells :meth:`RedisState.handle_batch` that offset. If
Redis is behind it (it lost acknowledged writes: a crash with ``appendfsync everysec``, a restored
backup), or a fresh process starts after Kafka's committed offset while Redis is further back, the batch
raises :class:`StateBehind` and the missing messages are read from Kafka again with ``fetch`` and applied
first, in order, in this process: nothing is skipped and nothing needs a restart. :meth:`Processor.verify`
does the same check when no message arrives (the worker runs it every few seconds). A commit that finds
another commit in its way (:class:`Fenced`: a worker that lost the partition in a rebalance and still
writes) is redone from a fresh read, which then skips what the other one applied.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import NamedTuple, TypeVar

from monitor.core.events import EventError
from monitor.core.stream.config import StreamConfig
from monitor.store.batch import COUNTED, Fenced, Message, Outcome, StateBehind
from monitor.store.client import REDIS_UNAVAILABLE
from monitor.store.writer import RedisState
from monitor.worker.backoff import Backoff
from monitor.worker.outbox import Entry, decode_entry, outbox_entries
from monitor.worker.settings import Topics

log = logging.getLogger("monitor.worker")


def undeclared_warning(reason: str, value: str, config: StreamConfig) -> str:
    """The log line of the first impression of an undeclared variant or ranker ``value``.

    >>> print(undeclared_warning("variant", "exp-7", StreamConfig()))  # doctest: +NORMALIZE_WHITESPACE
    impressions of undeclared variant 'exp-7' are counted as other
    (search_relevance_undeclared_impressions_total{reason="variant"}), never sampled and in no group;
    the declared variants are control, canary (setting [stream] variants; docs/events.md)
    """
    if reason == "variant":
        declared = f"the declared variants are {', '.join(config.variants)} (setting [stream] variants"
    else:
        declared = f"rankers must match {config.ranker_pattern!r} (setting [stream] ranker_pattern"
    return (f"impressions of undeclared {reason} {value[:64]!r} are counted as other "
            f"(search_relevance_undeclared_impressions_total{{reason=\"{reason}\"}}), never sampled and in "
            f"no group; {declared}; docs/events.md)")


T = TypeVar("T")


class Consumed(NamedTuple):
    """A message as the consumer read it (a tombstone's value is ``b""``)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    raw: bytes


_TOPIC = attrgetter("topic")

Fetch = Callable[[str, int, int, int, int], Awaitable[Sequence[Consumed]]]
"""``fetch(topic, partition, start, end, limit)``: up to ``limit`` messages of the partition with
``start <= offset < end``, in offset order, read from Kafka again (fewer only when none is left)."""


class Processor:
    """Batches of messages, for every partition this worker owns. Calls are serialised by a lock (the
    agent, the periodic :meth:`verify` and the outbox :meth:`drain` never interleave)."""

    def __init__(self, state: RedisState, topics: Topics, retry_delay: float = 0.5,
                 max_retry_delay: float = 10.0, fetch: Fetch | None = None, catch_up_size: int = 500,
                 attempts: int = 3) -> None:
        self.state, self.topics = state, topics
        self.roles = topics.sources()
        self.consumed: Counter[str] = Counter()        # messages consumed per topic (this process)
        self.positions: dict[tuple[str, int], int] = {}  # (topic, partition) -> last handled offset
        self.retry_delay, self.max_retry_delay = retry_delay, max_retry_delay
        self.fetch, self.catch_up_size = fetch, catch_up_size
        self.attempts = attempts  # a message that fails alone this many times is a processing_error
        self.processing_retries = 0  # single messages tried again after an unexpected failure
        self.retries = 0
        self.fenced = 0     # commits refused because another commit came first
        self.replayed = 0   # messages read from Kafka again because Redis had lost them
        self._lock = asyncio.Lock()
        self._generation = 0  # bumped by forget(): a batch started before does not record positions
        self.last_impression: dict[int, float] = {}  # partition → wall time (monotonic) of its last one
        self.quiet_closed = 0  # sessions closed because their partition went quiet
        self._drained: set[int] = set()  # partitions whose outbox this process left empty since

    def _entries(self, partition: int, message: Message, outcome: Outcome) -> Sequence[bytes]:
        """The outbox entries of a message's outcome (the :data:`~monitor.store.batch.Outbox`)."""
        return outbox_entries(self.topics, partition, message, outcome)

    async def handle(self, topic: str, partition: int, offset: int, key: bytes | None, raw: bytes) -> Outcome:
        """One message (a batch of one)."""
        return (await self.handle_batch([Consumed(topic, partition, offset, key, raw)]))[0]

    async def handle_batch(self, batch: Sequence[Consumed]) -> list[Outcome]:
        """Apply consumed messages, one Redis transaction per partition, each partition's in offset order
        and the partitions concurrently (their Redis round trips overlap).

        Redis being unreachable is waited out (the same messages are retried, never skipped); Redis behind
        the batch is caught up from Kafka first (see the module docstring). Any other failure retries the
        partition's messages one by one, each up to :attr:`attempts` times with backoff (a passing failure,
        such as Kafka unreachable during a catch-up, must not send a valid message away); one that still
        fails goes to the dead-letter topic as ``processing_error``: a bug must not stop the stream or lose
        a message."""
        async with self._lock:
            by_partition: dict[int, list[int]] = {}
            now = time.monotonic()
            for index, message in enumerate(batch):
                indices = by_partition.get(message.partition)
                if indices is None:
                    indices = by_partition[message.partition] = []
                indices.append(index)
            self.consumed.update(map(_TOPIC, batch))
            impressions = self.topics.impressions
            served = {m.partition for m in batch if m.topic == impressions}
            self.last_impression.update(dict.fromkeys(served, now))
            parts = list(by_partition.items())
            results = await asyncio.gather(*(self._partition(p, [batch[i] for i in indices])
                                             for p, indices in parts), return_exceptions=True)
            self._log_undeclared()
            outcomes: list[Outcome | None] = [None] * len(batch)
            for (partition, indices), result in zip(parts, results, strict=True):
                if isinstance(result, BaseException):
                    raise result
                for index, outcome in zip(indices, result, strict=True):
                    outcomes[index] = outcome
                    if outcome is not COUNTED and outcome.publishes():  # (COUNTED publishes nothing)
                        self._drained.discard(partition)  # its outbox has entries to produce
            return [o for o in outcomes if o is not None]

    def _log_undeclared(self) -> None:
        """Once per undeclared variant or ranker value: a warning that its impressions are only counted."""
        for reason, value in self.state.undeclared_new:
            log.warning("%s", undeclared_warning(reason, value, self.state.config))
        self.state.undeclared_new.clear()

    async def _partition(self, partition: int, part: Sequence[Consumed]) -> list[Outcome]:
        try:
            return await self._apply(partition, part)
        except StateBehind:
            raise
        except Exception:
            log.exception("a batch of partition %d failed; retrying its messages one by one", partition)
            return [await self._one(c) for c in part]

    def _messages(self, part: Sequence[Consumed]) -> list[Message]:
        roles, entries = self.roles, self._entries  # (bound once: a batch is thousands of messages)
        return [Message(c.topic, c.offset, c.raw, roles.get(c.topic), entries, c.key) for c in part]

    async def _apply(self, partition: int, part: Sequence[Consumed]) -> list[Outcome]:
        """One partition's messages in one transaction: redone after :class:`Fenced`, after a catch-up
        from Kafka on :class:`StateBehind`; then their offsets become the known positions."""
        messages = self._messages(part)
        generation = self._generation
        while True:
            previous = {topic: self.positions[(topic, partition)] for topic in {c.topic for c in part}
                        if (topic, partition) in self.positions}
            try:
                results = await self._retrying(
                    functools.partial(self.state.handle_batch, partition, messages, previous))
            except Fenced as fenced:
                self.fenced += 1
                log.warning("%s: another commit came first; reading the partition again", fenced)
                continue
            except StateBehind as behind:
                if self.fetch is None:
                    raise
                await self._catch_up(partition, behind.topic, behind.stored, behind.offset)
                continue
            if generation == self._generation:  # (in offset order: the last of each topic stays)
                self.positions.update(((topic, partition), offset)
                                      for topic, offset in {c.topic: c.offset for c in part}.items())
            return results

    async def _catch_up(self, partition: int, topic: str, stored: int, end: int) -> None:
        """Apply the messages of ``topic[partition]`` with ``stored < offset < end`` again, from Kafka."""
        if self.fetch is None:
            raise StateBehind(partition, topic, stored, end)
        log.warning("redis is behind on %s[%d]: applied up to offset %d, needed up to %d; reading offsets "
                    "%d..%d from Kafka again", topic, partition, stored, end - 1, stored + 1, end - 1)
        self.state.forget(partition)
        self._drained.discard(partition)  # what it applies again may publish
        self.positions[(topic, partition)] = stored  # nothing was given before stored + 1 yet
        start, replayed = stored + 1, 0
        while start < end:
            chunk = [c for c in await self.fetch(topic, partition, start, end, self.catch_up_size)
                     if start <= c.offset < end]
            if not chunk:
                break
            await self._partition(partition, chunk)
            replayed += len(chunk)
            start = chunk[-1].offset + 1
        self.replayed += replayed
        if replayed:
            log.error("redis lost writes: re-applied %d messages of %s[%d] from Kafka (no restart needed)",
                      replayed, topic, partition)
        else:
            log.info("%s[%d]: Kafka has no message between offsets %d and %d", topic, partition, stored, end)

    async def _one(self, consumed: Consumed) -> Outcome:
        message = self._messages([consumed])[0]
        backoff = Backoff(self.retry_delay, self.max_retry_delay)
        for attempt in range(1, self.attempts + 1):
            try:
                return (await self._apply(consumed.partition, [consumed]))[0]
            except StateBehind:
                raise
            except Exception as error:
                if attempt < self.attempts:  # a passing failure must not send a valid message away
                    self.processing_retries += 1
                    log.warning("processing %s[%d]@%d failed (attempt %d of %d); trying it again in %.1f s",
                                consumed.topic, consumed.partition, consumed.offset, attempt, self.attempts,
                                backoff.delay, exc_info=True)
                    await backoff.pause()
                    continue
                log.exception("processing failed: %s[%d]@%d", consumed.topic, consumed.partition,
                              consumed.offset)
                failure = EventError("", f"processing failed: {type(error).__name__}: {error}",
                                     "processing_error")
        while True:
            try:
                outcome = await self._retrying(
                    functools.partial(self.state.reject, consumed.partition, message, failure))
            except Fenced:
                self.fenced += 1
                continue
            self.positions[(consumed.topic, consumed.partition)] = consumed.offset
            return outcome

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        backoff = Backoff(self.retry_delay, self.max_retry_delay)
        while True:
            try:
                return await call()
            except REDIS_UNAVAILABLE as error:
                self.retries += 1
                log.warning("redis unavailable (%s); retrying in %.1fs", type(error).__name__, backoff.delay)
                await backoff.pause()

    def forget(self, partitions: Iterable[tuple[str, int]]) -> None:
        """The consumer lost or got ``partitions`` ((topic, partition) pairs) in a rebalance: what this
        process knew of them no longer holds (another worker may have written them meanwhile)."""
        self._generation += 1
        for key in partitions:
            self.positions.pop(key, None)
            self.last_impression.pop(key[1], None)
            self._drained.discard(key[1])
            self.state.forget(key[1])

    async def verify(self, assigned: Iterable[tuple[str, int]],
                     committed: Mapping[tuple[str, int], int | None]) -> list[int]:
        """Check that Redis still holds what this process applied, for the ``assigned`` (topic,
        partition) pairs, and apply again from Kafka what it lost; the partitions caught up (their outbox
        needs a :meth:`drain`). A pair without a known position starts from ``committed`` (the consumer
        group's next offset, None if it has none): everything before it was applied in Redis once."""
        async with self._lock:
            by_partition: dict[int, list[str]] = {}
            for topic, partition in assigned:
                by_partition.setdefault(partition, []).append(topic)
            caught_up = []
            for partition, topics in sorted(by_partition.items()):
                for topic in topics:
                    key = (topic, partition)
                    if key not in self.positions and key in committed:
                        start = committed[key]
                        self.positions[key] = -1 if start is None else start - 1
                stored = await self._retrying(functools.partial(self.state.applied, partition))
                behind = [(t, stored.get(t, -1), self.positions[(t, partition)]) for t in topics
                          if stored.get(t, -1) < self.positions.get((t, partition), -1)]
                for topic, applied, position in behind:
                    await self._catch_up(partition, topic, applied, position + 1)
                if behind:
                    caught_up.append(partition)
            return caught_up

    async def close_quiet(self, partitions: Iterable[int], idle_timeout: float,
                          now: float | None = None) -> int:
        """Close the due sessions of the ``partitions`` (this worker's) that had no impression for
        ``idle_timeout`` wall seconds (:meth:`RedisState.close_quiet`); a partition first seen here starts
        its wait now. Returns the sessions closed (their annotation requests need no drain: a close
        publishes nothing)."""
        now = time.monotonic() if now is None else now
        closed = 0
        async with self._lock:
            for partition in sorted(set(partitions)):
                since = self.last_impression.setdefault(partition, now)
                if now - since < idle_timeout:
                    continue
                try:
                    closed += await self._retrying(
                        functools.partial(self.state.close_quiet, partition, now - since))
                except Fenced:  # another worker committed it meanwhile: it is not quiet, or not ours
                    self.fenced += 1
        self.quiet_closed += closed
        return closed

    async def drain(self, partitions: Sequence[int],
                    send: Callable[[Sequence[Entry]], Awaitable[None]]) -> int:
        """Publish the committed outbox entries of ``partitions`` (after a batch), retrying Redis outages;
        the partitions concurrently, each one's entries in order. A partition whose outbox this process
        emptied and has committed nothing to since (no dead letter, request or fan-out) is not read."""
        async def send_raw(raw: Sequence[bytes]) -> None:
            await send([decode_entry(r) for r in raw])

        async def one(partition: int) -> int:
            total, backoff = 0, Backoff(self.retry_delay, self.max_retry_delay)
            while True:
                try:
                    sent = await self.state.drain(partition, send_raw)
                except REDIS_UNAVAILABLE as error:
                    self.retries += 1
                    log.warning("redis unavailable while draining (%s); retrying in %.1fs",
                                type(error).__name__, backoff.delay)
                    await backoff.pause()
                    continue
                total += sent
                if sent == 0:
                    self._drained.add(partition)
                    return total

        async with self._lock:
            wanted = sorted(set(partitions) - self._drained)
            return sum(await asyncio.gather(*(one(p) for p in wanted)))
