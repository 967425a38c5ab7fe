"""The sample-ratio check through comparisons(): a canary's declared share (``canary_start``, then
``canary_share`` steps) against the impressions the epochs count, the epoch of each change left out, and
what a mismatch does to the verdicts (docs/canary.md, "Checks")."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.core.canary import CanaryConfig, comparisons
from monitor.core.canary.checks import log_ratio_bf
from monitor.core.events import Deploy
from monitor.core.stream.history import History
from monitor.core.stream.stats import Stats

EPOCH = 900.0
CONFIG = CanaryConfig(min_sessions=50)


def scored(rng: np.random.Generator, n: int, scale: float) -> Stats:
    x = rng.gamma(2.0, scale, n)
    c, d = rng.integers(20, 40, n).astype(float), rng.integers(0, 6, n).astype(float)
    return {"sessions": float(n), "dcg": float(x.sum()), "dcg_sq": float((x * x).sum()),
            "concordant": float(c.sum()), "discordant": float(d.sum()), "grade_tied": 0.0,
            "pnr_pos_sq": float((c * c).sum()), "pnr_neg_sq": float((d * d).sum()),
            "pnr_pos_neg": float((c * d).sum()), "pnr_con_sq": float((c * c).sum()),
            "pnr_con_neg": float((c * d).sum())}


def history(shares: list[float], per_epoch: int = 4000, seed: int = 0, start: int = 10) -> History:
    """Epochs from ``start`` on: impressions split with the given share per epoch (exactly), and 200
    scored sessions per arm; before ``start`` the control alone."""
    rng = np.random.default_rng(seed)
    epochs: dict[int, dict[str, Stats]] = {}
    for index in range(start):
        epochs[index] = {"tail|a|control": {**scored(rng, 200, 1.0), "impressions": float(per_epoch)}}
    for offset, share in enumerate(shares):
        canary = round(per_epoch * share)
        epochs[start + offset] = {"tail|a|control": {**scored(rng, 200, 1.0), "impressions": float(per_epoch - canary)},
                                  "tail|b|canary": {**scored(rng, 200, 1.0), "impressions": float(canary)}}
    last = (start + len(shares)) * EPOCH
    seen = {("plain", "a"): (0.0, last), ("canary", "b"): (start * EPOCH, last)}
    return History(EPOCH, epochs, seen)


def check_of(found: list, metric: str = "dcg"):  # type: ignore[no-untyped-def]
    verdict = next(c.verdict for c in found if c.metric == metric)
    return next((c for c in verdict.checks if c.name == "sample_ratio"), None), verdict


def test_a_split_as_declared_is_checked_and_not_flagged() -> None:
    found = comparisons(history([0.05] * 40), [Deploy("canary_start", "b", 10 * EPOCH, "a", share=0.05)], CONFIG)
    check, verdict = check_of(found)
    assert check is not None and not check.flagged and verdict.trusted
    assert check.expected == 0.05 and abs(check.estimate) < 0.01  # type: ignore[arg-type]
    assert check_of(found, "pnr")[0] == check  # the pair's check, on both metrics


def test_a_canary_with_ten_percent_fewer_impressions_is_flagged_and_its_pass_withheld() -> None:
    lost = 0.05 * 0.9 / (0.05 * 0.9 + 0.95)
    found = comparisons(history([lost] * 40), [Deploy("canary_start", "b", 10 * EPOCH, "a", share=0.05)], CONFIG)
    check, verdict = check_of(found)
    assert check is not None and check.flagged and not verdict.trusted
    assert check.estimate is not None and -0.11 < check.estimate < -0.09
    assert verdict.verdict != "pass" and "sample ratio mismatch" in verdict.reason
    # the evidence is the beta-binomial Bayes factor of the counts after the start's epoch
    x = sum(round(4000 * lost) for _ in range(39))
    expected = float(log_ratio_bf(np.array(float(x)), np.array(39 * 4000.0 - x), 0.05, CONFIG.mixture_sd))
    assert check.evidence is not None and abs(check.evidence - expected) < 1e-6 * abs(expected)


def test_a_declared_ramp_is_not_a_mismatch_and_an_undeclared_one_is() -> None:
    shares = [0.05] * 12 + [0.5] * 28
    ramp = [Deploy("canary_start", "b", 10 * EPOCH, "a", share=0.05),
            Deploy("canary_share", "b", 22 * EPOCH + 300.0, share=0.5)]
    declared, _ = check_of(comparisons(history(shares), ramp, CONFIG))
    assert declared is not None and not declared.flagged
    undeclared, _ = check_of(comparisons(history(shares), ramp[:1], CONFIG))
    assert undeclared is not None and undeclared.flagged


def test_the_epoch_holding_a_change_is_left_out() -> None:
    # the start's epoch holds control impressions from before the start: a share far off the declared one
    shares = [0.01] + [0.05] * 39
    check, _ = check_of(comparisons(history(shares), [Deploy("canary_start", "b", 10 * EPOCH + 800.0, "a",
                                                             share=0.05)], CONFIG))
    assert check is not None and not check.flagged


def test_without_a_declared_share_the_share_of_the_first_hour_is_checked() -> None:
    """No share declared (issue 42): the canary's share is checked against its first hour's; a share that
    holds is not flagged, one that falls 10% from its 2nd hour is, with a note saying what it compared."""
    start = [Deploy("canary_start", "b", 10 * EPOCH, "a")]
    check, verdict = check_of(comparisons(history([0.2] * 12), start, CONFIG))
    assert check is not None and not check.flagged and not check.declared and verdict.trusted
    assert check.expected == pytest.approx(0.2) and check.detail.startswith("no share declared")
    check, verdict = check_of(comparisons(history([0.2] * 4 + [0.18] * 8), start, CONFIG))
    assert check is not None and check.flagged and not verdict.trusted
    assert check.estimate == pytest.approx(-0.1) and "a change declared" in check.detail
