"""Streams with timestamped (re)grades where the latest grade wins, and the aggregates they must give."""

from __future__ import annotations

import json
import random

from monitor.core.stream.config import StreamConfig
from monitor.store.memory import MemoryPipeline
from tests.support.streams import impression

GRADES = ["无", "低", "中", "高"]
UNLIMITED = {"head": 1e9, "torso": 1e9, "tail": 1e9}
CONFIG = StreamConfig(join_window=300, min_coverage=0.5, windows={"all": 10.0**7}, slices_per_window=1,
                      budget=UNLIMITED)
DOCS = ["a", "b", "c"]
Events = list[tuple[str, bytes, bytes]]


def graded(sid: str, doc: str, level: int, ts: float | None) -> tuple[str, bytes, bytes]:
    body: dict[str, object] = {"type": "annotation", "session_id": sid, "doc_id": doc, "grade": GRADES[level]}
    if ts is not None:
        body["ts"] = ts
    return "annotations", sid.encode(), json.dumps(body, ensure_ascii=False).encode()


def judged(query: str, doc: str, level: int, ts: float | None) -> tuple[str, bytes, bytes]:
    body: dict[str, object] = {"type": "annotation", "query": query, "grades": [{"doc_id": doc, "grade": level}]}
    if ts is not None:
        body["ts"] = ts
    return "annotations", query.encode(), json.dumps(body).encode()


def shown(sid: str, ts: float = 1000.0, query: str | None = None) -> tuple[str, bytes, bytes]:
    return "impressions", sid.encode(), impression(sid, ts, DOCS, query=query or f"q-{sid}")


def ts_stream(seed: int) -> tuple[Events, Events]:
    """Sessions of a few queries, graded (own grades and query judgments) in several versions each, every
    grade with a distinct ts. Returns (impressions, annotations)."""
    rng = random.Random(seed)
    stamps = rng.sample(range(1, 100_000), 2_000)
    impressions: Events = []
    grades: list[tuple[float, tuple[str, bytes, bytes]]] = []
    for i in range(30):
        sid, query = f"s{i}", f"q{rng.randrange(4)}"
        docs = rng.sample([f"{query}-d{j}" for j in range(8)], rng.randint(2, 6))
        impressions.append(("impressions", sid.encode(),
                            impression(sid, 1000.0 + i, docs, query=query, variant=rng.choice(["control", "canary"]))))
        for doc in docs:
            for _ in range(rng.choice([0, 1, 1, 2, 3])):
                ts = float(stamps.pop())
                grades.append((ts, graded(sid, doc, rng.randrange(4), ts)))
    for q in range(4):
        for j in range(8):
            for _ in range(rng.choice([0, 0, 1, 2])):
                ts = float(stamps.pop())
                grades.append((ts, judged(f"q{q}", f"q{q}-d{j}", rng.randrange(4), ts)))
    return impressions, [event for _, event in sorted(grades, key=lambda g: g[0])]


def aggregates(pipeline: MemoryPipeline) -> dict[tuple[str, str], dict[str, float]]:
    return {key: {name: round(value, 6) for name, value in stats.items() if name != "join_lag"}
            for key, stats in pipeline.windows().items()}
