"""A hostile-input world: ghost sessions, far-future events, resent old grades."""

from __future__ import annotations

import json
import random

from hypothesis import reject

from monitor.sim import SimConfig, simulate

FAR_FUTURE = 253_402_214_400.0  # 9999-12-31
Events = list[tuple[str, bytes, bytes]]


def world(seed: int, sessions: int = 500) -> Events:
    try:
        result = simulate(SimConfig(seed=seed, n_sessions=sessions, duration_s=12 * 3600, label_share=0.05,
                                    night_dip=0.08, invalid_rate=0.0))
    except ValueError as error:  # a seed whose 20 head queries cannot make the night dip: another seed
        assert "night_dip" in str(error)
        reject()
    return [(e.topic, e.key, e.value) for e in result.events]


def impression(sid: str, ts: float, ranker: str = "ranker-a", variant: str = "control") -> bytes:
    return json.dumps({"type": "impression", "session_id": sid, "query": f"hostile {sid}", "ranker": ranker,
                       "variant": variant, "ts": ts, "query_bucket": "tail",
                       "results": [{"doc_id": f"{sid}-d{i}", "position": i + 1} for i in range(3)]}).encode()


def ghost(i: int) -> tuple[str, bytes, bytes]:
    sid = f"ghost-{i}"
    return "annotations", sid.encode(), json.dumps(
        {"type": "annotation", "session_id": sid, "doc_id": "g", "grade": "高"}, ensure_ascii=False).encode()


def resent_old_grades(events: Events, rng: random.Random, count: int) -> Events:
    """For up to ``count`` annotations that carry a ``ts``: the first of their grades again, with another
    grade and an older ``ts`` (a producer retrying what was sent before a correction)."""
    out: Events = []
    stamped = [(k, json.loads(v)) for t, k, v in events if t == "annotations" and b'"ts"' in v]
    for key, obj in rng.sample(stamped, min(count, len(stamped))):
        first = obj["grades"][0] if "grades" in obj else {"doc_id": obj["doc_id"], "grade": obj["grade"]}
        old = {"type": "annotation", "doc_id": first["doc_id"], "grade": rng.choice(["无", "低", "中", "高"]),
               "ts": obj["ts"] - rng.uniform(1.0, 3600.0)}
        old.update({"session_id": obj["session_id"]} if "session_id" in obj else {"query": obj["query"]})
        out.append(("annotations", key, json.dumps(old, ensure_ascii=False).encode()))
    return out
