"""A canary verdict as a value: pass, regression or inconclusive, with the relative change, its
always-valid confidence sequence, the evidence, the sessions per arm and why; and the words of its reason.

The rules that decide it are in :mod:`.verdict_paths` (one look, or every look of a comparison at once) and
:mod:`.judging` (which comparison each metric runs); docs/canary.md states them.

>>> Verdict("inconclusive", None, None, None, None, 10, 12, "too few sessions").trusted
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from monitor.core.canary.checks import Check
from monitor.core.canary.config import CanaryConfig

VerdictName = Literal["pass", "regression", "inconclusive"]
VERDICTS: tuple[VerdictName, ...] = ("pass", "regression", "inconclusive")
METRIC_NAMES = {"dcg": "DCG", "pnr": "PNR"}


@dataclass(frozen=True)
class Verdict:
    """``estimate``: relative change of candidate vs baseline (−0.10 = 10% lower); ``lower``/``upper``:
    its always-valid confidence sequence, the lower end at α (what a pass reads), the upper at α / 2 (what
    a regression reads; it contains the (1 − α) sequence); ``evidence``: log mixture likelihood ratio
    against no change. Each is None when undefined (no sessions, a baseline of 0, PNR = +Inf, no
    variance)."""

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
    checks: tuple[Check, ...] = ()  # sample ratio, covariate balance (:mod:`.checks`), where they ran
    trusted: bool = True  # False: a check failed that this verdict cannot correct (a sample-ratio mismatch)


def _percent(x: float) -> str:
    return f"{x:.1%}"


def reason(verdict: VerdictName, estimate: float, upper: float, config: CanaryConfig, held: str = "",
           lower: float = math.nan) -> str:
    """Why a decided (enough sessions, an interval) verdict is what it is; ``held``: what the interval
    is, when it is not the current look's alone. A pass whose ``lower`` end no longer rules out the drop
    is one held from before a reset (:func:`.verdict_paths.sticky_path`); NaN (not known) reads as the
    plain pass."""
    drop = config.min_relative_drop
    sequence = f"the {(1 - config.alpha) * 100:g}% confidence sequence{held}"
    if verdict == "regression":
        return f"{_percent(-estimate)} lower; {sequence} excludes no change"
    if verdict == "pass" and not lower <= -drop:
        return f"{sequence} rules out a drop of {_percent(drop)} or more"
    if verdict == "pass":
        return (f"a drop of {_percent(drop)} or more was ruled out at an earlier look, and a pass is kept "
                f"unless a regression is proven; {sequence} no longer rules it out")
    if upper < 0.0:
        return (f"lower, but the estimated drop {_percent(-estimate)} is below the minimum of "
                f"interest {_percent(drop)}, and a drop of {_percent(drop)} is not yet ruled out")
    return f"{sequence} still holds both no change and a drop of {_percent(drop)}"
