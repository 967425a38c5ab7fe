"""The shadow coverage check (issue 42): a shadow candidate whose lists miss the hardest requests, or
reach fewer of them as time goes on, is flagged and never passes; one that reaches every request, or a
random part of them, is not (monitor/core/canary/coverage.py, through shadow_verdicts)."""

from __future__ import annotations

import numpy as np

from monitor.core.canary import CanaryConfig
from monitor.core.canary.paired import paired_stats
from monitor.core.canary.shadow import shadow_verdicts
from monitor.core.stream.history import History
from monitor.core.stream.shadow import sent_fields
from monitor.core.stream.stats import Stats

EPOCH = 900.0
CONFIG = CanaryConfig(min_sessions=100)


def history(reach: np.ndarray | float, epochs: int = 32, per_epoch: int = 300, seed: int = 0,
            hard: float = 0.0) -> History:
    """Sessions whose served DCG is drawn per session (their query's difficulty), each carrying the
    candidate's list with probability ``reach`` (per epoch, or one), or, with ``hard``, not carrying it
    for the hardest ``hard`` share of the sessions; the candidate's list equal to the served one in value."""
    rng = np.random.default_rng(seed)
    out: dict[int, dict[str, Stats]] = {}
    shares = np.broadcast_to(np.asarray(reach, dtype=np.float64), (epochs,))
    for e in range(epochs):
        difficulty = rng.normal(0.0, 1.0, per_epoch)
        x = np.maximum(rng.gamma(2.0, 1.0, per_epoch) * np.exp(-0.6 * difficulty), 0.0)
        carried = rng.random(per_epoch) < shares[e]
        if hard:
            carried &= difficulty < np.quantile(difficulty, 1.0 - hard)
        served = Stats({"sessions": float(per_epoch), "dcg": float(x.sum()), "dcg_sq": float((x * x).sum())})
        shadow = Stats()
        for value, sent in zip(x.tolist(), carried.tolist(), strict=True):
            if sent:
                shadow.add(sent_fields(value))
                shadow.add(paired_stats(value, value * rng.uniform(0.97, 1.03), (5.0, 1.0), (5.0, 1.0)))
        out[e] = {"tail|a|control": served, "tail|c|shadow": shadow}
    seen = {("plain", "a"): (0.0, epochs * EPOCH), ("shadow", "c"): (0.0, epochs * EPOCH)}
    return History(EPOCH, out, seen)


def coverage(found: list) -> tuple:  # type: ignore[type-arg]
    checks = [next(c for c in v.checks if c.name == "shadow_coverage") for _, _, v in found]
    return checks[0], [v for _, _, v in found]


def test_a_candidate_on_every_request_is_never_flagged_and_passes() -> None:
    check, verdicts = coverage(shadow_verdicts("tail", history(1.0), [], CONFIG))
    assert check.applicable and not check.flagged and check.estimate == 1.0
    assert verdicts[0].verdict == "pass" and all(v.trusted for v in verdicts)  # (DCG; PNR's lists identical)


def test_a_candidate_missing_on_the_hardest_forty_percent_is_flagged_and_never_passes() -> None:
    check, verdicts = coverage(shadow_verdicts("tail", history(1.0, hard=0.4), [], CONFIG))
    assert check.flagged and 0.55 < check.estimate < 0.65
    assert "differ from the others" in check.detail
    assert all(v.verdict != "pass" and not v.trusted for v in verdicts)
    assert all("shadow coverage" in v.reason for v in verdicts)


def test_a_reach_that_falls_is_flagged_and_one_random_and_steady_is_not() -> None:
    fell = np.r_[np.full(8, 0.9), np.full(24, 0.6)]
    check, _ = coverage(shadow_verdicts("tail", history(fell, seed=2), [], CONFIG))
    assert check.flagged and "fell since its first hour" in check.detail
    flagged = sum(coverage(shadow_verdicts("tail", history(0.7, seed=s), [], CONFIG))[0].flagged
                  for s in range(40))
    assert flagged <= 3  # random 70% of the requests: at most 2.5% of comparisons flagged, 40 tried
