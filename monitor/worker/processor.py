"""The worker's per-message logic, free of Faust: hand a message to :class:`RedisState`, turn what it
produced into outbox entries, and keep the local counts the pipeline-health series need.

Outbox entries are JSON: ``{"topic", "key", "value", "headers"}`` with key and value in base64, so a dead
letter keeps the original bytes exactly. :func:`decode_entry` reads them back for the producer.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from monitor.core.events import EventError, encode_annotation
from monitor.core.stream.join import AnnotationRequest
from monitor.pipeline.redis_state import Message, Outbox, Outcome, RedisState
from monitor.worker.settings import Topics

log = logging.getLogger("monitor.worker")
HEADER_PREFIX = "monitor."


T = TypeVar("T")


@dataclass(frozen=True)
class Consumed:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    raw: bytes


@dataclass(frozen=True)
class Entry:
    topic: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()


def encode_entry(entry: Entry) -> bytes:
    return json.dumps({
        "topic": entry.topic,
        "key": None if entry.key is None else base64.b64encode(entry.key).decode(),
        "value": base64.b64encode(entry.value).decode(),
        "headers": [[name, base64.b64encode(value).decode()] for name, value in entry.headers],
    }, separators=(",", ":")).encode()


def decode_entry(raw: bytes) -> Entry:
    obj = json.loads(raw)
    return Entry(obj["topic"], None if obj["key"] is None else base64.b64decode(obj["key"]),
                 base64.b64decode(obj["value"]),
                 tuple((name, base64.b64decode(value)) for name, value in obj["headers"]))


def request_json(request: AnnotationRequest) -> bytes:
    """An annotation request as published: the session's top-k documents, to be graded."""
    return json.dumps({
        "type": "annotation_request", "schema": 1, "session_id": request.session_id, "query": request.query,
        "query_bucket": request.bucket, "ranker": request.ranker, "variant": request.variant, "k": request.k,
        "doc_ids": request.docs, "ts": request.ts,
    }, ensure_ascii=False, separators=(",", ":")).encode()


class Processor:
    """One message at a time, for every partition this worker owns (the caller serialises calls)."""

    def __init__(self, state: RedisState, topics: Topics, retry_delay: float = 0.5,
                 max_retry_delay: float = 10.0) -> None:
        self.state, self.topics = state, topics
        self.roles = topics.sources()
        self.consumed: Counter[str] = Counter()        # messages consumed per topic (this process)
        self.positions: dict[tuple[str, int], int] = {}  # (topic, partition) -> last handled offset
        self.retry_delay, self.max_retry_delay = retry_delay, max_retry_delay
        self.retries = 0

    def _outbox(self, topic: str, partition: int, offset: int, key: bytes | None, raw: bytes) -> Outbox:
        def entries(outcome: Outcome) -> Sequence[bytes]:
            out: list[Entry] = []
            error = outcome.dead_letter
            if error is not None:
                out.append(Entry(self.topics.dead_letters, key, raw, tuple(
                    (HEADER_PREFIX + name, value.encode()) for name, value in (
                        ("error.code", error.code), ("error.field", error.field),
                        ("error.reason", error.reason),
                        ("source.topic", topic), ("source.partition", str(partition)),
                        ("source.offset", str(offset))))))
            if outcome.transition is not None:
                for request in outcome.transition.requests:
                    out.append(Entry(self.topics.requests, request.session_id.encode(),
                                     request_json(request)))
            for session_id, annotation in outcome.fan_out:
                out.append(Entry(self.topics.annotations, session_id.encode(), encode_annotation(annotation)))
            return [encode_entry(e) for e in out]
        return entries

    async def handle(self, topic: str, partition: int, offset: int, key: bytes | None, raw: bytes) -> Outcome:
        """One message (a batch of one)."""
        return (await self.handle_batch([Consumed(topic, partition, offset, key, raw)]))[0]

    async def handle_batch(self, batch: Sequence[Consumed]) -> list[Outcome]:
        """Apply consumed messages, one Redis transaction per partition, in offset order.

        Redis being unreachable is waited out (the same messages are retried, never skipped). Any other
        failure retries the partition's messages one by one, and the one that fails again goes to the
        dead-letter topic as ``processing_error``: a bug must not stop the stream or lose a message."""
        outcomes: list[Outcome | None] = [None] * len(batch)
        by_partition: dict[int, list[int]] = {}
        for index, message in enumerate(batch):
            by_partition.setdefault(message.partition, []).append(index)
            self.consumed[message.topic] += 1
        for partition, indices in by_partition.items():
            messages = [self._message(batch[i]) for i in indices]
            try:
                call = functools.partial(self.state.handle_batch, partition, messages)
                results = await self._retrying(call)
            except Exception:
                log.exception("a batch of partition %d failed; retrying its messages one by one", partition)
                results = [await self._one(batch[i]) for i in indices]
            for index, outcome in zip(indices, results, strict=True):
                outcomes[index] = outcome
                self.positions[(batch[index].topic, partition)] = batch[index].offset
        return [o for o in outcomes if o is not None]

    def _message(self, consumed: Consumed) -> Message:
        return Message(consumed.topic, consumed.offset, consumed.raw, self.roles.get(consumed.topic),
                       self._outbox(consumed.topic, consumed.partition, consumed.offset, consumed.key,
                                    consumed.raw))

    async def _one(self, consumed: Consumed) -> Outcome:
        message = self._message(consumed)
        try:
            return (await self._retrying(lambda: self.state.handle_batch(consumed.partition, [message])))[0]
        except Exception as error:
            log.exception("processing failed: %s[%d]@%d", consumed.topic, consumed.partition, consumed.offset)
            failure = EventError("", f"processing failed: {type(error).__name__}: {error}")
            return await self._retrying(lambda: self.state.reject(
                consumed.partition, consumed.topic, consumed.offset, failure, message.outbox))

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        delay = self.retry_delay
        while True:
            try:
                return await call()
            except (RedisConnectionError, RedisTimeoutError, OSError) as error:
                self.retries += 1
                log.warning("redis unavailable (%s); retrying in %.1fs", type(error).__name__, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_retry_delay)

    async def drain(self, partitions: Sequence[int],
                    send: Callable[[Sequence[Entry]], Awaitable[None]]) -> int:
        """Publish the committed outbox entries of ``partitions`` (after a batch), retrying Redis outages."""
        async def send_raw(raw: Sequence[bytes]) -> None:
            await send([decode_entry(r) for r in raw])

        total, delay = 0, self.retry_delay
        for partition in sorted(set(partitions)):
            while True:
                try:
                    sent = await self.state.drain(partition, send_raw)
                except (RedisConnectionError, RedisTimeoutError, OSError) as error:
                    log.warning("redis unavailable while draining (%s); retrying in %.1fs",
                                type(error).__name__, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self.max_retry_delay)
                    continue
                total += sent
                if sent == 0:
                    break
        return total
