"""Streams whose impressions carry shadow lists (issue 28): what the unit and the Redis tests feed."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

Events = list[tuple[str, bytes, bytes]]


def shown(*docs: str, scores: bool = False) -> list[dict[str, Any]]:
    """Results in the given order, positions from 1 (scores 1/position if ``scores``)."""
    return [{"doc_id": d, "position": i, **({"score": 1.0 / i} if scores else {})} for i, d in enumerate(docs, 1)]


def with_shadow(events: Events) -> Events:
    """Every impression with two shadow lists (a declared ranker, ``ranker-z``, with its documents rotated,
    and an undeclared one, ``cand-9``, reversed), the rest unchanged."""
    out = []
    for topic, key, value in events:
        if topic == "impressions":
            body = json.loads(value)
            docs = [r["doc_id"] for r in body["results"]]
            body["shadow"] = [{"ranker": "ranker-z", "results": shown(*docs[1:], docs[0])},
                              {"ranker": "cand-9", "results": shown(*reversed(docs))}]
            value = json.dumps(body, ensure_ascii=False).encode()
        out.append((topic, key, value))
    return out


Lists = list[tuple[str, list[str]]]


def with_lists(events: Events, make: Callable[[list[str]], Lists]) -> Events:
    """Every impression with the shadow lists ``make`` gives from its served documents (no scores)."""
    out = []
    for topic, key, value in events:
        if topic == "impressions":
            body = json.loads(value)
            docs = [r["doc_id"] for r in body["results"]]
            body["shadow"] = [{"ranker": ranker, "results": shown(*listed)} for ranker, listed in make(docs)]
            value = json.dumps(body, ensure_ascii=False).encode()
        out.append((topic, key, value))
    return out


def shadow_of(events: Events) -> dict[str, Lists]:
    """Session id → its impression's shadow lists (ranker, documents in order), read from the events."""
    out: dict[str, Lists] = {}
    for topic, _, value in events:
        if topic == "impressions":
            body = json.loads(value)
            out[body["session_id"]] = [(s["ranker"], [r["doc_id"] for r in s["results"]])
                                       for s in body.get("shadow") or []]
    return out
