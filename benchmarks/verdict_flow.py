"""Benchmark: the verdicts as users get them while the stream flows (issue 42), in the realistic world.

Every figure comes from runs of :mod:`monitor.sim.flow`: the realistic world of :mod:`monitor.sim.world`
(seed 2025, night dip 4%: queries of very different difficulty, a mix that follows the clock), one bucket
at a time, **traffic at 10x the default labelling budget** (2,000 sessions per bucket and hour: 20,000
impressions an hour, most of them only counted), 4 partitions, the stream's and the canary's **defaults**
(sampling paced over the hour, the join window, sessions waiting for their grades, settled looks, the
adjustment for query difficulty, sticky verdicts), **annotators who answer late** (a request is taken
within 5-45 minutes with probability 0.7, within 1-6 hours with 0.2, never with 0.1; a (query, document)
pair asked once is not asked again, as the Label Studio bridge does) and candidates that show **documents
nobody graded yet** (15% of their documents under an id of their own: the same grade, ungraded until their
sessions ask). The product's **real look schedule**: the comparisons and the alert book every 5 minutes of
event time, and **every alert that fires at any look is counted**, not only the final verdict.

The runs go through the stream core's fold (:mod:`monitor.sim.flow_fold`: the history the in-process
pipeline holds at every look, checked equal to it on every run of ``--check``, and in CI by
``tests/unit/test_verdict_flow.py``); ``--engine core`` runs the pipeline itself (minutes a run).

Scenarios, each run a fresh stream (its own seed) from the comparison's start after a warm-up, 24 h:

* ``shadow`` (12 h warm-up): four shadow candidates on every request: **eq**, the served ranker's equal
  (its lists exchanged with the served ones with probability 1/2 per session: an exact A/A); **fresh**,
  equal and showing ungraded documents; **better**, 15% better, ungraded documents; **worse**, 5% worse,
  ungraded documents;
* ``canary`` (24 h warm-up, the covariates' day): a 50/50 canary of an equal ranker (A/A), and a shadow
  candidate equal to the served ranker that sends no list for the hardest 40% of the traffic (**miss**);
* ``deploy`` (24 h warm-up, the baseline's day): an equal ranker deployed at minute 5 (A/A);
* ``mix``: a 50/50 canary whose arm gets 5% harder queries (each ranked as well as by the control);
* ``srm``: a 50/50 canary of an equal ranker losing 10% of its impressions from its 2nd hour, no share
  declared.

    python benchmarks/verdict_flow.py [--runs 500] [--quick] [--buckets head,tail] [--jobs 2]
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import pickle
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from multiprocessing import Pool
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.sim.flow import HOUR, Flow, FlowResult, run
from monitor.sim.flow_world import FlowWorld, Lister
from monitor.sim.world import World

WORLD_SEED, FLOW_SEED, DIP = 2025, 7, 0.04
OUT = Path(__file__).resolve().parent / "out"
RANKERS = (Lister("ranker-a"), Lister("ranker-b"), Lister("eq"), Lister("fresh", fresh=0.15),
           Lister("better", target=1.15, fresh=0.15), Lister("worse", target=0.95, fresh=0.15),
           Lister("miss", missing=0.4), Lister("harder", harder=0.05))


@dataclass(frozen=True)
class Cell:
    """What one scenario's runs measure of one comparison."""

    scenario: str
    kind: str
    candidate: str
    title: str
    expect: str  # "aa": nothing should fire; "pass": equal or better; "regression": a drop; "flag": a check


CELLS = (
    Cell("shadow", "shadow", "eq", "shadow A/A (equal, lists exchanged)", "aa"),
    Cell("shadow", "shadow", "fresh", "shadow equal, 15% of its documents ungraded", "pass"),
    Cell("shadow", "shadow", "better", "shadow 15% better, ungraded documents", "pass"),
    Cell("shadow", "shadow", "worse", "shadow 5% worse, ungraded documents", "regression"),
    Cell("canary", "canary", "ranker-b", "canary 50/50 A/A", "aa"),
    Cell("canary", "shadow", "miss", "shadow missing on the hardest 40%", "flag"),
    Cell("deploy", "deploy", "ranker-b", "deploy A/A at minute 5", "aa"),
    Cell("mix", "canary", "harder", "canary, 5% harder queries", "flag"),
    Cell("srm", "canary", "ranker-b", "canary, 10% sample-ratio mismatch from hour 2", "flag"),
)


def scenario(name: str, bucket: str, hours: float, warm: float | None = None) -> Flow:
    """The flow of scenario ``name`` (module docstring)."""
    base = Flow(bucket, hours=hours, warm=24.0)
    if name == "shadow":
        return replace(base, warm=12.0 if warm is None else warm, shadows=("eq", "fresh", "better", "worse"),
                       exchange="eq")
    base = base if warm is None else replace(base, warm=warm)
    if name == "canary":
        return replace(base, canary="ranker-b", shadows=("miss",))
    if name == "deploy":
        return replace(base, deploy="ranker-b")
    if name == "mix":
        return replace(base, canary="harder")
    if name == "srm":
        return replace(base, canary="ranker-b", srm=0.1, srm_hour=2.0)
    raise ValueError(f"scenario: {name!r}")


