"""One verdict per compared pair over all its metrics: what a release manager reads first.

Per (bucket, kind, baseline, candidate): **regression** if any metric's verdict is a regression, **pass**
only if every metric passes, **inconclusive** otherwise. A regression on either metric is reason enough
to stop a release (they catch different failures: DCG what the user saw at the top, PNR the order of
everything graded), and a pass needs both. ``trusted`` is False when a metric's verdict is (a
sample-ratio mismatch); ``reason`` names the metrics that decided.

**One α for the pair.** A false regression of the pair is a false regression of either metric, so its
rate is bounded by the sum of theirs: each metric decides a regression at α / 2
(``CanaryConfig.regression_alpha``, the upper end of its interval), and the pair's false regressions stay
below α. A false pass of the pair needs *both* metrics to pass falsely, at most the rate of either (an
intersection-union test), so each metric's pass keeps α (the lower end at α). The same holds for the
regression alerts (one per metric): any alert for a pair that did not regress is raised in at most α of
comparisons.

>>> from monitor.core.canary.verdict import Verdict
>>> from monitor.core.canary.pairing import Comparison
>>> v = lambda name: Verdict(name, None, None, None, None, 500, 500, "")
>>> [o.verdict for o in overall([Comparison("tail", "dcg", "canary", "a", "b", v("regression")),
...                              Comparison("tail", "pnr", "canary", "a", "b", v("pass"))])]
['regression']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from monitor.core.canary.pairing import Comparison
from monitor.core.canary.verdict import VerdictName

TITLES = {"dcg": "DCG", "pnr": "PNR"}
CHECK_TITLES = {"sample_ratio": "sample ratio mismatch", "shadow_coverage": "shadow coverage"}
"""The checks that make a pair's verdicts untrusted when flagged, in a reason's words."""


@dataclass(frozen=True)
class Overall:
    """The verdict of one pair over its metrics (module docstring)."""

    bucket: str
    kind: str
    baseline: str
    candidate: str
    verdict: VerdictName
    reason: str
    trusted: bool
    n_baseline: int
    n_candidate: int


def overall(comparisons: Sequence[Comparison]) -> list[Overall]:
    """The overall verdict of every pair in ``comparisons``, in their order (module docstring)."""
    pairs: dict[tuple[str, str, str, str], list[Comparison]] = {}
    for c in comparisons:
        pairs.setdefault((c.bucket, c.kind, c.baseline, c.candidate), []).append(c)
    out = []
    for (bucket, kind, baseline, candidate), found in pairs.items():
        names = {c.metric: c.verdict.verdict for c in found}
        regressed = [TITLES.get(m, m) for m, name in names.items() if name == "regression"]
        waiting = [TITLES.get(m, m) for m, name in names.items() if name == "inconclusive"]
        verdict: VerdictName
        if regressed:
            verdict, reason = "regression", f"{' and '.join(regressed)} regressed"
        elif waiting:
            verdict, reason = "inconclusive", f"{' and '.join(waiting)} not decided yet"
        else:
            verdict, reason = "pass", f"{' and '.join(TITLES.get(m, m) for m in names)} passed"
        trusted = all(c.verdict.trusted for c in found)
        if not trusted:
            flagged = sorted({CHECK_TITLES.get(k.name, k.name) for c in found for k in c.verdict.checks
                              if k.flagged and k.name in CHECK_TITLES})
            reason += f"; not trusted: {' and '.join(flagged) or 'a check failed'}"
        sessions = (max(c.verdict.n_baseline for c in found), max(c.verdict.n_candidate for c in found))
        out.append(Overall(bucket, kind, baseline, candidate, verdict, reason, trusted, *sessions))
    return out
