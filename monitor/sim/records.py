"""What the simulator emits: one Kafka-shaped record per event (topic, key, raw value, time).

``value`` is the raw bytes a producer would send: UTF-8 JSON with ``ensure_ascii=False`` for valid events,
deliberately broken bytes for invalid ones (which carry ``expected_error``, a substring of the
:class:`~monitor.core.events.EventError` message a validator must raise).

``ts`` is when the record is delivered. It equals the event's own ``ts`` field, except for duplicates:
a redelivery keeps the original bytes (and so the original event time) but arrives later.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TOPICS = ("impressions", "annotations", "deploys")


@dataclass(frozen=True, slots=True)
class SimEvent:
    """One record: ``topic`` is ``impressions``, ``annotations`` or ``deploys``."""

    topic: str
    key: bytes
    value: bytes
    ts: float
    expected_error: str | None = None

    @property
    def valid(self) -> bool:
        return self.expected_error is None


def encode(obj: dict[str, Any]) -> bytes:
    """Compact UTF-8 JSON, non-ASCII kept as is (``蓝牙耳机``, not ``\\u84dd…``); NaN is refused."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def json_text(value: str) -> str:
    """A JSON string token (escaped, non-ASCII kept)."""
    return json.dumps(value, ensure_ascii=False)


def impression_value(
    session_id: str,
    query: str,
    bucket: str | None,
    ranker: str,
    variant: str | None,
    ts: float,
    doc_ids: list[str],
    scores: list[float],
    shadow: Sequence[tuple[str, list[str], list[float]]] = (),
) -> bytes:
    """The impression event, byte for byte what :func:`encode` gives for the same fields in this order.

    Assembled from tokens because it is the simulator's hottest path. ``doc_ids`` are the simulator's own
    ``d-<q>-<n>`` (no escaping needed); scores are finite (their ``repr`` is the JSON number). ``variant``
    None: a plain impression, without the field. ``shadow``: the shadow lists (ranker, doc ids, scores),
    after ``results``; none: no ``shadow`` field (the bytes of an impression without them).
    """
    hint = f'"query_bucket":"{bucket}",' if bucket is not None else ""
    arm = f'"variant":{json_text(variant)},' if variant is not None else ""
    extra = ""
    if shadow:
        lists = ",".join(f'{{"ranker":{json_text(name)},"results":[{_results(ids, values)}]}}'
                         for name, ids, values in shadow)
        extra = f',"shadow":[{lists}]'
    return (f'{{"type":"impression","schema":1,"session_id":{json_text(session_id)},'
            f'"query":{json_text(query)},{hint}"ranker":{json_text(ranker)},{arm}"ts":{ts!r},'
            f'"results":[{_results(doc_ids, scores)}]{extra}}}').encode()


def _results(doc_ids: list[str], scores: list[float]) -> str:
    return ",".join(f'{{"doc_id":"{d}","position":{p},"score":{s!r}}}'
                    for p, (d, s) in enumerate(zip(doc_ids, scores, strict=True), start=1))
