"""Benchmark: human judgments per canary decision (issue 14), before and after reusing a query's grades
across sessions and adjusting for query difficulty, side by side on the same simulated worlds.

**The world** is the realistic one of :mod:`monitor.sim.world` (seed 2025, the world of
``benchmarks/canary.py``; night dip 4%), built with 30% new documents for the candidate
(``new_share=0.3``: only used where a row says so; the healthy and broken sessions are the same as
without). Every precomputed session keeps its shown documents, so a simulated session knows which
(query, document) pairs it needs judged.

**The canary** (as in ``benchmarks/canary.py``): 50/50 random split, random start hour, a look per epoch
(15 minutes), 48 hours, DCG@k, time-matched (strata: the hour since the start) and sticky
(:func:`~monitor.core.canary.verdict_paths.sticky_path`). Before it, a **warm-up day**: the baseline ranker
alone serves 24 hours of traffic under the same labelling rule, which fills the judged pairs and the queries'
history. Each simulated warm-up day is followed by one canary of every scenario (A/A, −5%, −10%, and both
with new documents), each from a copy of the day's end state with its own random numbers: the cells share
their warm-up days (and start hours), which makes them comparable and the benchmark cheaper.

**Two ways of labelling** (``regime``):

* ``sessions`` (today): 2,000 sampled sessions per bucket and hour (500 per look), each asking for all
  the documents it shows in its top k (c̄ on average: 31.8 in head, 16.2 in tail, where some sessions
  retrieve fewer than k). Its judgments per hour: 2,000 · c̄.
* ``judgments`` (reuse): the same number of judgments per hour, 2,000 · c̄ (500 · c̄ per look), spent on
  the documents sessions show that have no kept grade: sessions are sampled in arrival order, blind to the
  arm, while the look's spend is below its budget (the stream's rule); a session asks only for its
  documents without a grade; a grade requested in one look is kept from the next look on (labels arrive
  within the 15-minute epoch) for ``state_ttl`` (3 days); a session whose shown documents are all graded
  costs nothing. At most the bucket's traffic is sampled: ``TRAFFIC`` sessions per hour (head: 162,000,
  the least traffic in which every one of the world's 1,000 head queries is searched 1,000 times a day,
  the head's threshold; tail: 7,000, the most in which its commonest query stays under the tail's 50 a
  day).

**Four methods**, on two streams per run: *before* (today: ``sessions``, the unadjusted time-matched
comparison), *adjusted* (``sessions`` + the query-difficulty adjustment of
:mod:`monitor.core.canary.adjusted`), *reuse* (``judgments``, unadjusted), *after* (``judgments`` +
adjustment). The covariate is the query's mean DCG@k over the warm-up day's scored sessions (at least
``--min-history``).

**Reported**: per A/B cell the share of runs called "regression" within 48 h and the judgments (spent on
both arms, halved: per arm), sessions per arm and hours until it (median, p90; runs without count as
later than the horizon); per A/A cell the false regressions, and per cell the scored sessions and
judgments per hour; the bias of the estimate: the mean of the current estimate at 6 hours (and of the
sticky one at the regression) against the true relative change, in percentage points. A/B runs stop
once every run has its regression under both ``judgments`` methods and the 6 hours are past (checked at 6
hours, then every 2).

    python benchmarks/judgments.py [--runs 250] [--batch 20] [--workers 2] [--min-history 1] [--quick]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from monitor.core.canary import CanaryConfig
from monitor.core.canary.adjusted import FIELDS, CovariateSums, adjusted_mean_path, query_covariate
from monitor.core.canary.matched import matched_mean_path
from monitor.core.canary.verdict_paths import (
    REGRESSION,
    EffectPath,
    VerdictPath,
    effect_verdict_path,
    sticky_path,
)
from monitor.core.stream.config import StreamConfig
from monitor.sim.world import DEFAULT_SETTINGS, HEALTHY, HOURS, NEW, World

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Result = dict[str, npt.NDArray[np.generic]]
NEVER = np.iinfo(np.int64).max
UNJUDGED = np.iinfo(np.int16).min

STREAM = StreamConfig()
BUDGET = round(STREAM.budget["tail"])  # labelled sessions per bucket and hour today
LOOKS_PER_HOUR = round(STREAM.budget_period / STREAM.epoch)
PER_LOOK = BUDGET // LOOKS_PER_HOUR
TTL_LOOKS = round(STREAM.state_ttl / STREAM.epoch)
WORLD_SEED = 2025
BUCKETS = ("head", "tail")
DIP = 0.04
NEW_SHARE = 0.30
CANARY_HOURS, WARMUP_HOURS, BIAS_HOURS = 48, 24, 6
TRAFFIC = {"head": 162_000, "tail": 7_000}  # sessions per hour (module docstring)
SCENARIOS = ((0.0, False), (0.05, False), (0.10, False), (0.05, True), (0.10, True))  # (drop, new documents)
METHODS = {"sessions": ("before", "adjusted"), "judgments": ("reuse", "after")}
ORDER = ("before", "adjusted", "reuse", "after")
LABELS = {"before": "before (today)", "adjusted": "adjustment alone", "reuse": "reuse alone",
          "after": "after: reuse + adjustment"}
CHUNK = 2_000_000  # sessions drawn at once (all runs of a job)

WORLDS: dict[str, World] = {}


@dataclass(frozen=True)
class Job:
    """``runs`` simulated warm-up days of one bucket and labelling regime, each followed by a canary of
    every scenario (from the same warm-up state)."""

    bucket: str
    regime: str  # "sessions" or "judgments"
    runs: int
    seed: int
    hours: int
    warmup: int
    min_history: int
    config: CanaryConfig


def today_cost(world: World) -> float:
    """c̄: today's judgments per sampled session, the documents a session shows in its top k (traffic
    weighted over a day's mix, the healthy ranker's sessions)."""
    shown = (world.outcomes.docs[HEALTHY] >= 0).sum(axis=2)
    return float(world.hourly_shares.mean(axis=0) @ shown.mean(axis=1))


def first(flags: npt.NDArray[np.bool_]) -> IntArray:
    hit = flags.any(axis=1)
    return np.where(hit, flags.argmax(axis=1), NEVER).astype(np.int64)


def at(values: FloatArray, index: IntArray) -> FloatArray:
    """values[run, index[run]], NaN (or inf for counts) where the index is NEVER."""
    taken = np.take_along_axis(values, np.minimum(index, values.shape[1] - 1)[:, None], axis=1)[:, 0]
    return np.where(index == NEVER, np.nan, taken)


class Simulation:
    """One job's runs: the warm-up day, then a canary per scenario from its end state, a look at a time
    (module docstring)."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.world = world = WORLDS[job.bucket]
        s = world.settings
        self.queries, self.k, self.docs_per_query = s.queries, s.k, s.pool + s.new_count
        self.docs = world.outcomes.docs.reshape(-1, s.k)
        self.outcomes = self.docs.shape[0]
        self.shown = (self.docs >= 0).sum(axis=1).astype(np.int64)
        self.dcg = world.outcomes.dcg.ravel()
        self.drop, self.new = 0.0, False
        self.rng = np.random.default_rng([job.seed, 0])
        runs = job.runs
        self.start = self.rng.integers(0, HOURS, runs)
        self.hist_n, self.hist_s = np.zeros(runs * s.queries), np.zeros(runs * s.queries)
        self.looks = job.hours * LOOKS_PER_HOUR
        self.sums = np.zeros((2, len(FIELDS), runs, self.looks))
        self.spent = np.zeros((2, runs, self.looks))  # judgments per arm and look
        self.reuse = job.regime == "judgments"
        self.budget = PER_LOOK * today_cost(world)  # judgments per look
        self.cap = TRAFFIC[job.bucket] // LOOKS_PER_HOUR
        self.judged = np.full(runs * s.queries * self.docs_per_query if self.reuse else 0, UNJUDGED,
                              dtype=np.int16)
        self.free_to = np.full(runs * self.outcomes if self.reuse else 0, UNJUDGED, dtype=np.int16)
        self.covariate = np.full(runs * s.queries, np.nan)
        self.guess = PER_LOOK

    # -- one look ---------------------------------------------------------------------------------------
    def draw(self, rows: IntArray, size: int, look: int) -> tuple[IntArray, IntArray, npt.NDArray[np.bool_]]:
        hour = (self.start[rows] + look // LOOKS_PER_HOUR) % HOURS
        hours = np.broadcast_to(hour[:, None], (rows.size, size))
        canary = look >= 0
        shape = (rows.size, size)
        cand = (self.rng.random(shape) < 0.5) if canary else np.zeros(shape, dtype=bool)
        flat, query = self.world.sample(self.rng, hours, cand, self.drop if canary else 0.0,
                                        new=self.new and canary)
        return flat, query, cand

    def costs(self, rows: IntArray, flat: IntArray, query: IntArray, look: int
              ) -> tuple[IntArray, tuple[npt.NDArray[np.intp], ...], IntArray, npt.NDArray[np.bool_]]:
        """Per session, the documents it shows without a kept grade; and what a sampled one will request
        (the sessions not known to be free, their (run, query, document) keys and which they need)."""
        key = rows[:, None] * self.outcomes + flat
        unknown = np.nonzero(self.free_to[key] < look)
        cost = np.zeros(flat.shape, dtype=np.int64)
        o = flat[unknown]
        docs = self.docs[o]
        ok = docs >= 0
        base = (rows[unknown[0]] * self.queries + query[unknown]) * self.docs_per_query
        pairs = base[:, None] + np.where(ok, docs, 0)
        judged = self.judged[pairs].astype(np.int32)
        need = ok & ~((judged < look) & (judged + TTL_LOOKS >= look))
        cost[unknown] = need.sum(axis=1)
        free = ~need.any(axis=1)
        if free.any():  # fully judged: free until its first grade expires (no gathers until then)
            until = np.where(ok[free], judged[free], np.iinfo(np.int16).max).min(axis=1) + TTL_LOOKS
            self.free_to[key[unknown][free]] = np.minimum(until, np.iinfo(np.int16).max).astype(np.int16)
        return cost, unknown, pairs, need

    def record(self, rows: IntArray, flat: IntArray, query: IntArray, cand: npt.NDArray[np.bool_],
               cost: IntArray, take: npt.NDArray[np.bool_], look: int) -> None:
        runs = self.job.runs
        x = self.dcg[flat][take]
        key = (rows[:, None] * self.queries + query)[take]
        if look < 0:  # the warm-up: the queries' history
            self.hist_n += np.bincount(key, minlength=runs * self.queries)
            self.hist_s += np.bincount(key, weights=x, minlength=runs * self.queries)
            return
        c = self.covariate[key]
        has = np.isfinite(c)
        c0 = np.where(has, c, 0.0)
        arm = cand[take].astype(np.int64)
        run = np.broadcast_to(rows[:, None], flat.shape)[take]
        cell = (run * 2 + arm) * 2 + has  # (run, arm, has a covariate)

        def total(weights: FloatArray | None) -> FloatArray:
            out: FloatArray = np.bincount(cell, weights=weights, minlength=runs * 4).reshape(runs, 2, 2)
            return out

        n, sx, sxx = total(None), total(x), total(x * x)
        sc, scc, sxc = total(c0), total(c0 * c0), total(x * c0)
        for a in (0, 1):
            values = (n[:, a, 1], sx[:, a, 1], sxx[:, a, 1], sc[:, a, 1], scc[:, a, 1], sxc[:, a, 1],
                      n[:, a, 0], sx[:, a, 0], sxx[:, a, 0])
            for f, v in enumerate(values):
                self.sums[a, f, :, look] += v
        spent = np.bincount(run * 2 + arm, weights=cost[take].astype(np.float64), minlength=runs * 2)
        self.spent[:, :, look] += spent.reshape(runs, 2).T

    def look(self, look: int) -> None:
        runs = self.job.runs
        if not self.reuse:  # today: PER_LOOK sessions, each asking for everything it shows
            rows = np.arange(runs)
            flat, query, cand = self.draw(rows, PER_LOOK, look)
            self.record(rows, flat, query, cand, self.shown[flat], np.ones(flat.shape, dtype=bool), look)
            return
        used = np.zeros(runs)
        open_ = np.ones(runs, dtype=bool)
        drawn, size, most = 0, min(self.cap, max(256, int(self.guess * 1.15))), 0
        requests = []
        while open_.any() and drawn < self.cap:
            rows = np.flatnonzero(open_)
            size = max(1, min(size, self.cap - drawn, CHUNK // rows.size))
            flat, query, cand = self.draw(rows, size, look)
            cost, unknown, pairs, need = self.costs(rows, flat, query, look)
            cumulative = np.cumsum(cost, axis=1) + used[rows, None]
            take = (cumulative - cost) < self.budget  # sampled while the spend is below the budget
            used[rows] = cumulative[:, -1]
            open_[rows] = used[rows] < self.budget
            drawn += size
            most = max(most, int(take.sum(axis=1).max()))
            self.record(rows, flat, query, cand, cost, take, look)
            requests.append(pairs[need & take[unknown][:, None]])
            size *= 2
        self.guess = drawn if drawn >= self.cap else most
        for pairs_taken in requests:  # graded within the epoch: kept from the next look on
            self.judged[pairs_taken] = look

    # -- the run ----------------------------------------------------------------------------------------
    def run(self) -> dict[int, dict[str, Result]]:
        """The warm-up day, then every scenario's canary from a copy of its end state."""
        job = self.job
        for look in range(-job.warmup * LOOKS_PER_HOUR, 0):
            self.look(look)
        self.covariate = query_covariate(self.hist_n, self.hist_s, job.min_history)
        judged, free_to, guess = self.judged.copy(), self.free_to.copy(), self.guess
        out = {}
        for scenario in range(len(SCENARIOS)):
            self.judged[:], self.free_to[:], self.guess = judged, free_to, guess
            self.sums[:], self.spent[:] = 0.0, 0.0
            self.drop, self.new = SCENARIOS[scenario]
            self.rng = np.random.default_rng([job.seed, 1 + scenario])
            out[scenario] = self.canary()
        return out

    def canary(self) -> dict[str, Result]:
        done = self.looks
        check = BIAS_HOURS * LOOKS_PER_HOUR
        for look in range(self.looks):
            self.look(look)
            if (self.reuse and self.drop > 0 and look + 1 >= check
                    and (look + 1 - check) % (2 * LOOKS_PER_HOUR) == 0 and look + 1 < self.looks):
                paths = self.paths(look + 1)
                if all((p.code == REGRESSION).any(axis=1).all() for p in paths.values()):
                    done = look + 1
                    break
        return self.results(done)

    def effects(self, looks: int) -> tuple[EffectPath, EffectPath, FloatArray, FloatArray]:
        strata = np.arange(looks) // LOOKS_PER_HOUR
        count = int(strata[-1]) + 1
        runs = self.job.runs
        by = np.zeros((2, len(FIELDS), runs, looks, count))
        by[:, :, :, np.arange(looks), strata] = self.sums[:, :, :, :looks]
        by = np.cumsum(by, axis=3)
        arms = [CovariateSums(*by[a]) for a in (0, 1)]
        totals = [(s.n + s.n0, s.x + s.x0, s.xx + s.xx0) for s in arms]
        plain = matched_mean_path(*totals[0], *totals[1])
        sessions = np.cumsum(self.sums[:, 0, :, :looks] + self.sums[:, 6, :, :looks], axis=2)
        judgments = np.cumsum(self.spent[:, :, :looks], axis=2)
        return plain, adjusted_mean_path(*arms), sessions, judgments

    def paths(self, looks: int) -> dict[str, VerdictPath]:
        plain, adjusted, _, _ = self.effects(looks)
        names = METHODS[self.job.regime]
        return {names[0]: sticky_path(effect_verdict_path(plain, self.job.config), self.job.config),
                names[1]: sticky_path(effect_verdict_path(adjusted, self.job.config), self.job.config)}

    def results(self, looks: int) -> dict[str, Result]:
        plain, adjusted, sessions, judgments = self.effects(looks)
        per_arm_sessions = sessions.sum(axis=0) / 2.0
        per_arm_judgments = judgments.sum(axis=0) / 2.0
        hours = looks / LOOKS_PER_HOUR
        bias_look = BIAS_HOURS * LOOKS_PER_HOUR - 1
        out: dict[str, Result] = {}
        for name, effect in zip(METHODS[self.job.regime], (plain, adjusted), strict=True):
            current = effect_verdict_path(effect, self.job.config)
            sticky = sticky_path(current, self.job.config)
            reg = first(sticky.code == REGRESSION)
            out[name] = {
                "reg": reg,
                "reg_sessions": np.where(reg == NEVER, np.inf, at(per_arm_sessions, reg)),
                "reg_judgments": np.where(reg == NEVER, np.inf, at(per_arm_judgments, reg)),
                "estimate_bias_look": current.estimate[:, bias_look],
                "estimate_at_reg": at(sticky.estimate, reg),
                "estimate_end": current.estimate[:, -1],
                "sessions_per_hour": sessions[:, :, -1].sum(axis=0) / hours,
                "sessions_first": sessions[:, :, bias_look].sum(axis=0) / BIAS_HOURS,
                "judgments_per_hour": judgments[:, :, -1].sum(axis=0) / hours,
                "judgments_first": judgments[:, :, bias_look].sum(axis=0) / BIAS_HOURS,
                "candidate_judgments": judgments[1, :, -1] / np.maximum(judgments[:, :, -1].sum(axis=0), 1.0),
                "hours": np.full(self.job.runs, hours),
            }
        return out


def run_job(job: Job) -> dict[int, dict[str, Result]]:
    return Simulation(job).run()


def _init_worlds(worlds: dict[str, World]) -> None:
    WORLDS.update(worlds)


# -- printing ---------------------------------------------------------------------------------------------
def merge(parts: Sequence[dict[str, Result]]) -> dict[str, Result]:
    return {method: {name: np.concatenate([p[method][name] for p in parts]) for name in parts[0][method]}
            for method in parts[0]}


def quantile(values: npt.NDArray[np.generic], q: float) -> float:
    return float(np.quantile(values.astype(np.float64), q, method="inverted_cdf"))


HORIZON = [CANARY_HOURS]  # hours of the canaries printed (12 with --quick)


def number(value: float) -> str:
    return f"> {HORIZON[0]} h" if not np.isfinite(value) else f"{value:,.0f}"


def hours_of(look: npt.NDArray[np.generic], q: float) -> str:
    v = quantile(np.where(look == NEVER, np.inf, look.astype(np.float64) + 1.0), q)
    return f"> {HORIZON[0]}" if not np.isfinite(v) else f"{v / LOOKS_PER_HOUR:.1f}"


def ratio(value: float, today: float) -> str:
    if not (np.isfinite(value) and np.isfinite(today)):
        return "—"
    share = value / today
    return f"{share:.2f}×" if share >= 0.01 else f"{share:.1e}×"


def scenario_name(index: int) -> str:
    drop, new = SCENARIOS[index]
    change = "none (A/A)" if drop == 0 else f"−{drop:.0%}"
    return change + (f", {NEW_SHARE:.0%} new docs" if new else "")


def pp(value: float) -> str:
    return f"{100 * value:+.2f}"


Cells = dict[tuple[str, int], dict[str, Result]]


def print_world(worlds: dict[str, World]) -> None:
    print(f"## The world (monitor/sim/world.py, seed {WORLD_SEED}, night dip {DIP:.0%})\n")
    for bucket in BUCKETS:
        w = worlds[bucket]
        c = today_cost(w)
        fresh = w.hourly_means(NEW) / w.hourly_means(HEALTHY) - 1.0
        print(f"* {w.summary().line()}")
        print(f"  - labelling today: {c:.1f} judgments per sampled session (the documents of its top "
              f"{w.settings.k} it shows), so 2,000 sessions per hour = a budget of {BUDGET * c:,.0f} "
              f"judgments per hour; traffic {TRAFFIC[bucket]:,} sessions per hour")
        print(f"  - the new-documents world: {w.new_document_share():.1%} of the candidate's shown "
              f"documents are ones the baseline never shows ({w.settings.new_count} per query, relevance "
              f"logit {w.settings.new_logit_shift:+.1f}); they alone change its mean DCG@k by "
              f"{fresh.min():+.1%} to {fresh.max():+.1%} (by hour); broken sessions make up the rest of "
              "the drop")
    print()


def print_detection(cells: Cells, runs: dict[int, int]) -> None:
    print("## Detection: judgments, sessions and hours to a regression verdict (A/B)\n")
    h = HORIZON[0]
    print("Per arm: judgments spent on both arms during the canary, halved (the warm-up day's are not "
          f"counted: the monitor spends them anyway). Runs without the verdict within {h} h count as "
          "later.\n")
    print(f"| bucket | true change | runs | method | regression within {h} h | judgments per arm: median · "
          "p90 | vs before (median) | sessions per arm: median · p90 | hours: median · p90 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (bucket, scenario), result in cells.items():
        if SCENARIOS[scenario][0] == 0:
            continue
        today = quantile(result["before"]["reg_judgments"], 0.5)
        for method in ORDER:
            r = result[method]
            reg = r["reg"] != NEVER
            j = r["reg_judgments"]
            print(f"| {bucket} | {scenario_name(scenario)} | {runs[scenario]} | {LABELS[method]} | "
                  f"{reg.mean():.1%} | {number(quantile(j, 0.5))} · {number(quantile(j, 0.9))} | "
                  f"{ratio(quantile(j, 0.5), today)} | "
                  f"{number(quantile(r['reg_sessions'], 0.5))} · "
                  f"{number(quantile(r['reg_sessions'], 0.9))} | {hours_of(r['reg'], 0.5)} · "
                  f"{hours_of(r['reg'], 0.9)} |")
    print()


def print_aa(cells: Cells, runs: dict[int, int]) -> None:
    print("## A/A: false regressions, and scored sessions per hour at the same judgment budget\n")
    print(f"Sessions and judgments per hour: both arms, over the canary's first {BIAS_HOURS} h and its "
          f"whole {HORIZON[0]} h (mean over runs).\n")
    h = HORIZON[0]
    print(f"| bucket | runs | method | false regressions within {h} h | scored sessions per hour: first "
          f"{BIAS_HOURS} h · {h} h | vs before | judgments per hour: first {BIAS_HOURS} h · {h} h | mean "
          f"estimate at {h} h (pp) |")
    print("|---|---|---|---|---|---|---|---|")
    for (bucket, scenario), result in cells.items():
        if SCENARIOS[scenario][0] != 0:
            continue
        today = result["before"]["sessions_per_hour"].mean()
        for method in ORDER:
            r = result[method]
            print(f"| {bucket} | {runs[scenario]} | {LABELS[method]} | {(r['reg'] != NEVER).mean():.1%} | "
                  f"{r['sessions_first'].mean():,.0f} · {r['sessions_per_hour'].mean():,.0f} | "
                  f"{r['sessions_per_hour'].mean() / today:.1f}× | {r['judgments_first'].mean():,.0f} · "
                  f"{r['judgments_per_hour'].mean():,.0f} | {pp(float(np.mean(r['estimate_end'])))} |")
    print()


def print_bias(cells: Cells, runs: dict[int, int]) -> None:
    print("## Bias of the estimate: mean over runs against the true relative change\n")
    print(f"At {BIAS_HOURS} h: the current (not sticky) estimate e^θ̂ − 1 of every run; ± two standard "
          "errors of that mean. At the regression: the sticky estimate the verdict reports, over the runs "
          "that reached it (a sequential test stops early when the estimate runs ahead of the truth, so this "
          "one leans towards larger drops; in A/A rows: the few false alarms). Sessions and judgments per "
          "hour: both arms over the simulated part of the canary (A/B runs stop once every run has its "
          "verdict and 6 h are past). Candidate's share: of the judgments spent.\n")
    print(f"| bucket | true change | runs | method | mean estimate at {BIAS_HOURS} h | bias (pp) | mean "
          "estimate at the regression | bias (pp) | scored sessions per hour | judgments per hour | "
          "candidate's share of judgments |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (bucket, scenario), result in cells.items():
        drop = SCENARIOS[scenario][0]
        for method in ORDER:
            r = result[method]
            e = r["estimate_bias_look"].astype(np.float64)
            se = float(np.std(e, ddof=1) / np.sqrt(e.size))
            at_reg = r["estimate_at_reg"].astype(np.float64)
            at_reg = at_reg[np.isfinite(at_reg)]
            reg_text = (f"{100 * at_reg.mean():+.2f}% ({at_reg.size} run{'s' if at_reg.size > 1 else ''}) | "
                        f"{pp(float(at_reg.mean()) + drop)}" if at_reg.size else "— | —")
            print(f"| {bucket} | {scenario_name(scenario)} | {runs[scenario]} | {LABELS[method]} | "
                  f"{100 * e.mean():+.2f}% | {pp(float(e.mean()) + drop)} ± {100 * 2 * se:.2f} | "
                  f"{reg_text} | "
                  f"{r['sessions_per_hour'].mean():,.0f} | {r['judgments_per_hour'].mean():,.0f} | "
                  f"{r['candidate_judgments'].mean():.0%} |")
    print()


def print_goals(cells: Cells) -> None:
    print("## The issue's goals\n")
    print(f"| goal | measured (world: realistic, seed {WORLD_SEED}; 50/50 canary, {HORIZON[0]} h) | met |")
    print("|---|---|---|")

    def row(goal: str, measured: str, met: bool) -> None:
        print(f"| {goal} | {measured} | {'yes' if met else 'no'} |")

    def j(bucket: str, scenario: int, method: str) -> float:
        return quantile(cells[(bucket, scenario)][method]["reg_judgments"], 0.5)

    for bucket, goal, share in (("head", "1/5", 0.2), ("tail", "0.8×", 0.8)):
        before, after = j(bucket, 1, "before"), j(bucket, 1, "after")
        row(f"{bucket}, −5%: at most {goal} today's judgments per arm (median)",
            f"{number(after)} vs {number(before)} ({ratio(after, before)})",
            np.isfinite(after) and (after <= share * before))
    for bucket in BUCKETS:
        aa = cells[(bucket, 0)]
        rates = {m: float((aa[m]["reg"] != NEVER).mean()) for m in ORDER}
        row(f"{bucket}: A/A false regressions ≤ α = 5% (every method)",
            ", ".join(f"{LABELS[m]} {rates[m]:.1%}" for m in ORDER), max(rates.values()) <= 0.05)
    worst, where = 0.0, ""
    for (bucket, scenario), result in cells.items():
        e = result["after"]["estimate_bias_look"].astype(np.float64)
        gap = abs(float(e.mean()) + SCENARIOS[scenario][0])
        if gap >= worst:
            worst, where = gap, f"{bucket} {scenario_name(scenario)}"
    row(f"after: mean estimate within 0.5 pp of the true effect (at {BIAS_HOURS} h, every cell)",
        f"largest gap {100 * worst:.2f} pp ({where})", worst <= 0.005)
    aa = cells[("head", 0)]
    more = aa["after"]["sessions_per_hour"].mean() / aa["before"]["sessions_per_hour"].mean()
    row(f"head: ≥ 3× the scored sessions per hour at the same judgment budget (A/A, {HORIZON[0]} h)",
        f"{aa['after']['sessions_per_hour'].mean():,.0f} vs {aa['before']['sessions_per_hour'].mean():,.0f} "
        f"({more:.1f}×)", more >= 3)
    print()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=250,
                        help="simulated warm-up days per bucket and regime, each followed by a canary of "
                             "every scenario (A/A and the four A/B)")
    parser.add_argument("--batch", type=int, default=20, help="runs per task")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--min-history", type=int, default=1,
                        help="warm-up sessions a query needs for a covariate")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test: 8 runs per cell, smaller worlds, 12 h canaries after a 6 h "
                             "warm-up")
    args = parser.parse_args(argv)
    hours, warmup = CANARY_HOURS, WARMUP_HOURS
    if args.quick:
        args.runs = args.batch = 8
        hours, warmup = 12, 6
    HORIZON[0] = hours
    config = CanaryConfig()
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:5.1f} s] {message}", file=sys.stderr)

    worlds: dict[str, World] = {}
    for bucket in BUCKETS:
        settings = replace(DEFAULT_SETTINGS[bucket], new_share=NEW_SHARE)
        if args.quick:
            settings = replace(settings, outcomes=min(settings.outcomes, 24),
                               queries=min(settings.queries, 5_000))
        worlds[bucket] = World.build(bucket, WORLD_SEED, settings).with_night_dip(DIP)
        log(f"world {bucket}: {settings.queries:,} queries × {settings.outcomes} sessions × 4 rankers")

    jobs: list[Job] = []
    for bucket in BUCKETS:
        for regime in ("judgments", "sessions"):
            for start in range(0, args.runs, args.batch):
                # the same seed in both regimes: the same start hours
                jobs.append(Job(bucket, regime, min(args.batch, args.runs - start), 1 + start // args.batch,
                                hours, warmup, args.min_history, config))
    # the heaviest first (head, reuse), so the workers finish together
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].bucket != "head", jobs[i].regime != "judgments"))
    parts: dict[tuple[str, int], dict[str, list[dict[str, Result]]]] = {}
    context = multiprocessing.get_context("fork")
    with context.Pool(args.workers, initializer=_init_worlds, initargs=(worlds,)) as pool:
        results = pool.imap(run_job, [jobs[i] for i in order])
        for done, (i, out) in enumerate(zip(order, results, strict=True), start=1):
            job = jobs[i]
            for scenario, result in out.items():
                parts.setdefault((job.bucket, scenario), {}).setdefault(job.regime, []).append(result)
            if done % 5 == 0 or done == len(jobs):
                log(f"{done}/{len(jobs)} batches")
    cells: Cells = {}
    for bucket in BUCKETS:
        for scenario in range(len(SCENARIOS)):
            regimes = parts[(bucket, scenario)]
            cells[(bucket, scenario)] = {**merge(regimes["sessions"]), **merge(regimes["judgments"])}
    runs = dict.fromkeys(range(len(SCENARIOS)), args.runs)

    quick = " (--quick: a smoke test)" if args.quick else ""
    print(f"# Judgments per canary decision in the realistic simulated world{quick}\n")
    print(f"Verdicts: {config}, time-matched (the hour since the start) and sticky. 50/50 canary, random "
          f"start hour, a look every {STREAM.epoch / 60:.0f} min for {hours} h, after a warm-up of "
          f"{warmup} h (baseline only). Today: {BUDGET:,} labelled sessions per bucket per hour, each asking "
          f"for the documents of its top k. Reuse: the same judgments per hour, asked only for documents "
          f"without a grade kept for {STREAM.state_ttl / 86400:.0f} days. Adjustment: the query's mean DCG@k "
          f"over the warm-up (≥ {args.min_history} session) as the covariate. before = today; after = "
          "reuse + adjustment; reuse alone and adjustment alone show each one's share.\n")
    print_world(worlds)
    print_detection(cells, runs)
    print_aa(cells, runs)
    print_bias(cells, runs)
    print_goals(cells)
    log(f"total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