def world(bucket: str) -> FlowWorld:
    """The bucket's flowing world, built once and kept in ``benchmarks/out/``."""
    tag = hashlib.sha256(repr((RANKERS, WORLD_SEED, FLOW_SEED, DIP)).encode()).hexdigest()[:12]
    path = OUT / f"flow-world-{bucket}-{tag}.pickle"
    if path.exists():
        with path.open("rb") as f:
            found: FlowWorld = pickle.load(f)
            return found
    built = FlowWorld.build(World.build(bucket, seed=WORLD_SEED, night_dip=DIP), RANKERS, seed=FLOW_SEED)
    built.check(np.random.default_rng(1))
    OUT.mkdir(exist_ok=True)
    with path.open("wb") as f:
        pickle.dump(built, f)
    return built


# -- one run, summed up ----------------------------------------------------------------------------------
Summary = dict[str, float | None]


def summary(result: FlowResult, flow: Flow, cell: Cell) -> Summary:
    """What the tables read of one run for one cell (hours from the comparison's start; None: never)."""
    start = flow.start

    def hours(t: float | None) -> float | None:
        return None if t is None else (t - start) / HOUR

    key = (cell.kind, cell.candidate, "overall")
    last = result.last(key)
    out: Summary = {
        "alert": hours(result.fired(cell.kind, cell.candidate)),
        "alert_dcg": hours(result.fired(cell.kind, cell.candidate, "dcg")),
        "alert_pnr": hours(result.fired(cell.kind, cell.candidate, "pnr")),
        "pass": hours(result.first(key, 1)),
        "regression": hours(result.first(key, -1)),
        "final": None if last is None else float(last.code),
        "dcg_regression": hours(result.first((cell.kind, cell.candidate, "dcg"), -1)),
        "pnr_regression": hours(result.first((cell.kind, cell.candidate, "pnr"), -1)),
    }
    for check in ("sample_ratio", "covariate_balance", "shadow_coverage"):
        out[check] = hours(result.fired(cell.kind, cell.candidate, check))
    looks = result.looks.get((cell.kind, cell.candidate, "dcg"), [])
    out["first_look"] = hours(next((x.at for x in looks if x.n_candidate > 0), None))
    out["first_interval"] = hours(next((x.at for x in looks if x.lower is not None), None))
    return out


_WORLDS: dict[str, FlowWorld] = {}


def one(args: tuple[str, str, int, float, float | None, str]) -> tuple[str, str, int, dict[str, Summary],
                                                                    dict[str, float]]:
    """A run of a scenario, summed up per cell, with its pacing figures."""
    name, bucket, seed, hours, warm, engine = args
    if bucket not in _WORLDS:
        _WORLDS[bucket] = world(bucket)
    flow = scenario(name, bucket, hours, warm)
    began = time.process_time()
    result = run(_WORLDS[bucket], flow, seed, engine)
    cells = {f"{c.kind}|{c.candidate}": summary(result, flow, c) for c in CELLS if c.scenario == name}
    return name, bucket, seed, cells, {"cpu": time.process_time() - began, **pacing(result, flow)}


def pacing(result: FlowResult, flow: Flow) -> dict[str, float]:
    """The sampled sessions' spread over each hour of the comparison (each 15-minute epoch's share of its
    hour's), and how soon a deploy's ranker had sampled sessions."""
    out: dict[str, float] = {}
    if result.history is None:
        return out
    epochs = result.history.epochs
    per_epoch: dict[int, float] = {}
    for index, groups in epochs.items():
        per_epoch[index] = sum(s.get("sampled", 0.0) for g, s in groups.items() if not g.endswith("|shadow"))
    width = result.history.width
    first = math.floor(flow.start / width)
    shares = []
    for hour in range(int(flow.hours)):
        quarter = [per_epoch.get(first + 4 * hour + q, 0.0) for q in range(4)]
        if sum(quarter) > 0:
            shares.extend(q / sum(quarter) for q in quarter)
    if shares:
        out["share_min"], out["share_max"] = min(shares), max(shares)
    if flow.deploy is not None:  # the sessions of the new ranker sampled in the deploy's own epoch
        groups = epochs.get(math.floor((flow.start + flow.deploy_minute * 60) / width), {})
        out["deploy_epoch_sampled"] = sum(s.get("sampled", 0.0) for g, s in groups.items()
                                          if g.split("|")[1] == flow.deploy)
    return out


# -- the tables --------------------------------------------------------------------------------------------
def rate(values: Sequence[float | None]) -> tuple[float, float, float]:
    """The share of runs where it happened, with its 95% Wilson interval."""
    n = len(values)
    k = sum(v is not None for v in values)
    if n == 0:
        return math.nan, math.nan, math.nan
    p, z = k / n, 1.96
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return p, max(0.0, centre - half), min(1.0, centre + half)


def pct(triple: tuple[float, float, float]) -> str:
    p, lo, hi = triple
    return "—" if math.isnan(p) else f"{p:.1%} [{lo:.1%}, {hi:.1%}]"


