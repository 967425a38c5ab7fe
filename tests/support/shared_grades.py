"""Streams whose sessions share grades across a query, and their brute-force expected numbers."""

from __future__ import annotations

import json
import random

from monitor.core.metrics import dcg, ndcg, pair_counts
from monitor.core.stream.config import StreamConfig
from tests.support.streams import graded, impression, label

GAINS = [0.0, 0.3, 0.7, 1.0]
UNLIMITED = {"head": 1e9, "torso": 1e9, "tail": 1e9}
CONFIG = StreamConfig(join_window=300, min_coverage=0.6, windows={"all": 10.0**7}, slices_per_window=1,
                      budget=UNLIMITED)
Events = list[tuple[str, bytes, bytes]]


def query_labels(query: str, grades: dict[str, int]) -> bytes:
    return json.dumps({"type": "annotation", "query": query,
                       "grades": [{"doc_id": d, "grade": g} for d, g in grades.items()]}).encode()


def shared_stream(seed: int, sessions: int = 240, queries: int = 8) -> tuple[Events, dict[str, dict]]:
    """Sessions of a few queries that show overlapping documents of each query's pool, graded by their
    own annotators (who disagree: a document's grade differs between sessions), with corrections,
    duplicates, sessions never graded, grades of documents a session did not show, and query-level
    judgments (one corrected). Returns the events in stream order and the truth per session."""
    rng = random.Random(seed)
    events: Events = []
    truth: dict[str, dict] = {}
    query_final: dict[str, dict[str, int]] = {}
    for i in range(sessions):
        sid, q = f"s{i}", f"q{rng.randrange(queries)}"
        bucket = {"q0": "head", "q1": "torso"}.get(q, "tail")
        docs = rng.sample([f"{q}-d{j}" for j in range(30)], rng.randint(3, 25))
        ts = 1000.0 + i * 5.0 + (rng.random() < 0.1) * 3.0  # some equal impression times: ties by id
        variant = rng.choice(["control", "canary"])
        events.append(("impressions", sid.encode(), impression(sid, ts, docs, bucket, query=q, variant=variant)))
        own: dict[str, int] = {}
        if rng.random() < 0.6:
            more, own = graded(rng, sid, docs, 0.8, 2)
            events.extend(more)
            if rng.random() < 0.2:  # a document of the query it did not show
                extra = f"{q}-d{rng.randrange(30, 33)}"
                events.append(("annotations", sid.encode(), label(sid, extra, 2)))
                own[extra] = 2
        if rng.random() < 0.02:
            grades = {f"{q}-d{j}": rng.randint(0, 3) for j in rng.sample(range(30), 5)}
            events.append(("annotations", q.encode(), query_labels(q, grades)))
            query_final.setdefault(q, {}).update(grades)
        truth[sid] = {"query": q, "bucket": bucket, "variant": variant, "docs": docs, "ts": ts, "own": own}
    for sid in truth:
        truth[sid]["query_grades"] = query_final.get(truth[sid]["query"], {})
    return events, truth


def brute_force(truth: dict[str, dict], config: StreamConfig) -> dict[str, dict[str, float]]:
    """Per group, from each session's final grades: own, over the query's, over the earliest other
    session's (when shared), scored with the metric functions directly."""
    out: dict[str, dict[str, float]] = {}
    for sid, s in truth.items():
        reused: dict[str, int] = {}
        if config.share_session_grades:
            graders = sorted((o["ts"], other, o["own"]) for other, o in truth.items()
                             if o["query"] == s["query"] and other != sid)
            for _, _, own in reversed(graders):  # the earliest last, so it wins
                reused.update(own)
        labels = {**reused, **s["query_grades"], **s["own"]}
        k = config.k[s["bucket"]]
        top = s["docs"][:k]
        group = out.setdefault(f"{s['bucket']}|r1|{s['variant']}",
                               {"sessions": 0, "dcg": 0.0, "ndcg": 0.0, "pos": 0, "neg": 0, "expired": 0})
        if sum(d in labels for d in top) / len(top) < config.min_coverage:
            group["expired"] += 1
            continue
        judged = [d for d in top if d in labels]
        counts = pair_counts([labels[d] for d in judged], [100.0 - top.index(d) for d in judged])
        group["sessions"] += 1
        group["dcg"] += dcg([GAINS[labels[d]] if d in labels else 0.0 for d in top], k)
        group["ndcg"] += ndcg([GAINS[labels[d]] if d in labels else 0.0 for d in top],
                              [GAINS[g] for g in labels.values()], k)
        group["pos"] += counts.positive("seed")
        group["neg"] += counts.discordant
    return out
