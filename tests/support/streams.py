"""Random event streams for the stream-core tests: impression and label events, whole random streams with
their truth, and interleavings of them.
"""

from __future__ import annotations

import json
import math
import random

from monitor.store.memory import MemoryPipeline

GRADES = ["无", "低", "中", "高"]


def impression(sid: str, ts: float, docs: list[str], bucket: str | None = "tail", query: str | None = None,
               variant: str = "control", ranker: str = "r1") -> bytes:
    event = {"type": "impression", "session_id": sid, "query": query or f"q-{sid}", "ranker": ranker,
             "variant": variant, "ts": ts,
             "results": [{"doc_id": d, "position": i + 1, "score": 100.0 - i} for i, d in enumerate(docs)]}
    if bucket:
        event["query_bucket"] = bucket
    return json.dumps(event).encode()


def label(sid: str, doc: str, level: int) -> bytes:
    return json.dumps({"type": "annotation", "session_id": sid, "doc_id": doc, "grade": GRADES[level]},
                      ensure_ascii=False).encode()


def submit_all(pipeline: MemoryPipeline, events: list[tuple[str, bytes, bytes]]) -> None:
    for topic, key, value in events:
        pipeline.submit(topic, key, value)
    pipeline.advance(math.inf)


def graded(rng: random.Random, sid: str, docs: list[str], share: float, wrong: int
           ) -> tuple[list[tuple[str, bytes, bytes]], dict[str, int]]:
    """Annotations of session ``sid`` grading each of ``docs`` with probability ``share``: 10% of them
    first with a wrong grade (``level + wrong``, corrected by the next), 5% delivered twice; and the final
    grade of each document graded."""
    events: list[tuple[str, bytes, bytes]] = []
    final: dict[str, int] = {}
    for doc in docs:
        if rng.random() < share:
            level = rng.randint(0, 3)
            if rng.random() < 0.1:  # a wrong grade first, corrected later
                events.append(("annotations", sid.encode(), label(sid, doc, (level + wrong) % 4)))
            events.append(("annotations", sid.encode(), label(sid, doc, level)))
            if rng.random() < 0.05:
                events.append(("annotations", sid.encode(), label(sid, doc, level)))
            final[doc] = level
    return events, final


def random_stream(seed: int, sessions: int = 300, start: float = 1000.0
                  ) -> tuple[list[tuple[str, bytes, bytes]], dict[str, dict]]:
    """Impressions and labels (with duplicates, corrections, some never labelled), and the truth; the
    impressions 7 s apart from ``start`` (the default, in 1970, only where no wall clock is checked:
    ``clock=lambda: None``)."""
    rng = random.Random(seed)
    events: list[tuple[str, bytes, bytes]] = []
    truth: dict[str, dict] = {}
    for i in range(sessions):
        sid = f"s{i}"
        bucket = rng.choice(["head", "torso", "tail"])
        docs = [f"d{i}-{j}" for j in range(rng.randint(1, 45))]
        variant = rng.choice(["control", "canary"])
        ts = start + i * 7.0
        events.append(("impressions", sid.encode(), impression(sid, ts, docs, bucket, variant=variant)))
        final: dict[str, int] = {}
        if rng.random() < 0.85:
            more, final = graded(rng, sid, docs, 0.9, 1)
            events.extend(more)
        truth[sid] = {"bucket": bucket, "variant": variant, "docs": docs, "labels": final}
    return events, truth


def interleave(events: list[tuple[str, bytes, bytes]], rng: random.Random) -> list[tuple[str, bytes, bytes]]:
    """A random interleaving that keeps each (topic, key)'s order, as Kafka keeps a partition's order:
    labels may overtake their impression, impressions overtake each other (closing sessions early)."""
    queues: dict[tuple[str, bytes], list[tuple[str, bytes, bytes]]] = {}
    for event in events:
        queues.setdefault((event[0], event[1]), []).append(event)
    pending = [list(reversed(q)) for q in queues.values()]
    out = []
    while pending:
        queue = pending[rng.randrange(len(pending))]
        out.append(queue.pop())
        if not queue:
            pending.remove(queue)
    return out
