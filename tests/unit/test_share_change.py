"""A share's change since the comparison's first hour (issue 42): the universal-inference e-value of
monitor/core/canary/share_change.py, valid at every look whatever the share, and how fast it sees a change."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.core.canary.share_change import log_evidence


@pytest.mark.parametrize("p", [0.05, 0.5, 0.9])
def test_without_a_change_it_crosses_one_over_alpha_in_at_most_alpha_of_the_runs(p: float) -> None:
    """2,000 streams of 48 looks of 3,000 trials at a constant share: the e-value crosses 1/α (α = 10%, so
    that a rate is measurable) at some look in ≤ α of them (three Monte Carlo standard errors of slack)."""
    rng = np.random.default_rng(int(p * 100))
    alpha, runs = 0.1, 2000
    n = rng.integers(2000, 4000, (runs, 48)).astype(np.float64)
    x = rng.binomial(n.astype(np.int64), p).astype(np.float64)
    crossed = sum(bool((log_evidence(x[r], n[r], 4) >= math.log(1 / alpha)).any()) for r in range(runs))
    assert crossed / runs <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / runs)


def test_a_ten_percent_fall_is_seen_and_a_rise_is_not_a_fall() -> None:
    rng = np.random.default_rng(3)
    n = np.full(48, 5000.0)
    fell = np.r_[rng.binomial(5000, 0.5, 8), rng.binomial(5000, 0.45, 40)].astype(np.float64)
    rose = np.r_[rng.binomial(5000, 0.5, 8), rng.binomial(5000, 0.55, 40)].astype(np.float64)
    bar = math.log(40)
    assert (log_evidence(fell, n, 4, "both") >= bar).any() and (log_evidence(fell, n, 4, "below") >= bar).any()
    assert (log_evidence(rose, n, 4, "both") >= bar).any() and not (log_evidence(rose, n, 4, "below") >= bar).any()


def test_shares_at_zero_or_one_and_bad_counts() -> None:
    assert not (log_evidence(np.full(10, 100.0), np.full(10, 100.0), 4) > 0).any()  # everything carried
    assert not (log_evidence(np.zeros(10), np.full(10, 100.0), 4) > 0).any()
    with pytest.raises(ValueError, match="0 ≤ x ≤ n"):
        log_evidence(np.full(3, 5.0), np.full(3, 4.0), 1)
    with pytest.raises(ValueError, match="side"):
        log_evidence(np.ones(3), np.ones(3), 1, "above")
