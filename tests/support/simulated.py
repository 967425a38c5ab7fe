"""The offline recomputation of a simulated stream's metrics from the simulator's ground truth (no stream
code).
"""

from __future__ import annotations

import math

from monitor.core.metrics import dcg, ndcg, pair_counts
from monitor.core.stream.config import StreamConfig

GAINS = [0.0, 0.3, 0.7, 1.0]
CONFIG = StreamConfig(join_window=1800, min_coverage=0.8, windows={"all": 1e8}, slices_per_window=1,
                      budget={"head": 1e9, "torso": 1e9, "tail": 1e9})


def shared_by_query(result) -> dict[str, dict[str, list[tuple[float, str, int]]]]:  # type: ignore[no-untyped-def]
    """Per query and document, every session's final grade with the session's impression time and id,
    earliest first: what the stream shares between the query's sessions (every session is sampled here)."""
    out: dict[str, dict[str, list[tuple[float, str, int]]]] = {}
    for sid, grades in result.session_grades.items():
        session = result.sessions.get(sid)
        if session is None:
            continue
        docs = out.setdefault(session.query, {})
        for doc, level in grades.items():
            docs.setdefault(doc, []).append((session.ts, sid, level))
    for docs in out.values():
        for graders in docs.values():
            graders.sort()
    return out


def effective_labels(result, sid: str, config: StreamConfig = CONFIG,  # type: ignore[no-untyped-def]
                     shared: dict[str, dict[str, list[tuple[float, str, int]]]] | None = None) -> dict[str, int]:
    """The grades a session ends with: its own, over its query's judgments, over (with
    ``share_session_grades``) the grade of the earliest other session of its query that graded the
    document (brute force over the simulator's truth, no stream code)."""
    s = result.sessions[sid]
    reused: dict[str, int] = {}
    if config.share_session_grades:
        for doc, graders in (shared if shared is not None else shared_by_query(result)).get(s.query, {}).items():
            first = next(((ts, other, level) for ts, other, level in graders if other != sid), None)
            if first is not None:
                reused[doc] = first[2]
    return {**reused, **result.query_grades.get(s.query, {}), **result.session_grades.get(sid, {})}


def sessions(result, config: StreamConfig = CONFIG):  # type: ignore[no-untyped-def]
    """Each simulated session with its final effective grades, its k and its served top k."""
    shared = shared_by_query(result)
    for sid, s in result.sessions.items():
        k = config.k[s.bucket]
        yield sid, s, effective_labels(result, sid, config, shared), k, list(s.doc_ids[:k])


def covered(top: list[str], labels: dict[str, int], config: StreamConfig = CONFIG) -> bool:
    """Whether the list reaches the coverage minimum with ``labels``."""
    return sum(d in labels for d in top) / len(top) >= config.min_coverage


def recompute(result, config: StreamConfig = CONFIG) -> dict[str, dict[str, float]]:  # type: ignore[no-untyped-def]
    """Per group, from the simulator's ground truth with the metric functions (no stream code)."""
    out: dict[str, dict[str, float]] = {}
    for _, s, labels, k, top in sessions(result, config):
        group = out.setdefault(f"{s.bucket}|{s.ranker}|{s.variant}",
                               {"sessions": 0, "dcg": 0.0, "ndcg": 0.0, "pos": 0, "neg": 0, "expired": 0,
                                "judged": 0})
        if not covered(top, labels, config):
            group["expired"] += 1
            continue
        shown = [GAINS[labels[d]] if d in labels else 0.0 for d in top]
        judged = [i for i, d in enumerate(top) if d in labels]
        counts = pair_counts([labels[top[i]] for i in judged], [s.scores[i] for i in judged])
        group["sessions"] += 1
        group["dcg"] += dcg(shown, k)
        group["ndcg"] += ndcg(shown, [GAINS[g] for g in labels.values()], k)
        group["pos"] += counts.positive("seed")
        group["neg"] += counts.discordant
        group["judged"] += len(judged)
    return out


def recompute_paired(result, shadows: dict[str, list[tuple[str, list[str]]]],  # type: ignore[no-untyped-def]
                     config: StreamConfig = CONFIG,
                     scores: dict[str, dict[str, list[float]]] | None = None) -> dict[str, dict[str, float]]:
    """Per ``bucket|candidate|shadow`` group, the paired sums (issue 28) from the simulator's ground truth:
    a scored session (its served top k reaches the coverage minimum with its final grades) adds, for each
    shadow list it carried, ``sent_n`` = 1 and its served DCG@k (``sent_x``, ``sent_xx``: issue 42), and where
    the list's top k reaches the minimum too, its served and shadow DCG@k and (concordant, discordant) pairs,
    their products, and each list's discount mass of ranks without and with a final grade (issue 42)
    (``shadows``: each session's shadow lists; ``scores``: session id → candidate → its list's scores, as
    sent; a list without them is ranked by position. The simulator's scores have four decimals, so a
    list can tie two documents: such a pair is score-tied, neither concordant nor discordant; no stream
    code)."""
    out: dict[str, dict[str, float]] = {}
    for sid, s, labels, k, served in sessions(result, config):
        if not covered(served, labels, config):
            continue
        x, cx, dx = _dcg_and_pairs(served, list(s.scores[:k]), labels, k)
        for ranker, docs in shadows.get(sid, []):
            top = docs[:k]
            sums = out.setdefault(f"{s.bucket}|{ranker}|shadow", {})
            for name, value in (("sent_n", 1.0), ("sent_x", x), ("sent_xx", x * x)):  # sent, paired or not
                sums[name] = sums.get(name, 0.0) + value
            if not covered(top, labels, config):
                continue
            sent = (scores or {}).get(sid, {}).get(ranker)
            ranks = [-float(i) for i in range(1, len(top) + 1)] if sent is None else list(sent[:k])
            y, cy, dy = _dcg_and_pairs(top, ranks, labels, k)
            values = {"x": x, "y": y, "cx": cx, "dx": dx, "cy": cy, "dy": dy}
            row = {"pair_n": 1.0, **{f"pair_{n}": v for n, v in values.items()},
                   "pair_xx": x * x, "pair_yy": y * y, "pair_xy": x * y,
                   **_footing(served, labels, k, "x"), **_footing(top, labels, k, "y")}
            parts = ["cx", "dx", "cy", "dy"]
            row.update({f"pair_{a}_{b}": values[a] * values[b] for i, a in enumerate(parts) for b in parts[i:]})
            for name, value in row.items():
                sums[name] = sums.get(name, 0.0) + value
    return out


def _footing(docs: list[str], labels: dict[str, int], k: int, side: str) -> dict[str, float]:
    """The discount mass of the top k's ranks without a final grade (``pair_w…``) and with one (``pair_g…``)."""
    discounts = [(d in labels, 1.0 / math.log2(i + 2)) for i, d in enumerate(docs[:k])]
    return {f"pair_w{side}": sum(w for graded, w in discounts if not graded),
            f"pair_g{side}": sum(w for graded, w in discounts if graded)}


def _dcg_and_pairs(docs: list[str], scores: list[float], labels: dict[str, int],
                   k: int) -> tuple[float, float, float]:
    shown = [GAINS[labels[d]] if d in labels else 0.0 for d in docs]
    judged = [i for i, d in enumerate(docs) if d in labels]
    counts = pair_counts([labels[docs[i]] for i in judged], [scores[i] for i in judged])
    return dcg(shown, k), float(counts.concordant), float(counts.discordant)
