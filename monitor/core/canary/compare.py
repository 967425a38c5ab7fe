"""The canary verdict: candidate against baseline on one metric, from each arm's cumulative Stats.

The effect is the log ratio θ = log m_candidate − log m_baseline of the arms' mean DCG@k or PNR
(:mod:`.estimates`), estimated with variance v = Var(log m_c) + Var(log m_b) (independent arms). Its
(1 − α) normal-mixture confidence sequence θ̂ ± h (:mod:`.sequential`) holds at every session at once, so
the verdict may be recomputed after every session without inflating the error rate. Reported on the
relative scale: estimate e^θ̂ − 1, interval [e^(θ̂−h) − 1, e^(θ̂+h) − 1]; evidence is log Λ(θ = 0), the log
mixture likelihood ratio against "no change" (≥ log(1/α) exactly when 0 is outside the sequence).

Decision, with d = ``min_relative_drop``:

* **inconclusive** if either arm has fewer than ``min_sessions`` sessions, or the interval is undefined;
* **regression** if the whole interval is below 0 (upper < 0) and the estimated drop is at least d
  (estimate ≤ −d);
* **pass** if the interval rules out a drop of d (lower > −d): no change, an improvement, or a drop
  proven smaller than d;
* **inconclusive** otherwise (the interval still holds a drop of d, and either no change or a drop
  estimated smaller than d).

Because the arms' state is field sums, two partial Stats merge by field-wise addition (Redis hashes,
per-worker partials) and the verdict of the merge is the verdict of all the sessions.

>>> base = {"sessions": 400, "dcg": 800.0, "dcg_sq": 2000.0}
>>> cand = {"sessions": 400, "dcg": 560.0, "dcg_sq": 1100.0}
>>> v = compare(base, cand, "dcg", CanaryConfig())
>>> v.verdict, round(v.estimate, 2)
('regression', -0.3)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from monitor.core.canary.config import CanaryConfig
from monitor.core.canary.estimates import LogStatistic, log_statistic
from monitor.core.canary.sequential import half_width, log_mixture_ratio

VerdictName = Literal["pass", "regression", "inconclusive"]
VERDICTS: tuple[VerdictName, ...] = ("pass", "regression", "inconclusive")
METRIC_NAMES = {"dcg": "DCG", "pnr": "PNR"}


@dataclass(frozen=True)
class Verdict:
    """``estimate``: relative change of candidate vs baseline (−0.10 = 10% lower); ``lower``/``upper``:
    its always-valid (1 − α) confidence sequence; ``evidence``: log mixture likelihood ratio against no
    change. Each is None when undefined (no sessions, a baseline of 0, PNR = +Inf, no variance)."""

    verdict: VerdictName
    estimate: float | None
    lower: float | None
    upper: float | None
    evidence: float | None
    n_baseline: int
    n_candidate: int
    reason: str
    changes: int = 0
    changed_at: float | None = None
    resets: int = 0
    adjusted: float | None = None  # adjusted for query difficulty: the share of sessions with a covariate


def _percent(x: float) -> str:
    return f"{x:.1%}"


def compare(baseline: Mapping[str, float], candidate: Mapping[str, float], metric: str,
            config: CanaryConfig) -> Verdict:
    """The verdict on ``metric`` ("dcg" or "pnr") of candidate vs baseline (module docstring)."""
    return decide(log_statistic(baseline, metric), log_statistic(candidate, metric), config)


def decide(base: LogStatistic, cand: LogStatistic, config: CanaryConfig) -> Verdict:
    """The verdict from each arm's log statistic and its variance (module docstring)."""
    counts = (base.n, cand.n)
    short = base.n < config.min_sessions or cand.n < config.min_sessions
    too_few = (f"too few sessions: baseline {base.n}, candidate {cand.n} "
               f"(at least {config.min_sessions} per arm)")
    if base.value is None or cand.value is None:
        problem = f"baseline: {base.problem}" if base.value is None else f"candidate: {cand.problem}"
        return Verdict("inconclusive", None, None, None, None, *counts, too_few if short else problem)
    theta = cand.value - base.value
    estimate = math.expm1(theta)
    variance = None if base.variance is None or cand.variance is None else base.variance + cand.variance
    if variance is None or variance <= 0.0:
        if base.variance is None:
            problem = f"baseline: {base.problem}"
        elif cand.variance is None:
            problem = f"candidate: {cand.problem}"
        else:
            problem = "no variation between sessions"
        return Verdict("inconclusive", estimate, None, None, None, *counts, too_few if short else problem)
    h = half_width(variance, config.mixture_sd, config.alpha)
    lower, upper = math.expm1(theta - h), math.expm1(theta + h)
    evidence = log_mixture_ratio(theta, variance, config.mixture_sd)
    values = (estimate, lower, upper, evidence, *counts)
    if short:
        return Verdict("inconclusive", *values, too_few)
    if upper < 0.0 and estimate <= -config.min_relative_drop:
        name: VerdictName = "regression"
    elif lower > -config.min_relative_drop:
        name = "pass"
    else:
        name = "inconclusive"
    return Verdict(name, *values, reason(name, estimate, upper, config))


def reason(verdict: VerdictName, estimate: float, upper: float, config: CanaryConfig, held: str = "") -> str:
    """Why a decided (enough sessions, an interval) verdict is what it is; ``held``: what the interval
    is, when it is not the current look's alone."""
    drop = config.min_relative_drop
    sequence = f"the {(1 - config.alpha) * 100:g}% confidence sequence{held}"
    if verdict == "regression":
        return f"{_percent(-estimate)} lower; {sequence} excludes no change"
    if verdict == "pass":
        return f"{sequence} rules out a drop of {_percent(drop)} or more"
    if upper < 0.0:
        return (f"lower, but the estimated drop {_percent(-estimate)} is below the minimum of "
                f"interest {_percent(drop)}, and a drop of {_percent(drop)} is not yet ruled out")
    return f"{sequence} still holds both no change and a drop of {_percent(drop)}"
