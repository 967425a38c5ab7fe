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

CovariateEpochs = dict[int, np.ndarray]  # epoch index -> one arm's six sums of :func:`with_covariate`


@dataclass(frozen=True)
class Adjustment:
    """What the adjustment for query difficulty of one pair reads: per epoch, each arm's sums over its
    sessions whose query has a covariate (:func:`with_covariate`), and each query's covariate
    (:func:`covariates`)."""

    baseline: CovariateEpochs
    candidate: CovariateEpochs
    covariate: Mapping[str, float]


Wanted = Callable[[str, str], bool]


def adjustment(history: History, bucket: str, arms: tuple[Wanted, Wanted],
               periods: tuple[tuple[int | None, int | None], tuple[int | None, int | None]], start: int,
               config: CanaryConfig) -> Adjustment:
    """The pair's :class:`Adjustment`: ``arms`` pick each arm's (ranker, variant) rows, ``periods`` their
    (first, last) epochs, ``start`` the comparison's first epoch (the covariates' window ends before it)."""
    key, covariate = covariates_of(history, start, config)
    return Adjustment(covariate_epochs(history, bucket, arms[0], *periods[0], covariate, key),
                      covariate_epochs(history, bucket, arms[1], *periods[1], covariate, key), covariate)


def covariate_epochs(history: History, bucket: str, wanted: Wanted, first: int | None, last: int | None,
                     covariate: Mapping[str, float], key: object) -> CovariateEpochs:
    """One arm's :func:`with_covariate` sums per epoch (``first`` … ``last``; None: unbounded), each epoch's
    summed over the (ranker, variant) rows ``wanted`` picks (the sums are linear in the rows), remembered in
    the history's memo under ``"covariate_sums"`` by epoch, then (``key``: the covariates', bucket, rows):
    an evaluation's comparisons read many of the same."""
    cache = history.memo.setdefault("covariate_sums", {})
    out: CovariateEpochs = {}
    for index in history.query_rows.get(bucket, {}):
        if (first is not None and index < first) or (last is not None and index > last):
            continue
        groups = grouped_rows(history, bucket, index)
        picked = frozenset(g for g in groups if wanted(*g))
        if not picked:
            continue
        known = cache.setdefault(index, {})
        found = known.get((key, bucket, picked))
        if found is None:
            found = np.zeros(6)
            for group in sorted(picked):
                found += with_covariate(groups[group], covariate)
            known[(key, bucket, picked)] = found
        out[index] = found
    return out


def grouped_rows(history: History, bucket: str, index: int) -> dict[tuple[str, str], dict[str, list[float]]]:
    """One epoch's per-query rows of ``bucket`` by (ranker, variant): query key → [n, Σx, Σx²], remembered
    in the history's memo (under ``"rows"``, by (bucket, epoch))."""
    cache = history.memo.setdefault("rows", {})
    found: dict[tuple[str, str], dict[str, list[float]]] | None = cache.get((bucket, index))
    if found is None:
        found = {}
        for ranker, variant, query, n, x, xx in history.query_rows[bucket][index]:
            queries = found.setdefault((ranker, variant), {})
            total = queries.get(query)
            if total is None:
                queries[query] = [n, x, xx]
            else:
                total[0] += n
                total[1] += x
                total[2] += xx
        cache[(bucket, index)] = found
    return found


def covariates(history: History, start: int, config: CanaryConfig) -> dict[str, float]:
    """Query key → its mean DCG@k over the scored sessions (any bucket, ranker and arm) of the
    ``covariate_window`` before epoch ``start`` (the epochs ``start − window / width`` … ``start − 1``), for
    the queries with at least ``covariate_min_sessions`` of them: fixed before the comparison starts."""
    return covariates_of(history, start, config)[1]


def covariates_of(history: History, start: int, config: CanaryConfig) -> tuple[object, dict[str, float]]:
    """:func:`covariates` and the key they are remembered by in the history's memo (``"covariates"``)."""
    span = max(1, round(config.covariate_window / history.width))
    key = (start, span, config.covariate_min_sessions)
    cache = history.memo.setdefault("covariates", {})
    if key not in cache:  # every bucket's comparison of one period reads the same covariates
        cache[key] = _covariates(history, start, span, config.covariate_min_sessions)
    found: dict[str, float] = cache[key]
    return key, found


def _covariates(history: History, start: int, span: int, least: int) -> dict[str, float]:
    sums: dict[str, list[float]] = {}
    for index in range(start - span, start):
        for query, (n, x) in _query_sums(history, index).items():
            total = sums.get(query)
            if total is None:
                sums[query] = [n, x]
            else:
                total[0] += n
                total[1] += x
    return {query: x / n for query, (n, x) in sums.items() if round(n) >= least and round(n) > 0}


def _query_sums(history: History, index: int) -> dict[str, tuple[float, float]]:
    """Epoch ``index``'s sessions and Σ DCG per query over every bucket, ranker and arm (memo:
    ``"query_sums"``, by epoch)."""
    cache = history.memo.setdefault("query_sums", {})
    found: dict[str, tuple[float, float]] | None = cache.get(index)
    if found is None:
        sums: dict[str, list[float]] = {}
        for by_epoch in history.query_rows.values():
            for _, _, query, n, x, _ in by_epoch.get(index, ()):
                total = sums.get(query)
                if total is None:
                    sums[query] = [n, x]
                else:
                    total[0] += n
                    total[1] += x
        found = {query: (n, x) for query, (n, x) in sums.items()}
        cache[index] = found
    return found


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
