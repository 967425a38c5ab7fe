"""Paired tests of two runs over the same queries: the t-test with its confidence interval, the
randomization (sign-flip) test, and Holm/Bonferroni adjustment across comparisons.

``monitor evaluate QRELS BASELINE RUN ...`` compares each run with the baseline per measure
(:mod:`monitor.core.run_comparison`); this module only sees numbers, one per query and run.

**A mean measure** (nDCG@10, AP, ...): d_i = candidate_i − baseline_i over the n paired queries.

* Paired t-test (Student 1908; ``scipy.stats.ttest_rel``): t = d̄ / (s_d / √n) with n − 1 degrees of
  freedom, two-sided p from :mod:`monitor.core.student_t`; the interval d̄ ± t_{1−α/2, n−1} · s_d / √n.
  Undefined (None, with the reason in ``note``) for no query, one query (no variance), or when every
  query's difference is the same non-zero number (zero variance: t would be infinite). When every
  difference is 0 (identical runs) there is nothing to see: t = 0, p = 1, interval [0, 0].
* Randomization test (Fisher's; Smucker, Allan and Carterette, CIKM 2007, for IR): under the null the
  two runs' values of a query are exchangeable, so each d_i's sign is flipped at random and p is the
  share of flips whose |Σ s_i d_i| is at least the observed |Σ d_i| (as large up to 1e-10 of Σ|d_i|, so
  the identity flip always counts however the sums are rounded). With 2ⁿ ≤ ``iterations`` every flip is
  enumerated and p is exact (count / 2ⁿ); otherwise ``iterations`` random flips, p = (count + 1) /
  (iterations + 1) (never 0: the observed flip counts once), deterministic given ``seed``. The flips
  depend only on (seed, n, iterations), so each measure's p-value is the same whatever else is asked for.

**A ratio measure** (PNR: Σ positive pairs / Σ discordant pairs over queries, never the mean of
per-query ratios, which are not additive and may be +Inf): R = Σ p_i / Σ q_i per run.

* The t-test and interval by the delta method (as the online canary's PNR, ``monitor/core/canary/``,
  and Deng et al., "Applying the delta method in metric analytics", KDD 2018): each query's pseudo-value
  u_i = (R_c − R_b) + (p_c,i − R_c q_c,i) / q̄_c − (p_b,i − R_b q_b,i) / q̄_b has mean R_c − R_b and, as
  its variance over n, the linearised variance of the difference; the t-test above runs on the u_i.
  When every q_i is the same number in both runs, u_i is the difference of the per-query ratios and the
  test is the plain paired t-test of those.
* The randomization test swaps each query's (p_i, q_i) between the runs (the sign flip of a mean) and
  compares |R_c' − R_b'| with the observed |R_c − R_b|; a swap leaving a run with no discordant pair
  (a ratio of +Inf) counts as at least as extreme.
* Undefined when either run's R is +Inf or undefined (no discordant pair, or no pair at all).

>>> test = paired_t([0.1, 0.2, 0.0, 0.3, 0.1])
>>> round(test.mean, 6), round(test.p, 4), [round(x, 4) for x in test.interval]
(0.14, 0.0516, [-0.0016, 0.2816])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from monitor.core import student_t

FloatArray = npt.NDArray[np.float64]
Correction = Literal["none", "holm", "bonferroni"]
CORRECTIONS: tuple[Correction, ...] = ("none", "holm", "bonferroni")

DEFAULT_ITERATIONS = 10_000
# Relative tolerance of "at least as extreme": sums of the same numbers in another order differ by
# rounding (about n · 1e-16 of Σ|d|), and the observed flip must count as extreme as itself.
_TIE_TOLERANCE = 1e-10
# Flip matrices are made a block of rows at a time, each of at most this many entries (8 MiB of floats).
_BLOCK = 1 << 20


@dataclass(frozen=True)
class TTest:
    """A paired t-test: the mean difference and, where defined, t, its two-sided p and the interval."""

    n: int
    mean: float | None
    t: float | None = None
    p: float | None = None
    interval: tuple[float, float] | None = None
    note: str | None = None  # why t, p and the interval are None


def _as_floats(values: Sequence[float] | FloatArray, name: str) -> FloatArray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} must be finite numbers")
    return array


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


def paired_t(differences: Sequence[float] | FloatArray, alpha: float = 0.05) -> TTest:
    """The paired t-test of per-query differences (candidate − baseline) and the 1 − ``alpha`` interval
    of their mean (the values of ``scipy.stats.ttest_rel(candidate, baseline)`` and its
    ``confidence_interval(1 - alpha)``)."""
    _check_alpha(alpha)
    d = _as_floats(differences, "differences")
    n = int(d.size)
    if n == 0:
        return TTest(0, None, note="no query to compare")
    mean = float(d.mean())
    if n == 1:
        return TTest(1, mean, note="one query: no variance, no t-test")
    if (d == d[0]).all():
        if d[0] == 0.0:
            return TTest(n, 0.0, 0.0, 1.0, (0.0, 0.0))
        return TTest(n, float(d[0]), note=f"every query's difference is {float(d[0]):+.6g}: zero "
                                          "variance, no t-test")
    spread = float(np.sqrt(((d - mean) ** 2).sum() / (n - 1)))
    error = spread / math.sqrt(n)
    t = mean / error
    half = student_t.quantile(1.0 - alpha / 2.0, n - 1) * error
    return TTest(n, mean, t, student_t.two_sided_p(t, n - 1), (mean - half, mean + half))


def ratio_pseudo_values(baseline: tuple[FloatArray, FloatArray], candidate: tuple[FloatArray, FloatArray]
                        ) -> FloatArray | None:
    """The delta method's per-query pseudo-values u_i of R_c − R_b (module docstring), from each run's
    (numerators, denominators); None when either run's ratio is not finite (its Σ q is 0)."""
    (pb, qb), (pc, qc) = baseline, candidate
    n = pb.size
    if not n or qb.sum() <= 0 or qc.sum() <= 0:
        return None
    rb, rc = pb.sum() / qb.sum(), pc.sum() / qc.sum()
    mean_qb, mean_qc = qb.sum() / n, qc.sum() / n
    pseudo: FloatArray = (rc - rb) + (pc - rc * qc) / mean_qc - (pb - rb * qb) / mean_qb
    return pseudo


