"""Streams whose impressions carry shadow lists (issue 28): what the unit and the Redis tests feed."""

from __future__ import annotations

import json
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
