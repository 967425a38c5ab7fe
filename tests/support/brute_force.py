"""Deliberately naive reference implementations of the per-list metrics, for property tests.

Written straight from the definitions table of MISSION.md with plain loops over Python lists: no numpy, no
cumulative sums, no rank tricks, nothing shared with ``monitor.core``. Pairwise quantities enumerate every
pair. Slow (O(n²) where the core is vectorised) and obvious on purpose: when the core and this module
disagree, the definition below is the one to read.

Ranks are 1-based in the order the lists are given (rank 1 first).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Numbers = Sequence[float]


def _top(values: Numbers, k: int | None) -> list[float]:
    """The first k values (all of them when k is None)."""
    out = []
    for index, value in enumerate(values):
        if k is not None and index >= k:
            break
        out.append(float(value))
    return out


# ---------------------------------------------------------------- gain-based: CG, DCG, IDCG, NDCG


def cg(gains: Numbers, k: int | None = None) -> float:
    """CG@k = Σ_{i≤k} y_i."""
    total = 0.0
    for y in _top(gains, k):
        total += y
    return total


def gain_value(y: float, gain: str = "linear") -> float:
    """linear: y; exponential: 2^y − 1."""
    if gain == "linear":
        return y
    if gain == "exponential":
        return 2.0**y - 1.0
    raise ValueError(gain)


def discount_divisor(rank: int, discount: str = "log2") -> float:
    """The d_i that divides the gain at ``rank``: log2(i + 1); or J–K's 1 at rank 1 and log2(i) after."""
    if discount == "log2":
        return math.log2(rank + 1)
    if discount == "jk":
        return 1.0 if rank == 1 else math.log2(rank)
    raise ValueError(discount)


def dcg(gains: Numbers, k: int | None = None, gain: str = "linear", discount: str = "log2") -> float:
    """DCG@k = Σ_{i≤k} gain(y_i) / d_i."""
    total = 0.0
    for index, y in enumerate(_top(gains, k)):
        total += gain_value(y, gain) / discount_divisor(index + 1, discount)
    return total


def ideal_dcg(pool: Numbers, k: int | None = None, gain: str = "linear", discount: str = "log2") -> float:
    """DCG@k of the pool's gains in descending order."""
    return dcg(sorted((float(y) for y in pool), reverse=True), k, gain, discount)


def ndcg(
    gains: Numbers,
    pool: Numbers | None = None,
    k: int | None = None,
    gain: str = "linear",
    discount: str = "log2",
) -> float:
    """DCG@k / IDCG@k, IDCG from ``pool`` (default: the list's own gains); 0 when the ideal is 0."""
    ideal = ideal_dcg(list(gains) if pool is None else pool, k, gain, discount)
    if ideal == 0.0:
        return 0.0
    return dcg(gains, k, gain, discount) / ideal


# ---------------------------------------------------------------- binary: P@k, R@k, AP, AP@k, RR


def _hits_at(relevant: Numbers, k: int) -> int:
    """How many of the first k positions are relevant."""
    return sum(1 for index, r in enumerate(relevant) if index < k and r == 1)


def precision(relevant: Numbers, k: int) -> float:
    """P@k = relevant in top k / k (k counts past the list's end)."""
    return _hits_at(relevant, k) / k


def recall(relevant: Numbers, k: int | None, n_relevant: int) -> float:
    """R@k = relevant in top k / all relevant; 0 when nothing is relevant."""
    if n_relevant == 0:
        return 0.0
    depth = len(relevant) if k is None else k
    return _hits_at(relevant, depth) / n_relevant


def _precisions_at_relevant_ranks(relevant: Numbers, k: int | None) -> list[float]:
    """P@i for every relevant rank i ≤ k, each recounted from scratch."""
    out = []
    for index, r in enumerate(relevant):
        rank = index + 1
        if k is not None and rank > k:
            break
        if r == 1:
            out.append(precision(relevant, rank))
    return out


def trec_average_precision(relevant: Numbers, n_relevant: int, k: int | None = None) -> float:
    """trec_eval AP: Σ P@i over relevant ranks i (≤ k) ÷ number of relevant labelled documents."""
    if n_relevant == 0:
        return 0.0
    total = 0.0
    for p in _precisions_at_relevant_ranks(relevant, k):
        total += p
    return total / n_relevant