def paired_ratio_t(baseline: tuple[Sequence[float] | FloatArray, Sequence[float] | FloatArray],
                   candidate: tuple[Sequence[float] | FloatArray, Sequence[float] | FloatArray],
                   alpha: float = 0.05) -> TTest:
    """The delta-method t-test of R_c − R_b for a ratio of sums (module docstring), each run given as
    (per-query numerators, per-query denominators) over the same queries in the same order."""
    b = (_as_floats(baseline[0], "numerators"), _as_floats(baseline[1], "denominators"))
    c = (_as_floats(candidate[0], "numerators"), _as_floats(candidate[1], "denominators"))
    if len({b[0].size, b[1].size, c[0].size, c[1].size}) != 1:
        raise ValueError("numerators and denominators of both runs must have one value per query each")
    if b[0].size == 0:
        return TTest(0, None, note="no query to compare")
    pseudo = ratio_pseudo_values(b, c)
    if pseudo is None:
        return TTest(b[0].size, None, note="a ratio is +Inf or undefined (no pair in its denominator)")
    difference = float(c[0].sum() / c[1].sum() - b[0].sum() / b[1].sum())
    test = paired_t(pseudo, alpha)
    if test.note is not None and test.n > 1 and difference != 0.0:
        return TTest(test.n, difference, note="every query adds the same to the difference: zero "
                                              "variance, no t-test")
    return TTest(test.n, difference, test.t, test.p, test.interval, test.note)


# ---- the randomization test ------------------------------------------------------------------------


