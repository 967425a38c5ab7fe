"""Per-session contributions and :class:`Stats`, the typed, mergeable field sums they fold into.

A :class:`Stats` is a struct of named field sums (a ``dict`` field → number, so its wire form is the flat
mapping every store keeps: a Redis hash updated with ``HINCRBYFLOAT`` per field, a session record's
``contribution``) with explicit operations: :meth:`~Stats.add` (or ``merge``, ``+``) is field-wise
addition, :meth:`~Stats.take_back` (or ``-``) field-wise subtraction of a contribution added before; and
typed views of what it sums, :meth:`~Stats.mean` (a :class:`~monitor.core.aggregates.Mean`) and
:meth:`~Stats.pairs` (a :class:`~monitor.core.aggregates.PairAggregate`). A scored session contributes

    sessions = 1, dcg, dcg_sq, ndcg, ndcg_sq, rr, coverage, judged, concordant, discordant, grade_tied,
    score_tied, pnr_pos_sq, pnr_neg_sq, pnr_pos_neg, pnr_con_sq, pnr_con_neg

(judged: how many of its top k documents have a grade; DCG@k, nDCG@k and RR@k are the offline
evaluator's measures, ``compute(Measure("DCG", k), list)``; second moments of the session's positive
pairs P = concordant + grade_tied, the ties-positive convention, of its negative pairs N = discordant and
of its concordant pairs C: Σ P², Σ N², Σ P·N, Σ C², Σ C·N, so that a test on the ratio ΣP / ΣN, or on
ΣC / ΣN, the canary verdict's PNR, can use the delta method), and join_lag: the event time from the
impression to its first scoring (the partition's watermark then), which depends on how topics interleave
and so is the one field that is not a function of the impressions and final labels alone.

and an expired one ``expired = 1, expired_coverage``. A scored session with shadow lists (issue 28)
also contributes, per shadow list that reaches the coverage minimum, the paired sums ``pair_*``
(:func:`monitor.core.stream.shadow.paired_fields`: this module's DCG@k and pair counts of the served and
the shadow list) to another group, ``bucket|candidate|shadow``: a :class:`Stats` too, added and taken back
the same way; the served fields never hold them. Derived values (:func:`summarise`, through the typed
views): mean DCG@k with a 95% normal-approximation interval, mean NDCG@k, PNR from summed pair counts (both
tie conventions), mean RR, label coverage over scored and expired sessions. Empty statistics give None,
never 0.

>>> a = Stats({"sessions": 1.0, "dcg": 3.0, "dcg_sq": 9.0})
>>> b = a + Stats({"sessions": 1.0, "dcg": 1.0, "dcg_sq": 1.0})
>>> b.mean("dcg").get(), (b - a) == {"sessions": 1.0, "dcg": 1.0, "dcg_sq": 1.0}
(2.0, True)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from monitor.core.aggregates import Mean, PairAggregate
from monitor.core.evaluation import compute, list_pair_counts
from monitor.core.judged import JudgedList
from monitor.core.measures import Measure
from monitor.core.metrics.pairs import PairCounts


class Stats(dict[str, float]):
    """Named field sums, mergeable: ``add``/``merge``/``+`` add field-wise, ``take_back``/``-`` subtract a
    contribution added before (the explicit take-back); a missing field is 0. A ``dict`` subclass, so
    that every reader of the flat form (the stores, the Lua commit, msgspec and JSON, ``==`` with a plain
    dict) keeps working unchanged: a struct of fixed fields would need a conversion at each of those edges,
    and the set of fields is open (a new per-session statistic is a new field)."""

    __slots__ = ()

    def add(self, other: Mapping[str, float]) -> None:
        """Field-wise ``+=`` (river's ``update`` of a merged aggregate)."""
        get = self.get
        for name, value in other.items():
            self[name] = get(name, 0.0) + value

    merge = add

    def take_back(self, other: Mapping[str, float]) -> None:
        """Field-wise ``-=``: take back ``other``, added before (river's ``revert``)."""
        get = self.get
        for name, value in other.items():
            self[name] = get(name, 0.0) - value

    def __add__(self, other: Mapping[str, float]) -> Stats:
        out = Stats(self)
        out.add(other)
        return out

    def __sub__(self, other: Mapping[str, float]) -> Stats:
        out = Stats(self)
        out.take_back(other)
        return out

    def copy(self) -> Stats:
        return Stats(self)

    def count(self, name: str) -> int:
        """A count field (``sessions``, ``expired``, a pair count) as an integer."""
        return round(self.get(name, 0.0))

    def mean(self, name: str) -> Mean:
        """The mean of a per-session value over the scored sessions: n = ``sessions``, Σx = ``name``,
        Σx² = ``name_sq`` (0 where the field is not kept)."""
        return Mean(self.count("sessions"), self.get(name, 0.0), self.get(f"{name}_sq", 0.0))

    def pairs(self) -> PairAggregate:
        """The summed PNR pair counts of the scored sessions."""
        counts = PairCounts(self.count("concordant"), self.count("discordant"), self.count("grade_tied"),
                            self.count("score_tied"))
        return PairAggregate(counts, self.count("sessions"))


SCORED_FIELDS = ("sessions", "dcg", "dcg_sq", "ndcg", "ndcg_sq", "rr", "coverage", "judged",
                 "concordant", "discordant", "grade_tied", "score_tied",
                 "pnr_pos_sq", "pnr_neg_sq", "pnr_pos_neg", "pnr_con_sq", "pnr_con_neg", "join_lag")
EXPIRED_FIELDS = ("expired", "expired_coverage")
FIELDS = SCORED_FIELDS + EXPIRED_FIELDS


@lru_cache(maxsize=64)
def session_measures(k: int) -> tuple[Measure, Measure, Measure]:
    """DCG@k, nDCG@k and RR@k, the measures a session is scored with (made once per k)."""
    return Measure("DCG", k), Measure("nDCG", k), Measure("RR", k)


def _value(measure: Measure, judged: JudgedList) -> float:
    value = compute(measure, judged)
    if value is None:  # DCG, nDCG and RR are defined on every list
        raise ValueError(f"{measure} is undefined on this list")
    return value


def session_stats(judged: JudgedList, k: int) -> Stats:
    """The contribution of one scored session: its top-k list with labels."""
    dcg_k, ndcg_k, rr_k = session_measures(k)
    value = _value(dcg_k, judged)
    normalised = _value(ndcg_k, judged)
    top = JudgedList(judged.gains[:k], judged.levels[:k], judged.relevant[:k], judged.judged[:k],
                     judged.scores[:k], judged.pool_gains, judged.n_relevant, judged.max_level)
    pairs = list_pair_counts(top)
    positive, negative = float(pairs.concordant + pairs.grade_tied), float(pairs.discordant)
    return Stats({
        "sessions": 1.0, "dcg": value, "dcg_sq": value * value, "ndcg": normalised,
        "ndcg_sq": normalised * normalised, "rr": _value(rr_k, judged),
        "coverage": top.coverage() or 0.0, "judged": float(top.judged.sum()),
        "concordant": float(pairs.concordant),
        "discordant": float(pairs.discordant), "grade_tied": float(pairs.grade_tied),
        "score_tied": float(pairs.score_tied), "pnr_pos_sq": positive * positive,
        "pnr_neg_sq": negative * negative, "pnr_pos_neg": positive * negative,
        "pnr_con_sq": float(pairs.concordant) ** 2, "pnr_con_neg": float(pairs.concordant) * negative,
    })


def expired_stats(coverage: float) -> Stats:
    return Stats({"expired": 1.0, "expired_coverage": coverage})


def add(into: dict[str, float], delta: Mapping[str, float], sign: float = 1.0) -> None:
    """Field-wise ``into += sign · delta`` over the flat form (plain dicts read from a store)."""
    for name, value in delta.items():
        into[name] = into.get(name, 0.0) + sign * value


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


def summarise(stats: Mapping[str, float]) -> Summary:
    """What the exporter shows, read through the typed views of :class:`Stats`."""
    typed = stats if isinstance(stats, Stats) else Stats(stats)
    n = typed.count("sessions")
    expired = typed.count("expired")
    dcg_mean = typed.mean("dcg")
    pairs = typed.pairs()
    judged = n + expired
    coverage = ((typed.get("coverage", 0.0) + typed.get("expired_coverage", 0.0)) / judged
                if judged > 0 else None)
    return Summary(
        sessions=n, expired=expired, dcg=dcg_mean.get(), dcg_ci=dcg_mean.confidence_interval(),
        ndcg=typed.mean("ndcg").get(),
        pnr=pairs.get("positive"), pnr_skip_ties=pairs.get("skip"),
        rr=typed.mean("rr").get(),
        coverage=None if coverage is None else min(max(coverage, 0.0), 1.0),
        pairs=pairs.counts,
        join_lag=typed.mean("join_lag").get() if "join_lag" in typed else None,
    )
