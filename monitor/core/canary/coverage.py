"""The shadow coverage check (issue 42): do a shadow candidate's lists reach the served sessions they are
judged on, and are the sessions they reach like the others?

A paired comparison judges a candidate on the sessions whose request it sent a list for. A candidate that
times out on the hardest requests is judged on the easy ones, where it may look as good as the served
ranker while it is not; nothing in the paired numbers says so. The stream adds, for every scored session
that carried a candidate's list (paired or not), ``sent_n`` = 1 and its served DCG@k ``sent_x``,
``sent_xx`` (:func:`monitor.core.stream.shadow.sent_fields`) to the candidate's group; against the
bucket's served sessions of the same epochs (``sessions``, ``dcg``, ``dcg_sq``), along the looks:

* **reach**: the share of the served sessions carrying the candidate's list, and whether it **fell**
  since the comparison's first hour (:func:`.share_change.log_evidence`, one-sided, at ``check_alpha`` / 2);
* **balance**: the served DCG@k of the sessions with the candidate's list against those without (the log
  ratio of the means with its normal-mixture confidence sequence at ``check_alpha`` / 2, as the
  covariate-balance check, once both have ``min_sessions``): lists missing from a kind of request make them
  differ.

Either one flags the check, and a flag holds (both tests are sequential). The check's ``estimate`` is the
share reached, ``expected`` the share of the first hour, ``evidence`` the larger log evidence of the two.
A candidate whose lists reach every served session has nothing to compare and is never flagged. A flagged
comparison is not trusted: no pass (:mod:`.shadow`), an alert (``SearchRelevanceShadowCoverage``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from monitor.core.canary.checks import Check
from monitor.core.canary.config import CanaryConfig
from monitor.core.canary.sequential import half_widths, log_ratios
from monitor.core.canary.share_change import log_evidence
from monitor.core.canary.verdict_paths import EffectPath, log_mean_path
from monitor.core.stream.shadow import SENT_FIELDS

NAME = "shadow_coverage"
SERVED_FIELDS = ("sessions", "dcg", "dcg_sq")


def coverage_check(served: Mapping[int, Mapping[str, float]], sent: Mapping[int, Mapping[str, float]],
                   looks: Sequence[int], width: float, config: CanaryConfig) -> Check | None:
    """The check along ``looks`` (epoch indices, sorted) from the bucket's served sums per epoch and the
    candidate's ``sent`` sums per epoch (module docstring); None before any look has a served session."""
    if not looks:
        return None
    indices = list(looks)
    per_look = np.zeros((len(indices), 6))
    for rows, fields, offset in ((served, SERVED_FIELDS, 0), (sent, SENT_FIELDS, 3)):
        for e, stats in rows.items():
            at = int(np.searchsorted(indices, e))
            if at < len(indices):
                per_look[at, offset:offset + 3] += [stats.get(f, 0.0) for f in fields]
    n_all = np.maximum(np.round(per_look[:, 0]), 0.0)
    n_sent = np.clip(np.round(per_look[:, 3]), 0.0, n_all)
    if n_all.sum() <= 0:
        return None
    reference = sum(1 for e in indices if (e - indices[0]) * width < 3600.0)
    each = config.check_alpha / 2
    reach = log_evidence(n_sent, n_all, reference, "below")
    fell = bool((reach >= math.log(1.0 / each)).any())
    totals = np.cumsum(per_look, axis=0)
    with_ = log_mean_path(totals[:, 3], totals[:, 4], totals[:, 5])
    without = log_mean_path(np.round(totals[:, 0] - totals[:, 3]), totals[:, 1] - totals[:, 4],
                            np.maximum(totals[:, 2] - totals[:, 5], 0.0))
    effect = EffectPath.of(without, with_)
    theta, v = np.asarray(effect.theta), np.asarray(effect.variance)
    h = half_widths(v, config.mixture, each)
    enough = (with_.n >= config.min_sessions) & (without.n >= config.min_sessions) & np.isfinite(theta) & (
        np.isfinite(h))
    with np.errstate(invalid="ignore"):
        off = enough & ((theta - h > 0.0) | (theta + h < 0.0))
        evidence = log_ratios(np.where(np.isfinite(theta), theta, 0.0), v, config.mixture)
    flagged = fell or bool(off.any())
    total, carried = float(n_all.sum()), float(n_sent.sum())
    share = carried / total
    ref_total = float(n_all[:reference].sum())
    expected = float(n_sent[:reference].sum()) / ref_total if ref_total > 0 else None
    last = int(np.flatnonzero(np.isfinite(theta))[-1]) if np.isfinite(theta).any() else -1
    detail = (f"the candidate's lists reach {share:.1%} of {total:,.0f} served sessions"
              + (f" ({expected:.1%} in its first hour)" if expected is not None and reference < len(indices)
                 else ""))
    if last >= 0:
        interval = "" if not np.isfinite(h[last]) else (
            f" [{np.expm1(theta[last] - h[last]):+.1%}, {np.expm1(theta[last] + h[last]):+.1%}]")
        detail += (f"; the served DCG@k of the sessions it reaches is {np.expm1(theta[last]):+.1%}{interval} "
                   f"against the {total - carried:,.0f} it does not")
    if fell:
        detail += "; its reach fell since its first hour"
    if bool(off.any()):
        detail += f"; those sessions differ from the others (from look {int(np.flatnonzero(off)[0]) + 1})"
    balance = float(np.nanmax(evidence)) if np.isfinite(evidence).any() else -math.inf
    strongest = max(float(reach.max()), balance)
    return Check(NAME, flagged, share, None, None, strongest, expected, detail.replace("-", "−"))
