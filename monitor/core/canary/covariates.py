"""What the adjustment for query difficulty reads from the history (docs/canary.md): each arm's DCG sums
per epoch and query, each query's covariate (its mean DCG@k in the window before the comparison starts)
and the per-epoch sums :class:`~monitor.core.canary.adjusted.CovariateSums` is built from."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from monitor.core.canary.adjusted import CovariateSums
from monitor.core.canary.config import CanaryConfig
from monitor.core.stream.history import History

QueryEpochs = dict[int, dict[str, list[float]]]  # epoch index -> query key -> [n, Σx, Σx²] of one arm


@dataclass(frozen=True)
class Adjustment:
    """What the adjustment for query difficulty of one pair reads: each arm's sessions per epoch and
    query (DCG sums ``n``, ``x``, ``xx``) and each query's covariate (:func:`covariates`)."""

    baseline: QueryEpochs
    candidate: QueryEpochs
    covariate: Mapping[str, float]


def query_epochs(history: History, bucket: str, wanted: Callable[[str, str], bool], first: int | None = None,
                  last: int | None = None) -> QueryEpochs:
    """One arm's sessions per epoch and query: epoch → query key → their summed DCG sums."""
    out: QueryEpochs = {}
    for index, rows in history.query_rows.get(bucket, {}).items():
        if (first is not None and index < first) or (last is not None and index > last):
            continue
        by_query = out.setdefault(index, {})
        for ranker, variant, query, n, x, xx in rows:
            if wanted(ranker, variant):
                total = by_query.get(query)
                if total is None:
                    by_query[query] = [n, x, xx]
                else:
                    total[0] += n
                    total[1] += x
                    total[2] += xx
    return {index: by_query for index, by_query in out.items() if by_query}


def covariates(history: History, start: int, config: CanaryConfig) -> dict[str, float]:
    """Query key → its mean DCG@k over the scored sessions (any bucket, ranker and arm) of the
    ``covariate_window`` before epoch ``start`` (the epochs ``start − window / width`` … ``start − 1``), for
    the queries with at least ``covariate_min_sessions`` of them: fixed before the comparison starts."""
    span = max(1, round(config.covariate_window / history.width))
    key = (start, span, config.covariate_min_sessions)
    cache = history.memo.setdefault("covariates", {})
    if key not in cache:  # every bucket's comparison of one period reads the same covariates
        cache[key] = _covariates(history, start, span, config.covariate_min_sessions)
    found: dict[str, float] = cache[key]
    return found


def _covariates(history: History, start: int, span: int, least: int) -> dict[str, float]:
    sums: dict[str, list[float]] = {}
    for by_epoch in history.query_rows.values():
        for index, rows in by_epoch.items():
            if not start - span <= index < start:
                continue
            for _, _, query, n, x, _ in rows:
                total = sums.setdefault(query, [0.0, 0.0])
                total[0] += n
                total[1] += x
    return {query: x / n for query, (n, x) in sums.items() if round(n) >= least and round(n) > 0}


def with_covariate(by_query: Mapping[str, list[float]], covariate: Mapping[str, float]) -> np.ndarray:
    """Over an epoch's sessions whose query has a covariate c: n, Σx, Σx², Σc, Σc², Σxc."""
    n = x = xx = sc = scc = sxc = 0.0
    for query, (count, total, square) in by_query.items():
        c = covariate.get(query)
        if c is not None:
            n += count
            x += total
            xx += square
            sc += count * c
            scc += count * c * c
            sxc += total * c
    return np.array((n, x, xx, sc, scc, sxc))


def covariate_sums(plain: np.ndarray, with_c: np.ndarray) -> CovariateSums:
    """An arm's :class:`CovariateSums` from its DCG sums (sessions, Σx, Σx²: every session) and those of
    its sessions with a covariate; the rest are the sessions without (counts rounded: a session taken
    back and re-added leaves float dust)."""
    n0 = np.round(plain[..., 0] - with_c[..., 0])
    some = n0 > 0
    x0 = np.where(some, plain[..., 1] - with_c[..., 1], 0.0)
    xx0 = np.where(some, np.maximum(plain[..., 2] - with_c[..., 2], 0.0), 0.0)
    return CovariateSums.of(*(with_c[..., i] for i in range(6)), np.maximum(n0, 0.0), x0, xx0)
