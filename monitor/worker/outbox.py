"""What the worker publishes, and how it waits in the outbox: the outbox's wire format.

A message's outcome becomes outbox entries (:func:`outbox_entries`): a dead letter (the original bytes,
with ``monitor.error.*`` and ``monitor.source.*`` headers), the annotation requests of its step
(:func:`request_json`, docs/events.md) and the fan-out annotations of a query's judgments. They are
committed to Redis with the batch (``srm:{g<G>}:p<N>:outbox``) and produced after it. Entries are JSON:
``{"topic", "key", "value", "headers"}`` with key and value in base64, so a dead letter keeps the original
bytes exactly; :func:`decode_entry` reads them back for the producer.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass

from monitor.core.events import encode_annotation
from monitor.core.stream.transition import AnnotationRequest
from monitor.store.batch import Message, Outcome
from monitor.worker.settings import Topics

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
    """An annotation request as published: the session's top-k documents without a grade yet, to be
    graded, how many of its top k were graded already, and (``documents``, only when the impression's
    results gave some) the text annotators are shown of them (docs/events.md)."""
    body = {
        "type": "annotation_request", "schema": 1, "session_id": request.session_id, "query": request.query,
        "query_bucket": request.bucket, "ranker": request.ranker, "variant": request.variant, "k": request.k,
        "doc_ids": request.docs, "judged": request.judged, "ts": request.ts,
    }
    if request.documents:
        body["documents"] = request.documents
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def outbox_entries(topics: Topics, partition: int, message: Message, outcome: Outcome) -> Sequence[bytes]:
    """The encoded outbox entries of ``message``'s ``outcome`` on ``partition``, in the order produced."""
    out: list[Entry] = []
    error = outcome.dead_letter
    if error is not None:
        out.append(Entry(topics.dead_letters, message.key, message.raw, tuple(
            (HEADER_PREFIX + name, value.encode()) for name, value in (
                ("error.code", error.code), ("error.field", error.field), ("error.reason", error.reason),
                ("source.topic", message.topic), ("source.partition", str(partition)),
                ("source.offset", str(message.offset))))))
    if outcome.transition is not None:
        for request in outcome.transition.requests:
            out.append(Entry(topics.requests, request.session_id.encode(), request_json(request)))
    for session_id, annotation in outcome.fan_out:
        out.append(Entry(topics.annotations, session_id.encode(), encode_annotation(annotation)))
    return [encode_entry(e) for e in out]