def short(triple: tuple[float, float, float]) -> str:
    return "—" if math.isnan(triple[0]) else f"{triple[0]:.1%}"


def median(values: Sequence[float | None]) -> str:
    found = [v for v in values if v is not None]
    return "—" if not found else f"{float(np.median(found)):.2f}"


def table(bucket: str, runs: dict[str, list[dict[str, Summary]]]) -> list[str]:
    lines = [f"### {bucket}", "",
             "| cell | runs | any regression alert, any look (95% CI) | DCG · PNR alerts | "
             "final regression | "
             "pass by the end | hours to the first alert (median) | hours to pass (median) | "
             "check alerts (SRM · balance · shadow coverage) | hours to the check (median) | "
             "first look with sessions, with an interval (median h) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for cell in CELLS:
        found = [r[f"{cell.kind}|{cell.candidate}"] for r in runs.get(cell.scenario, [])]
        if not found:
            continue
        def col(name: str, runs: list[Summary] = found) -> list[float | None]:
            return [f.get(name) for f in runs]
        finals = col("final")
        final_regression = rate([1.0 if v == -1.0 else None for v in finals])
        passed = rate([1.0 if v == 1.0 else None for v in finals])
        checks = " · ".join(short(rate(col(c)))
                            for c in ("sample_ratio", "covariate_balance", "shadow_coverage"))
        check_times = [min((v for v in (f.get("sample_ratio"), f.get("covariate_balance"),
                                        f.get("shadow_coverage")) if v is not None), default=None)
                       for f in found]
        lines.append(
            f"| {cell.title} | {len(found)} | {pct(rate(col('alert')))} | "
            f"{short(rate(col('alert_dcg')))} · {short(rate(col('alert_pnr')))} | "
            f"{short(final_regression)} | {short(passed)} | {median(col('alert'))} | "
            f"{median(col('pass'))} | {checks} | {median(check_times)} | "
            f"{median(col('first_look'))}, {median(col('first_interval'))} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=500,
                        help="runs of the shadow, canary and deploy scenarios")
    parser.add_argument("--flag-runs", type=int, default=200, help="runs of the mix and srm scenarios")
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--warm", type=float, default=None, help="warm-up hours (default: per scenario)")
    parser.add_argument("--buckets", default="head,tail")
    parser.add_argument("--scenarios", default="shadow,canary,deploy,mix,srm")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--engine", default="fold", choices=("fold", "core"))
    parser.add_argument("--quick", action="store_true", help="10 runs a scenario, 8 h after a 6 h warm-up")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.flag_runs, args.hours, args.warm = 10, 10, 8.0, 6.0
    buckets = args.buckets.split(",")
    names = args.scenarios.split(",")
    for bucket in buckets:  # built (or read) once, before the workers start
        _WORLDS[bucket] = world(bucket)
    tasks = [(name, bucket, seed, args.hours, args.warm, args.engine) for bucket in buckets for name in names
             for seed in range(args.runs if name in ("shadow", "canary", "deploy") else args.flag_runs)]
    began = time.time()
    results: dict[str, dict[str, list[dict[str, Summary]]]] = {b: {} for b in buckets}
    paced: dict[str, list[dict[str, float]]] = {b: [] for b in buckets}
    with Pool(args.jobs) as pool:
        for done, (name, bucket, _, cells, extra) in enumerate(pool.imap_unordered(one, tasks), start=1):
            results[bucket].setdefault(name, []).append(cells)
            paced[bucket].append(extra)
            if done % max(1, len(tasks) // 20) == 0:
                print(f"[{time.time() - began:7.0f}s] {done}/{len(tasks)} runs", file=sys.stderr, flush=True)
    print(f"# The stream as it flows (benchmarks/verdict_flow.py, engine {args.engine}, "
          f"{args.hours:g} h per run, world seed {WORLD_SEED}, night dip {DIP:.0%}; "
          f"{time.time() - began:.0f} s wall, {os.cpu_count()} cores)\n")
    for bucket in buckets:
        w = _WORLDS[bucket]
        print(f"{bucket}: candidates' mean DCG@k over the served ranker's: " + ", ".join(
            f"{r.name} {w.ratio(i):.3f}" for i, r in enumerate(w.rankers) if i) + "\n")
        print("\n".join(table(bucket, results[bucket])) + "\n")
        extra = paced[bucket]
        lows = [e["share_min"] for e in extra if "share_min" in e]
        highs = [e["share_max"] for e in extra if "share_max" in e]
        deploy = [e["deploy_epoch_sampled"] for e in extra if "deploy_epoch_sampled" in e]
        cpu = [e["cpu"] for e in extra]
        if lows:
            print(f"pacing: each 15-minute epoch's share of its hour's sampled sessions, over every hour of "
                  f"every run: {min(lows):.1%} … {max(highs):.1%}")
        if deploy:
            print(f"deploy at minute 5: sessions of the new ranker sampled in the deploy's own 15-minute "
                  f"epoch (minutes 5-15): {min(deploy):.0f} in the worst run, median "
                  f"{float(np.median(deploy)):.0f}")
        print(f"CPU per run: median {float(np.median(cpu)):.1f} s\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
