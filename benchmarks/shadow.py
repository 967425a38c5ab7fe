"""Benchmark: the paired (shadow) comparison against today's 50/50 canary, side by side in the realistic world
(issue 28): hours, sessions and judgments to a verdict, A/A false regressions, healthy candidates passing.

**The world** is the canary benchmarks' (:mod:`monitor.sim.world`, seed 2025, default settings, night dip
4%: the clock-following mix), head and tail, with the shadow lists of :mod:`monitor.sim.world_shadow`
(shadow seed 2028, default :class:`~monitor.sim.world_shadow.ShadowSettings`): for the same sessions a
candidate's list sharing part of the served ranker's per-document noise. Candidates: equal, 2%, 5% and 10%
worse (a weaker relevance weight, on every query or on a subset of queries holding 25% of the traffic), and
broken (its relevance signal flipped). The printed ratio of each is its exact mean DCG@k over the served
one's in the world.

**Paired** (the shadow comparison): at the default budget (``StreamConfig.budget``: 2,000 labelled sessions
per bucket and hour, 500 per look, a look per 15-minute epoch) every labelled session is scored twice, its
served and its shadow list; the paired DCG sums (:data:`monitor.core.canary.paired.DCG_FIELDS`) per look,
judged by :func:`monitor.core.canary.paired_paths.paired_path` (sticky, the default config) from a random
start hour. An equal candidate's served and shadow lists are exchangeable: each drawn session swaps them
with probability 1/2, so its expected ratio is exactly 1 (an A/A). Judgments: a session asks for the
union of both top k (:attr:`~monitor.sim.world_shadow.ShadowWorld.union`, no grade kept).

**Canary** (today): ``benchmarks/canary_world.py``'s 50/50 canary at the same budget (its candidate: the
broken ranker's session with the probability that lowers the mean by the drop; the broken row: every
candidate session broken at the hour the broken ranker is closest to the healthy one) judged by
:func:`canary_world.default_dcg`, adjusted for query difficulty (the default) and not. A two-arm canary
sees only its arms' means, so its subset rows are its uniform ones. Judgments: today's, every labelled
session asks for all the documents it shows (``benchmarks/judgments.py``'s c̄ per session).

**Reported** per bucket, candidate and method over a ``--hours`` horizon (24): the share of runs called
"regression" and "pass", the median and p90 hours, median sessions and judgments to the verdict expected
(equal: pass; worse: regression; 2%, the configured smallest drop: whichever comes first), and the share
of runs whose verdict changed more than once (flips); then the issue's goals.

    python benchmarks/shadow.py [--runs 500] [--canary-runs 200] [--hours 24] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from canary_world import CONFIG, LOOKS_PER_HOUR, PER_LOOK, Scenario, default_dcg, simulate
from judgments import today_cost

from monitor.core.canary.paired_paths import paired_path
from monitor.core.canary.verdict_paths import PASS, REGRESSION
from monitor.sim.world import BROKEN, HEALTHY, HOURS, World
from monitor.sim.world_shadow import ShadowSettings, ShadowWorld

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
NEVER = np.iinfo(np.int64).max
WORLD_SEED, SHADOW_SEED, DIP = 2025, 2028, 0.04
BUCKETS = ("head", "tail")
METHODS = ("paired", "canary, adjusted", "canary, not adjusted")


def first(flags: npt.NDArray[np.bool_]) -> IntArray:
    hit = flags.any(axis=-1)
    return np.where(hit, flags.argmax(axis=-1), NEVER).astype(np.int64)


def paired_runs(shadow: ShadowWorld, candidate: int, runs: int, looks: int, seed: int
                ) -> tuple[FloatArray, FloatArray]:
    """Cumulative paired DCG sums per run and look (runs, looks, 6) and judgments (runs, looks)."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, HOURS, runs)
    cand = shadow.settings.candidates[candidate]
    equal = cand.drop == 0 and not cand.broken
    sums = np.zeros((runs, looks, 6))
    judged = np.zeros((runs, looks))
    x_all, y_all = shadow.served[0].ravel(), shadow.shadow[candidate, 0].ravel()
    union = shadow.union[candidate].ravel()
    for look in range(looks):
        hours = np.broadcast_to(((start + look // LOOKS_PER_HOUR) % HOURS)[:, None], (runs, PER_LOOK))
        flat, _ = shadow.sample(rng, hours)
        x, y = x_all[flat], y_all[flat]
        if equal:  # exchangeable lists: swap each session's with probability 1/2
            swap = rng.random(flat.shape) < 0.5
            x, y = np.where(swap, y, x), np.where(swap, x, y)
        sums[:, look] = np.stack([np.full(runs, float(PER_LOOK)), x.sum(1), y.sum(1), (x * x).sum(1),
                                  (y * y).sum(1), (x * y).sum(1)], axis=-1)
        judged[:, look] = union[flat].sum(axis=1)
    return np.cumsum(sums, axis=1), np.cumsum(judged, axis=1)


def summarise(code: npt.NDArray[np.int8], changes: IntArray, sessions: FloatArray, judged: FloatArray,
              expect: str) -> dict[str, float]:
    """The row's figures from per-run verdict codes (runs, looks) and sessions, judgments per look."""
    reg, ok = first(code == REGRESSION), first(code == PASS)
    target = {"pass": ok, "regression": reg, "any": np.minimum(reg, ok)}[expect]
    found = target != NEVER
    at = np.minimum(target, code.shape[-1] - 1)
    hours = np.where(found, (target + 1) / LOOKS_PER_HOUR, np.inf)

    def median(values: FloatArray, q: float = 0.5) -> float:
        return float(np.quantile(np.where(found, values, np.inf), q, method="higher"))

    return {"regression": float((reg != NEVER).mean()), "pass": float((ok != NEVER).mean()),
            "hours": median(hours), "hours_p90": median(hours, 0.9),
            "sessions": median(sessions[np.arange(len(at)), at]),
            "judgments": median(judged[np.arange(len(at)), at]),
            "flips": float((changes[:, -1] > 1).mean())}


def expect_of(drop: float, broken: bool) -> str:
    return "pass" if drop == 0 and not broken else "any" if drop < 0.05 and not broken else "regression"


def broken_drop(world: World) -> float:
    """The largest drop whose candidate sessions are all broken in some hour (q_h ≤ 1 in every hour)."""
    healthy, broken = world.hourly_means(HEALTHY), world.hourly_means(BROKEN)
    return float((1.0 - broken / healthy).min()) * (1 - 1e-9)


def run_bucket(bucket: str, args: argparse.Namespace, log: object) -> list[tuple[str, str, float, dict]]:
    world = World.build(bucket, WORLD_SEED, night_dip=DIP)
    shadow = ShadowWorld.build(world, SHADOW_SEED, ShadowSettings())
    overlap, p = shadow.overlap(0)
    ok = ~np.isnan(overlap)
    order = np.argsort(overlap[ok])
    cum = np.cumsum(p[ok][order]) / p[ok].sum()
    quantiles = [float(overlap[ok][order][np.searchsorted(cum, q)]) for q in (0.05, 0.5, 0.95)]
    print(f"{world.summary().line()}\n  shadow lists: top-{world.settings.k} overlap with the served list "
          f"per query (traffic-weighted) p5 {quantiles[0]:.0%}, median {quantiles[1]:.0%}, "
          f"p95 {quantiles[2]:.0%}; "
          f"documents to judge per paired session {float(p @ shadow.union[0].mean(1)):.1f} "
          f"(served alone {float(p @ shadow.shown.mean(1)):.1f})")
    looks = args.hours * LOOKS_PER_HOUR
    cost = today_cost(world)
    rows: list[tuple[str, str, float, dict]] = []
    canary: dict[float, dict[str, dict]] = {}
    seed = 1
    for i, cand in enumerate(shadow.settings.candidates):
        runs = args.aa_runs if cand.drop == 0 and not cand.broken else args.runs
        sums, judged = paired_runs(shadow, i, runs, looks, seed)
        path = paired_path(sums, "dcg", CONFIG, CONFIG.dcg_bound[bucket]).path
        expect = expect_of(cand.drop, cand.broken)
        rows.append((cand.name, "paired", shadow.ratio(i),
                     summarise(path.code, path.changes, sums[..., 0], judged, expect)))
        drop = broken_drop(world) if cand.broken else cand.drop
        if drop not in canary:
            shares = np.full(looks, 0.5)
            found = simulate(world, Scenario("canary", args.hours, shares, shares, drop=drop),
                             args.canary_runs, seed + 1000)
            sessions = np.broadcast_to((np.arange(looks) + 1.0) * PER_LOOK, (args.canary_runs, looks))
            canary[drop] = {}
            for name, adjusted in (("canary, adjusted", True), ("canary, not adjusted", False)):
                p_ = default_dcg(found, world, adjusted=adjusted).path
                canary[drop][name] = summarise(p_.code, p_.changes, sessions, sessions * cost, expect)
        for name, figures in canary[drop].items():
            rows.append((cand.name, name, 1.0 - drop, figures))
        seed += 1
        log(f"{bucket}: {cand.name}")  # type: ignore[operator]
    return rows


def cell(value: float) -> str:
    return "—" if not np.isfinite(value) else f"{value:,.0f}" if value >= 100 else f"{value:.2g}"


def print_table(results: dict[str, list[tuple[str, str, float, dict]]], hours: int) -> None:
    print(f"\n| bucket | candidate | true ratio | method | regression ≤ {hours} h | pass ≤ {hours} h | hours "
          "(median, p90) | sessions (median) | judgments (median) | flips |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for bucket, rows in results.items():
        for name, method, ratio, f in rows:
            print(f"| {bucket} | {name} | {ratio:.3f} | {method} | {f['regression']:.1%} | {f['pass']:.1%} | "
                  f"{cell(f['hours'])}, {cell(f['hours_p90'])} | {cell(f['sessions'])} | "
                  f"{cell(f['judgments'])} | {f['flips']:.1%} |")


def print_goals(results: dict[str, list[tuple[str, str, float, dict]]]) -> None:
    print("\nGoals (issue 28), paired against today's default 50/50 canary (adjusted):")
    for bucket, rows in results.items():
        get = {(n, m): f for n, m, _, f in rows}
        paired, today = get[("5% worse", "paired")], get[("5% worse", "canary, adjusted")]
        hours = paired["hours"] / today["hours"]
        judged = paired["judgments"] / today["judgments"]
        limit = 0.2 if bucket == "tail" else 1.0
        aa, healthy = get[("equal", "paired")]["regression"], get[("equal", "paired")]["pass"]
        print(f"- {bucket}: 5% drop hours {hours:.3f} of the canary's (goal ≤ 0.2: "
              f"{'met' if hours <= 0.2 else 'NOT met'}); judgments {judged:.3f} of the canary's (goal ≤ "
              f"{limit:g}: {'met' if judged <= limit else 'NOT met'}); A/A false regressions {aa:.1%} "
              f"(goal ≤ 5%: "
              f"{'met' if aa <= 0.05 else 'NOT met'}); healthy passing within the horizon {healthy:.1%} "
              f"(goal ≥ 90%: {'met' if healthy >= 0.9 else 'NOT met'})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=500, help="paired runs per bucket and worse candidate")
    parser.add_argument("--aa-runs", type=int, default=1000, help="paired A/A runs per bucket")
    parser.add_argument("--canary-runs", type=int, default=200, help="canaries per bucket and drop")
    parser.add_argument("--hours", type=int, default=24, help="horizon of every run")
    parser.add_argument("--quick", action="store_true",
                        help="100 paired runs (A/A 200), 40 canaries per cell")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.aa_runs, args.canary_runs = 100, 200, 40
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:5.1f} s] {message}", file=sys.stderr)

    s = ShadowSettings()
    print(f"World: monitor.sim.world seed {WORLD_SEED}, DEFAULT_SETTINGS, night dip {DIP:.0%}; shadow lists: "
          f"monitor.sim.world_shadow seed {SHADOW_SEED}, default ShadowSettings (ρ ~ U({s.rho_low}, "
          f"{s.rho_high}) per query, subset {s.subset:.0%} of the traffic); budget 2,000 labelled "
          f"sessions per bucket and hour, a look per 15 minutes, horizon {args.hours} h; runs: paired "
          f"{args.runs} (A/A {args.aa_runs}), canary {args.canary_runs} per cell.")
    results = {bucket: run_bucket(bucket, args, log) for bucket in BUCKETS}
    print_table(results, args.hours)
    print_goals(results)
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
