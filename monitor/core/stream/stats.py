"""Per-session contributions and the flat, mergeable statistics they fold into.

A :class:`Stats` is a mapping field → number whose merge is field-wise addition, so it maps one to one
onto a Redis hash updated with ``HINCRBYFLOAT`` and onto in-process dicts. A scored session contributes

    sessions = 1, dcg, dcg_sq, ndcg, ndcg_sq, rr, coverage, concordant, discordant, grade_tied, score_tied,
    pnr_pos_sq, pnr_neg_sq, pnr_pos_neg, pnr_con_sq, pnr_con_neg

(second moments of the session's positive pairs P = concordant + grade_tied, the ties-positive convention,
of its negative pairs N = discordant and of its concordant pairs C: Σ P², Σ N², Σ P·N, Σ C², Σ C·N, so that a
test on the ratio ΣP / ΣN, or on ΣC / ΣN, the canary verdict's PNR, can use the delta method), and join_lag:
the event time from the impression to its first scoring (the partition's watermark then), which depends
on how topics interleave and so is the one field that is not a function of the impressions and final
labels alone.

and an expired one ``expired = 1, expired_coverage``. Derived values (:func:`summarise`): mean DCG@k with a
95% normal-approximation interval, mean NDCG@k, PNR from summed pair counts (both tie conventions), mean
RR, label coverage over scored and expired sessions. Empty statistics give None, never 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from monitor.core.aggregates import Mean
from monitor.core.evaluation import list_pair_counts
from monitor.core.judged import JudgedList
from monitor.core.metrics import dcg, ndcg, reciprocal_rank
from monitor.core.metrics.pairs import PairCounts

Stats = dict[str, float]

SCORED_FIELDS = ("sessions", "dcg", "dcg_sq", "ndcg", "ndcg_sq", "rr", "coverage",
                 "concordant", "discordant", "grade_tied", "score_tied",
                 "pnr_pos_sq", "pnr_neg_sq", "pnr_pos_neg", "pnr_con_sq", "pnr_con_neg", "join_lag")
EXPIRED_FIELDS = ("expired", "expired_coverage")
FIELDS = SCORED_FIELDS + EXPIRED_FIELDS


def session_stats(judged: JudgedList, k: int) -> Stats:
    """The contribution of one scored session: its top-k list with labels."""
    value = dcg(judged.gains, k)
    normalised = ndcg(judged.gains, judged.pool_gains, k)
    top = JudgedList(judged.gains[:k], judged.levels[:k], judged.relevant[:k], judged.judged[:k],
                     judged.scores[:k], judged.pool_gains, judged.n_relevant, judged.max_level)
    pairs = list_pair_counts(top)
    positive, negative = float(pairs.concordant + pairs.grade_tied), float(pairs.discordant)
    return {
        "sessions": 1.0, "dcg": value, "dcg_sq": value * value, "ndcg": normalised,
        "ndcg_sq": normalised * normalised, "rr": reciprocal_rank(judged.relevant, k),
        "coverage": top.coverage() or 0.0, "concordant": float(pairs.concordant),
        "discordant": float(pairs.discordant), "grade_tied": float(pairs.grade_tied),
        "score_tied": float(pairs.score_tied), "pnr_pos_sq": positive * positive,
        "pnr_neg_sq": negative * negative, "pnr_pos_neg": positive * negative,
        "pnr_con_sq": float(pairs.concordant) ** 2, "pnr_con_neg": float(pairs.concordant) * negative,
    }


def expired_stats(coverage: float) -> Stats:
    return {"expired": 1.0, "expired_coverage": coverage}


def add(into: Stats, delta: Mapping[str, float], sign: float = 1.0) -> None:
    for name, value in delta.items():
        into[name] = into.get(name, 0.0) + sign * value


def negated(delta: Mapping[str, float]) -> Stats:
    return {name: -value for name, value in delta.items()}


def is_removal(delta: Mapping[str, float]) -> bool:
    """A delta that takes a session's contribution back (see :func:`negated`)."""
    return delta.get("sessions", 0.0) + delta.get("expired", 0.0) < 0


@dataclass(frozen=True)
class Summary:
    """What the exporter shows for one group and window. None: no data."""

    sessions: int
    expired: int
    dcg: float | None
    dcg_ci: tuple[float, float] | None
    ndcg: float | None
    pnr: float | None
    pnr_skip_ties: float | None
    rr: float | None
    coverage: float | None
    pairs: PairCounts
    join_lag: float | None = None


def _count(stats: Mapping[str, float], name: str) -> int:
    return round(stats.get(name, 0.0))


def summarise(stats: Mapping[str, float]) -> Summary:
    n = _count(stats, "sessions")
    expired = _count(stats, "expired")
    dcg_mean = Mean(n, stats.get("dcg", 0.0), stats.get("dcg_sq", 0.0))
    pairs = PairCounts(_count(stats, "concordant"), _count(stats, "discordant"),
                       _count(stats, "grade_tied"), _count(stats, "score_tied"))
    judged = n + expired
    coverage = ((stats.get("coverage", 0.0) + stats.get("expired_coverage", 0.0)) / judged
                if judged > 0 else None)
    return Summary(
        sessions=n, expired=expired, dcg=dcg_mean.get(), dcg_ci=dcg_mean.confidence_interval(),
        ndcg=stats.get("ndcg", 0.0) / n if n > 0 else None,
        pnr=pairs.pnr("positive"), pnr_skip_ties=pairs.pnr("skip"),
        rr=stats.get("rr", 0.0) / n if n > 0 else None,
        coverage=None if coverage is None else min(max(coverage, 0.0), 1.0),
        pairs=pairs,
        join_lag=stats.get("join_lag", 0.0) / n if n > 0 and "join_lag" in stats else None,
    )