def seed_average_precision(relevant: Numbers, k: int | None = None) -> float:
    """Seed 003's AP@k: the mean of P@i over the relevant ranks i ≤ k; 0 when there is none."""
    values = _precisions_at_relevant_ranks(relevant, k)
    if not values:
        return 0.0
    total = 0.0
    for p in values:
        total += p
    return total / len(values)


def reciprocal_rank(relevant: Numbers, k: int | None = None) -> float:
    """1 / rank of the first relevant document (within k); 0 if none."""
    for index, r in enumerate(relevant):
        rank = index + 1
        if k is not None and rank > k:
            return 0.0
        if r == 1:
            return 1.0 / rank
    return 0.0


# ---------------------------------------------------------------- cascade models: RBP, ERR


def rbp(gains: Numbers, p: float, k: int | None = None) -> float:
    """RBP(p) = (1 − p) Σ_i y_i p^(i−1)."""
    total = 0.0
    for index, y in enumerate(_top(gains, k)):
        total += y * p**index
    return (1.0 - p) * total


def satisfaction(level: float, max_level: float) -> float:
    """R = (2^max(level, 0) − 1) / 2^max_level."""
    return (2.0 ** max(level, 0.0) - 1.0) / 2.0**max_level


def err(levels: Numbers, max_level: float, k: int | None = None, p: float = 1.0) -> float:
    """ERR@k = Σ_r (1/r) R_r Π_{i<r} p (1 − R_i), the product recomputed for every r."""
    top = _top(levels, k)
    total = 0.0
    for r in range(1, len(top) + 1):
        reach = 1.0
        for i in range(1, r):
            reach *= p * (1.0 - satisfaction(top[i - 1], max_level))
        total += reach * satisfaction(top[r - 1], max_level) / r
    return total


# ---------------------------------------------------------------- AUC and pairwise: PNR, Kendall tau


def auc(scores: Numbers, relevant: Numbers) -> float | None:
    """Every (relevant, non-relevant) pair: 1 if the relevant one scores higher, ½ on a tie; None if one
    class is missing."""
    positives = [s for s, r in zip(scores, relevant, strict=True) if r == 1]
    negatives = [s for s, r in zip(scores, relevant, strict=True) if r != 1]
    if not positives or not negatives:
        return None
    wins = 0.0
    for sp in positives:
        for sn in negatives:
            if sp > sn:
                wins += 1.0
            elif sp == sn:
                wins += 0.5
    return wins / (len(positives) * len(negatives))


@dataclass(frozen=True)
class Pairs:
    """The four pair counts of one list."""

    concordant: int = 0
    discordant: int = 0
    grade_tied: int = 0
    score_tied: int = 0


def pair_counts(grades: Numbers, scores: Numbers) -> Pairs:
    """Every pair i < j: score-tied if the scores are equal; otherwise oriented by score (higher first) and
    grade-tied if the grades are equal, concordant if the higher-scored one has the higher grade, discordant
    otherwise."""
    concordant = discordant = grade_tied = score_tied = 0
    n = len(grades)
    for i in range(n):
        for j in range(i + 1, n):
            if scores[i] == scores[j]:
                score_tied += 1
                continue
            high, low = (i, j) if scores[i] > scores[j] else (j, i)
            if grades[high] == grades[low]:
                grade_tied += 1
            elif grades[high] > grades[low]:
                concordant += 1
            else:
                discordant += 1
    return Pairs(concordant, discordant, grade_tied, score_tied)


def pnr(pairs: Pairs, ties: str = "seed") -> float | None:
    """positive / discordant, positive = concordant (+ grade-tied under the ties-positive convention);
    +inf without discordant pairs, None when there is neither."""
    positive = pairs.concordant + (pairs.grade_tied if ties == "seed" else 0)
    if pairs.discordant == 0:
        return math.inf if positive > 0 else None
    return positive / pairs.discordant


def kendall_tau_distance(grades: Numbers) -> int:
    """Pairs i < j in the shown order whose grades say j should have come first (grade_i < grade_j)."""
    n = len(grades)
    return sum(1 for i in range(n) for j in range(i + 1, n) if grades[i] < grades[j])
