"""The shadow (paired) verdicts of one bucket: each shadow candidate's lists against the served lists of the
same sessions, judged per metric by :func:`.paired_paths.judge_paired`.

Input: the :class:`~monitor.core.stream.history.History`, whose groups ``bucket|R|shadow`` (variant
``shadow``) hold, per epoch, the paired sums (:data:`.paired.FIELDS`) of the scored sessions whose shadow
list of ranker R was covered. Every ranker with such a group is a candidate; its baseline is ``served``
(the list each session was actually shown), not a ranker. The period starts at the first epoch the group
appears in (there is no start event for a shadow: a producer starts sending the lists), and a look is taken
at each of its epochs. A ``canary_end`` or ``rollback`` event of R ends the comparison: only the group's
epochs after the latest such event's epoch count, and none left, no comparison (a shadow sent again later
starts afresh). Otherwise the comparison lasts while its epochs are in the history (``StreamConfig.history``).

The verdict is sticky like every comparison's (``CanaryConfig.sticky``). The checks of :mod:`.checks` do
not apply: both lists are of the same sessions, so there is no split whose ratio could be off and no arms
whose queries could differ. Each verdict carries them as not applicable (``Check.applicable`` False),
which is neither a pass nor a flag: exporters leave their series out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from monitor.core.canary.checks import Check
from monitor.core.canary.config import CanaryConfig
from monitor.core.canary.coverage import coverage_check
from monitor.core.canary.estimates import METRICS
from monitor.core.canary.paired_paths import judge_paired
from monitor.core.canary.verdict import Verdict
from monitor.core.stream.history import History
from monitor.core.stream.session import split_group
from monitor.core.stream.stats import Stats

SHADOW = "shadow"
"""The variant of a shadow candidate's groups, and the kind of its comparisons."""
SERVED = "served"
"""The baseline of a shadow comparison: the lists the sessions were served."""
NOT_APPLICABLE = (
    Check("sample_ratio", False, None, None, None, None, None,
          "not applicable: the shadow and served lists are of the same sessions, there is no traffic split",
          applicable=False),
    Check("covariate_balance", False, None, None, None, None, None,
          "not applicable: the shadow and served lists are of the same sessions, so of the same queries",
          applicable=False),
)


def shadow_verdicts(bucket: str, history: History, endings: Sequence[tuple[str, float]],
                    config: CanaryConfig) -> list[tuple[str, str, Verdict]]:
    """(candidate, metric, verdict) of every shadow candidate of ``bucket`` (module docstring), sorted by
    candidate then metric; ``endings``: (ranker, time) of the ``canary_end`` and ``rollback`` events."""
    found: dict[str, dict[int, Stats]] = {}
    served: dict[int, Stats] = {}  # the bucket's served sessions per epoch (what the coverage check reads)
    for index, groups in history.epochs.items():
        for group, stats in groups.items():
            group_bucket, ranker, variant = split_group(group)
            if group_bucket != bucket:
                continue
            if variant == SHADOW:
                found.setdefault(ranker, {}).setdefault(index, Stats()).add(stats)
            else:
                served.setdefault(index, Stats()).add(stats)
    latest = max((last for _, last in history.seen.values()), default=math.inf)
    out: list[tuple[str, str, Verdict]] = []
    for ranker, epochs in sorted(found.items()):
        ended = [history.epoch(ts) for name, ts in endings if name == ranker]
        if ended:
            epochs = {e: s for e, s in epochs.items() if e > max(ended)}
        if not epochs:
            continue
        looks = sorted(epochs)
        check = coverage_check({e: s for e, s in served.items() if looks[0] <= e}, epochs, looks,
                               history.width, config)
        for metric in METRICS:
            verdict = judge_paired(epochs, config, metric, bucket, looks, history.width, latest)
            out.append((ranker, metric, with_coverage(verdict, check)))
    return out


def with_coverage(verdict: Verdict, check: Check | None) -> Verdict:
    """``verdict`` with the shadow coverage check (:mod:`.coverage`): when it flagged, not trusted (a
    "pass" becomes "inconclusive", a regression stays, marked), the reason saying why."""
    if check is None:
        return replace(verdict, checks=NOT_APPLICABLE)
    checks = (*NOT_APPLICABLE, check)
    if not check.flagged:
        return replace(verdict, checks=checks)
    why = (f"shadow coverage: {check.detail}; the candidate is judged on part of the served sessions, "
           "not like the rest, so ")
    if verdict.verdict == "pass":
        return replace(verdict, verdict="inconclusive", checks=checks, trusted=False,
                       reason=f"{why}a pass cannot be trusted ({verdict.reason})")
    return replace(verdict, checks=checks, trusted=False,
                   reason=f"{verdict.reason}; {why}this verdict cannot be trusted as it stands")
