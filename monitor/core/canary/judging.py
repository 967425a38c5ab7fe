"""How one pair of groups is judged on one metric, along the looks of its period: the verdict.

The monitor *looks* once per epoch of the period, in event time: look i holds the candidate's sessions of
the period's epochs up to the i-th (a canary's control too; a deploy's baseline is all of it at every
look). With ``CanaryConfig.time_matched`` each arm is split into time strata (``stratum``: the epoch's
``match_slot``-long stretch of a canary's period, or its phase in ``match_period`` for a deploy) and the
baseline is reweighted to the candidate's mix (:mod:`.matched`). The verdict path over the looks
(:mod:`.verdict_paths`) is made sticky with ``CanaryConfig.sticky`` (running intersection), and its last look
is the verdict, with how often it changed along the way and when it last did. Per metric:

* **dcg**: mean DCG@k per session, adjusted for query difficulty where there is a covariate
  (:mod:`.adjusted`), unless the arms' covariates are out of balance (:func:`.checks.covariate_balance`):
  then the unadjusted comparison, and the reason says why;
* **pnr**: concordant over discordant pairs, grade-tied pairs left out (the skip convention: a list of one
  grade, all irrelevant say, neither raises nor lowers it). Guarded by the pairs of different grades per
  session (``pairs``: what PNR judges): "pass" only when those are not 2% fewer in the candidate either
  (a candidate whose lists give PNR less to judge, returning nothing relevant more often, is not passed on
  the lists left), and "regression" when the candidate's lists have no such pair at all while the
  baseline's do (nothing ranked above anything: PNR cannot even be computed);

and in both, an arm whose statistic is 0 (every session at DCG 0; no concordant pair) is bounded exactly
(:mod:`.bounds`): a totally broken candidate is a regression at the first look with ``min_sessions`` per
arm. Everything is a function of the epochs alone, so every worker, a restart and a replay give the same
verdict, and a correction of labels already counted is judged on the corrected data at every look.

:func:`compare` is the verdict of two arms' totals (one look, one stratum): the same rules.

>>> base = {"sessions": 400, "dcg": 800.0, "dcg_sq": 2000.0}
>>> cand = {"sessions": 400, "dcg": 560.0, "dcg_sq": 1100.0}
>>> v = compare(base, cand, "dcg", CanaryConfig())
>>> v.verdict, round(v.estimate, 2)
('regression', -0.3)
>>> compare(base, {"sessions": 400, "dcg": 0.0, "dcg_sq": 0.0}, "dcg", CanaryConfig()).verdict
'regression'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from monitor.core.canary.checks import Check, balance_check
from monitor.core.canary.config import CanaryConfig
from monitor.core.canary.covariates import Adjustment
from monitor.core.canary.matched import WIDTHS, fields_of
from monitor.core.canary.metric_paths import dcg_paths, pnr_paths
from monitor.core.canary.verdict import Verdict, VerdictName, reason
from monitor.core.canary.verdict_paths import INCONCLUSIVE, PASS, REGRESSION, LogPath, VerdictPath
from monitor.core.stream.history import History
from monitor.core.stream.stats import Stats

Epochs = dict[int, Stats]  # epoch index -> the stats of one arm's groups in it
CODE_NAMES: dict[int, VerdictName] = {PASS: "pass", INCONCLUSIVE: "inconclusive", REGRESSION: "regression"}
TITLES = {"dcg": "DCG", "pnr": "PNR"}


def total(epochs: Mapping[int, Stats]) -> Stats:
    out = Stats()
    for stats in epochs.values():
        out.add(stats)
    return out


class Looks:
    """Where each epoch of a pair goes: a look per epoch of ``looks`` (sorted), the time strata, and
    whether the baseline's epochs enter at their look (``grows``: a canary's control) or all at the first
    (a deploy's baseline)."""

    def __init__(self, looks: Sequence[int], grows: bool, stratum: Callable[[int], int],
                 baseline: Mapping[int, Any], candidate: Mapping[int, Any]) -> None:
        self.grows, self.stratum, self.baseline, self.candidate = grows, stratum, baseline, candidate
        self.indices = list(looks) or [0]
        strata = sorted({stratum(e) for e in [*self.indices, *baseline, *candidate]})
        self.where = {s: j for j, s in enumerate(strata)}
        self.position = {e: i for i, e in enumerate(self.indices)}

    def place(self, epochs: Mapping[int, Any], values: Callable[[Any], Any], width: int,
              growing: bool) -> np.ndarray:
        """Per (look, stratum): the cumulative sum of ``values`` over the arm's epochs seen by then."""
        indices, where, position = self.indices, self.where, self.position
        out = np.zeros((len(indices), len(where), width))
        for e, item in epochs.items():
            if growing and e in position:
                out[position[e], where[self.stratum(e)]] += values(item)
            elif not growing:
                out[0, where[self.stratum(e)]] += values(item)
        np.cumsum(out, axis=0, out=out)
        return out

    def arms(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        width = WIDTHS[metric]
        return (self.place(self.baseline, lambda stats: fields_of(stats, metric), width, self.grows),
                self.place(self.candidate, lambda stats: fields_of(stats, metric), width, True))


@dataclass(frozen=True)
class Judged:
    """A metric's verdict path over the looks, the arms' sessions per look, and what the reason adds:
    ``note`` (how it was compared, when not the plain way), ``problem`` (why there is no interval, at the
    last look), the adjusted share and the checks that ran."""

    path: VerdictPath
    n_baseline: np.ndarray
    n_candidate: np.ndarray
    note: str = ""
    problem: str = ""
    adjusted: float | None = None
    checks: tuple[Check, ...] = ()


NO_VARIANCE = ("no variance: fewer than two sessions in a time stratum, no variation between sessions, "
               "or sums without their second moments")


def _last(values: np.ndarray | None) -> float:
    return math.nan if values is None else float(np.atleast_1d(values)[-1])


def _no_sessions(base: LogPath, cand: LogPath) -> str:
    """Why an arm has no sessions at the last look, or ""."""
    for arm, path in (("baseline", base), ("candidate", cand)):
        if _last(path.n) == 0:
            other = cand if arm == "baseline" else base
            return (f"{arm}: no sessions in the time strata the other arm has" if _last(other.n) > 0
                    else f"{arm}: no sessions")
    return ""


def _dcg_problem(base: LogPath, cand: LogPath, has_bound: bool) -> str:
    """Why the last look of a DCG comparison has no interval (enough sessions aside)."""
    zero_b, zero_c = (bool(_last(p.zero)) if p.zero is not None else False for p in (base, cand))
    if zero_b and zero_c:
        return "both arms' mean DCG is 0: no relative change"
    if (zero_b or zero_c) and not has_bound:
        return (f"{'baseline' if zero_b else 'candidate'}: mean DCG is 0, and the bucket has no bound of a "
                "session's DCG to bound it with")
    return _no_sessions(base, cand) or NO_VARIANCE


def _pnr_problem(components: tuple[tuple[LogPath, LogPath], tuple[LogPath, LogPath]], has_bound: bool) -> str:
    """Why the last look of a PNR comparison has no interval (enough sessions aside)."""
    (con_b, con_c), (dis_b, dis_c) = components
    found = _no_sessions(con_b, con_c)
    if found:
        return found
    for arm, con, dis in (("baseline", con_b, dis_b), ("candidate", con_c, dis_c)):
        no_con = con.zero is not None and bool(_last(con.zero))
        no_dis = dis.zero is not None and bool(_last(dis.zero))
        if no_con and no_dis:
            return f"{arm}: no pair of different grades in any session: PNR is undefined"
        if (no_con or no_dis) and not has_bound:
            what = "no concordant pair: PNR is 0" if no_con else "no inversions: PNR is +Inf"
            return f"{arm}: {what}, and the bucket has no bound of a session's pairs to bound it with"
    return NO_VARIANCE


def _itself(sums: np.ndarray) -> np.ndarray:
    return sums


def _judge_dcg(looks: Looks, config: CanaryConfig, bound: float | None,
               adjust: Adjustment | None) -> Judged:
    base, cand = looks.arms("dcg")
    base_c = cand_c = None
    share = 0.0
    if adjust is not None and adjust.covariate:
        base_c = looks.place(adjust.baseline, _itself, 6, looks.grows)
        cand_c = looks.place(adjust.candidate, _itself, 6, True)
        sessions = float(base[-1, :, 0].sum() + cand[-1, :, 0].sum())
        share = float(base_c[-1, :, 0].sum() + cand_c[-1, :, 0].sum()) / sessions if sessions > 0 else 0.0
        if share <= 0:  # no query with a covariate: nothing to adjust with
            base_c = cand_c = None
    found = dcg_paths(base, cand, config, bound, base_c, cand_c)
    problem = _dcg_problem(*found.plain, bound is not None)
    if found.balance is None or found.imbalanced is None:
        return Judged(found.path, found.n_baseline, found.n_candidate, problem=problem)
    check = balance_check(found.balance, config)
    if bool(found.imbalanced[-1]):
        note = ("not adjusted for query difficulty: the arms' queries differ beyond chance ("
                + check.detail + "), so the adjustment would measure only the change within queries; "
                "compared on the per-session mean")
        return Judged(found.path, found.n_baseline, found.n_candidate, note, problem, None, (check,))
    return Judged(found.path, found.n_baseline, found.n_candidate, problem=problem,
                  adjusted=min(max(share, 0.0), 1.0), checks=(check,))


def _judge_pnr(looks: Looks, config: CanaryConfig, bound: float | None) -> Judged:
    base, cand = looks.arms("pnr")
    pairs_b, pairs_c = looks.arms("pairs")
    found = pnr_paths(base, cand, pairs_b, pairs_c, config, bound)
    note = ""
    if bool(found.nothing[-1]) and found.pnr.code[-1] != REGRESSION:
        note = ("the candidate's lists have no pair of different grades (nothing relevant ranked above "
                "anything), so PNR cannot be computed; the change shown is of those pairs per session")
    elif found.pnr.code[-1] == PASS and found.pairs.code[-1] != PASS:
        g = float(found.pairs.estimate[-1])
        size = "" if not math.isfinite(g) else f" ({g:+.1%})".replace("-", "−")
        drop = f"{config.min_relative_drop:.0%}"
        note = (f"no pass: PNR rules out a drop of {drop}, but not that the candidate's lists have {drop} "
                f"fewer pairs of different grades{size}, so PNR may judge less of them (lists with nothing "
                "relevant in them)")
    return Judged(found.path, found.n_baseline, found.n_candidate, note,
                  _pnr_problem(found.components, bound is not None))


def judge(baseline: Epochs, candidate: Epochs, looks: Sequence[int], grows: bool,
          stratum: Callable[[int], int], metric: str, config: CanaryConfig, history: History,
          adjust: Adjustment | None = None, bucket: str = "") -> Verdict:
    """The verdict of ``candidate`` against ``baseline`` (epoch → stats) on ``metric`` (module docstring):
    a look after each epoch of ``looks`` (sorted); the baseline's epochs enter at their look when it
    ``grows`` (a canary's control), all at once otherwise (a deploy's baseline). With ``adjust`` (and
    queries with a covariate) the DCG comparison is adjusted for query difficulty (:mod:`.adjusted`).
    ``bucket`` picks the bounds of a session's DCG and pairs (:mod:`.bounds`)."""
    placed = Looks(looks, grows, stratum, baseline, candidate)
    if metric == "dcg":
        judged = _judge_dcg(placed, config, _bound(config.dcg_bound, bucket), adjust)
    elif metric == "pnr":
        judged = _judge_pnr(placed, config, _bound(config.pairs_bound, bucket))
    else:
        raise ValueError(f"metric: {metric!r} is not one of dcg, pnr")
    latest = max((last for _, last in history.seen.values()), default=math.inf)
    sessions = (round(total(baseline).get("sessions", 0.0)), round(total(candidate).get("sessions", 0.0)))
    return verdict_of(judged, placed.indices, history.width, latest, config, *sessions)


def _bound(table: Mapping[str, float], bucket: str) -> float | None:
    """The bucket's bound; for a bucket without one, the largest (a bound of every bucket's sessions)."""
    return table.get(bucket, max(table.values(), default=None))


def verdict_of(judged: Judged, indices: Sequence[int], width: float, latest: float, config: CanaryConfig,
               all_baseline: int, all_candidate: int) -> Verdict:
    """The verdict at the last look of ``judged``'s path, with its changes and reason."""
    path = judged.path
    code = np.atleast_1d(path.code)
    changes = int(np.atleast_1d(path.changes)[-1])
    changed_at = None
    if changes:
        last_change = int(np.flatnonzero(np.diff(code, prepend=INCONCLUSIVE) != 0)[-1])
        begins = indices[last_change] * width
        changed_at = min(begins + width, max(latest, begins))
    resets = int(np.atleast_1d(path.resets)[-1])

    def at_last(values: np.ndarray) -> float | None:
        value = float(np.atleast_1d(values)[-1])
        return value if math.isfinite(value) else None

    n_b = round(float(np.atleast_1d(judged.n_baseline)[-1])) or all_baseline
    n_c = round(float(np.atleast_1d(judged.n_candidate)[-1])) or all_candidate
    estimate, lower, upper = at_last(path.estimate), at_last(path.lower), at_last(path.upper)
    evidence = at_last(path.evidence)
    eligible = bool(np.atleast_1d(path.eligible)[-1])
    name = CODE_NAMES[int(code[-1])]
    if eligible:
        looked = int(np.count_nonzero(np.atleast_1d(path.eligible)))
        held = "" if not config.sticky or looked <= 1 else (
            f" kept over {looked} looks" + (f" (restarted {resets}×)" if resets else ""))
        text = reason(name, math.nan if estimate is None else estimate, math.nan if upper is None else upper,
                      config, held, math.nan if lower is None else lower)
    elif n_b < config.min_sessions or n_c < config.min_sessions:
        text = (f"too few sessions: baseline {n_b}, candidate {n_c} "
                f"(at least {config.min_sessions} per arm)")
    else:
        text = judged.problem
    if not eligible and name != "inconclusive":  # sticky: held over a look without an interval
        text = f"{name} held from an earlier look; this look: {text}"
    if judged.note:
        text = f"{text}; {judged.note}"
    return Verdict(name, estimate, lower, upper, evidence, n_b, n_c, text, changes, changed_at, resets,
                   judged.adjusted, judged.checks)


def compare(baseline: Mapping[str, float], candidate: Mapping[str, float], metric: str,
            config: CanaryConfig, bucket: str = "") -> Verdict:
    """The verdict on ``metric`` ("dcg" or "pnr") of candidate vs baseline from each arm's totals: one
    look, one stratum, the rules of :func:`judge` (module docstring)."""
    for stats in (baseline, candidate):
        if round(stats.get("sessions", 0.0)) < 0:
            raise ValueError(f"sessions: must be ≥ 0, got {stats.get('sessions')!r}")
    history = History(1.0, {0: {}})
    found = judge({0: Stats(baseline)}, {0: Stats(candidate)}, [0], True, lambda index: 0, metric,
                  replace(config, sticky=False), history, bucket=bucket)
    return replace(found, changes=0, changed_at=None)  # one look: no path to change along