def _swap_bytes(n: int, iterations: int, seed: int) -> tuple[bool, list[npt.NDArray[np.uint8]]]:
    """(exact, blocks of swap patterns): bit k of byte j of a row says whether query 8j + k is swapped.
    All 2ⁿ patterns when 2ⁿ ≤ ``iterations``, else ``iterations`` random ones from ``seed``, in blocks of
    at most :data:`_BLOCK` bytes."""
    width = (n + 7) // 8
    if n < 63 and (1 << n) <= iterations:
        patterns = np.arange(1 << n, dtype=np.int64)[:, None] >> (8 * np.arange(width, dtype=np.int64))
        return True, [(patterns & 0xFF).astype(np.uint8)]
    rng = np.random.default_rng(seed)
    rows = max(1, _BLOCK // width)
    blocks = []
    for start in range(0, iterations, rows):
        count = min(rows, iterations - start)
        blocks.append(np.frombuffer(rng.bytes(count * width), dtype=np.uint8).reshape(count, width))
    return False, blocks


_BITS = ((np.arange(256)[:, None] >> np.arange(8)) & 1).astype(np.float64)  # bit k of each byte value


def _byte_table(values: FloatArray) -> FloatArray:
    """table[j, b]: the sum of ``values[8j + k]`` over the bits k set in byte b, so that a row of swap
    bytes sums the swapped queries' values with one look-up per eight queries."""
    width = (values.size + 7) // 8
    padded = np.zeros(width * 8)
    padded[:values.size] = values
    table: FloatArray = (_BITS @ padded.reshape(width, 8).T).T
    return table


def _swapped_sums(table: FloatArray, block: npt.NDArray[np.uint8]) -> FloatArray:
    """Σ of the swapped queries' values for each row of ``block``."""
    index = block + (256 * np.arange(table.shape[0], dtype=np.int64))
    sums: FloatArray = table.ravel()[index].sum(axis=1)
    return sums


def _randomization_p(n: int, statistic: Callable[[npt.NDArray[np.uint8]], FloatArray], observed: float,
                     scale: float, iterations: int, seed: int) -> float:
    """p of the swap test: ``statistic`` maps a block of swap patterns to |statistic| per row; ``scale``
    sets the tolerance of a tie with ``observed``."""
    if iterations < 1:
        raise ValueError(f"iterations must be at least 1, got {iterations}")
    exact, blocks = _swap_bytes(n, iterations, seed)
    threshold = observed - _TIE_TOLERANCE * scale
    extreme = 0
    total = 0
    for block in blocks:
        values = statistic(block)
        extreme += int(np.count_nonzero(~(values < threshold)))  # NaN and +Inf count as extreme
        total += block.shape[0]
    return extreme / total if exact else (extreme + 1) / (total + 1)


def randomization_p(differences: Sequence[float] | FloatArray, iterations: int = DEFAULT_ITERATIONS,
                    seed: int = 0) -> float | None:
    """The two-sided sign-flip randomization p-value of the mean of per-query differences (module
    docstring); None without a query."""
    d = _as_floats(differences, "differences")
    if d.size == 0:
        return None
    total = float(d.sum())
    table = _byte_table(d)

    def flipped(swaps: npt.NDArray[np.uint8]) -> FloatArray:
        result: FloatArray = np.abs(total - 2.0 * _swapped_sums(table, swaps))  # Σ (1 − 2 w_i) d_i
        return result

    return _randomization_p(int(d.size), flipped, abs(total), float(np.abs(d).sum()), iterations, seed)


def ratio_randomization_p(baseline: tuple[Sequence[float] | FloatArray, Sequence[float] | FloatArray],
                          candidate: tuple[Sequence[float] | FloatArray, Sequence[float] | FloatArray],
                          iterations: int = DEFAULT_ITERATIONS, seed: int = 0) -> float | None:
    """The randomization p-value of R_c − R_b for a ratio of sums, swapping each query's (numerator,
    denominator) between the runs; None without a query or when either observed ratio is not finite."""
    pb, qb = (_as_floats(a, "baseline") for a in baseline)
    pc, qc = (_as_floats(a, "candidate") for a in candidate)
    if pb.size == 0 or qb.sum() <= 0 or qc.sum() <= 0:
        return None
    observed = abs(pc.sum() / qc.sum() - pb.sum() / qb.sum())
    tables = _byte_table(pc - pb), _byte_table(qc - qb)
    sums = (pb.sum(), qb.sum(), pc.sum(), qc.sum())

    def swapped(swaps: npt.NDArray[np.uint8]) -> FloatArray:
        moved_p, moved_q = _swapped_sums(tables[0], swaps), _swapped_sums(tables[1], swaps)
        with np.errstate(divide="ignore", invalid="ignore"):
            result: FloatArray = np.abs((sums[2] - moved_p) / (sums[3] - moved_q)
                                        - (sums[0] + moved_p) / (sums[1] + moved_q))
        return result

    scale = max(observed, pb.sum() / qb.sum(), pc.sum() / qc.sum())
    return _randomization_p(int(pb.size), swapped, observed, scale, iterations, seed)


# ---- adjustment for several comparisons -----------------------------------------------------------


def adjust(p_values: Sequence[float | None], correction: Correction) -> list[float | None]:
    """p-values adjusted for the comparisons made together (those not None): Bonferroni's m·p, or
    Holm's step-down max_{j ≤ i} (m − j + 1) · p_(j) over the ascending order (Holm 1979), capped at 1.

    >>> [round(p, 6) for p in adjust([0.01, 0.04, 0.03], "holm")]
    [0.03, 0.06, 0.06]
    >>> adjust([0.25, None, 0.5], "bonferroni")
    [0.5, None, 1.0]
    """
    if correction not in CORRECTIONS:
        raise ValueError(f"correction: {correction!r} is not one of {', '.join(CORRECTIONS)}")
    defined = [(p, i) for i, p in enumerate(p_values) if p is not None]
    m = len(defined)
    adjusted: list[float | None] = list(p_values)
    if correction == "bonferroni":
        for p, i in defined:
            adjusted[i] = min(1.0, m * p)
    elif correction == "holm":
        running = 0.0
        for rank, (p, i) in enumerate(sorted(defined)):
            running = max(running, min(1.0, (m - rank) * p))
            adjusted[i] = running
    return adjusted
