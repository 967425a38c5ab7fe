"""The worker's per-message logic, free of Faust: hand a message to :class:`RedisState`, turn what it
produced into outbox entries, and keep the local counts the pipeline-health series need.

Outbox entries are JSON: ``{"topic", "key", "value", "headers"}`` with key and value in base64, so a dead
letter keeps the original bytes exactly. :func:`decode_entry` reads them back for the producer.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from monitor.core.events import EventError, encode_annotation
from monitor.core.stream.join import AnnotationRequest
from monitor.pipeline.redis_state import Outbox, Outcome, RedisState
from monitor.worker.settings import Topics

log = logging.getLogger("monitor.worker")
HEADER_PREFIX = "monitor."


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
        """Apply one message. Redis being unreachable is waited out (the same message is retried, never
        skipped); any other failure sends the message to the dead-letter topic as ``processing_error``."""
        self.consumed[topic] += 1
        outbox = self._outbox(topic, partition, offset, key, raw)
        delay = self.retry_delay
        while True:
            try:
                try:
                    outcome = await self.state.handle(partition, topic, offset, raw, outbox,
                                                      self.roles.get(topic))
                except (RedisConnectionError, RedisTimeoutError, OSError):
                    raise
                except Exception as error:  # a bug must not stop the stream or lose the message
                    log.exception("processing failed: %s[%d]@%d", topic, partition, offset)
                    failure = EventError("", f"processing failed: {type(error).__name__}: {error}")
                    outcome = await self.state.reject(partition, topic, offset, failure, outbox)
                break
            except (RedisConnectionError, RedisTimeoutError, OSError) as error:
                self.retries += 1
                log.warning("redis unavailable (%s); retrying %s[%d]@%d in %.1fs", type(error).__name__,
                            topic, partition, offset, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_retry_delay)
        self.positions[(topic, partition)] = offset
        return outcome

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
