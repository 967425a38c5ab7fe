"""The extremes of ``benchmarks/canary.py`` (issue 26): verdicts on the worst failures and when they cannot be
trusted, in the realistic world, with the monitor's defaults beside the alternatives.

Rows (:mod:`canary_world` simulates them; the verdicts are :mod:`monitor.core.canary.metric_paths`'s):

* **breakage**: 50, 90, 99 and 100% of the candidate's sessions show a list with nothing relevant in it
  (DCG 0); a 50/50 canary and a 5% canary (random start hour) and a deploy at 10:00 UTC, 24 h, night dip
  4%. Methods: *default* (what users get: adjusted for query difficulty with each arm's slope, the
  balance check, exact bounds for an arm at 0), *adjustment off*, and *before* (the verdict until this
  issue: one slope pooled over both arms, no bounds).
* **PNR on broken lists**: 5% and 100% of the candidate's lists all irrelevant, a 50/50 canary over 48 h:
  the PNR verdict (grade-tied pairs left out, guarded by the pairs of different grades), PNR with the
  seed's convention as the verdict used it before, the DCG verdict and the overall verdict.
* **mix shift**: the candidate's traffic has harder queries (its expected mean DCG@k 5% lower from the
  mix alone, every query ranked as well as by the baseline), 50/50, 24 h: the balance check, the default
  verdict, and the adjustment without the check.
* **sample-ratio mismatch**: the canary gets 10% fewer sessions than its declared share (50% and 5%),
  24 h: the sample-ratio check, and the A/A false alarms of both checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from canary_world import (
    LOOKS_PER_HOUR,
    Scenario,
    default_dcg,
    default_pnr,
    pooled_dcg,
    sample_ratio_flags,
    seed_pnr,
    simulate,
    unchecked_dcg,
)

from monitor.core.canary.verdict_paths import PASS, REGRESSION
from monitor.sim.world import World

NEVER = np.iinfo(np.int64).max
BREAKAGE = (0.5, 0.9, 0.99, 1.0)
SETTINGS = (("canary", 0.5), ("canary", 0.05), ("deploy", 1.0))
HOURS_24, HOURS_48 = 24, 48
Result = dict[str, npt.NDArray[np.generic]]


def first(flags: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    hit = flags.any(axis=-1)
    return np.where(hit, flags.argmax(axis=-1), NEVER).astype(np.int64)


def mismatched(share: float, loss: float) -> float:
    """The candidate's actual share when it loses ``loss`` of its sessions (a broken router, a bot filter)."""
    return share * (1 - loss) / (share * (1 - loss) + (1 - share))


@dataclass(frozen=True)
class Cell:
    """One row's simulation: ``name`` (breakage, pnr, mix, srm), the bucket and the scenario's knobs."""

    name: str
    bucket: str
    kind: str
    share: float
    value: float
    runs: int
    seed: int


def scenario(cell: Cell) -> Scenario:
    if cell.name == "breakage":
        looks = HOURS_24 * LOOKS_PER_HOUR
        if cell.kind == "deploy":
            return Scenario("deploy", HOURS_24, irrelevant=cell.value)
        shares = np.full(looks, cell.share)
        return Scenario("canary", HOURS_24, shares, shares, irrelevant=cell.value)
    if cell.name == "pnr":
        shares = np.full(HOURS_48 * LOOKS_PER_HOUR, 0.5)
        return Scenario("canary", HOURS_48, shares, shares, irrelevant=cell.value)
    shares = np.full(HOURS_24 * LOOKS_PER_HOUR, cell.share)
    if cell.name == "srm":
        return Scenario("canary", HOURS_24, shares, np.full_like(shares, mismatched(cell.share, cell.value)))
    return Scenario("canary", HOURS_24, shares, shares)  # mix (value: how much harder), or A/A


def run_cell(cell: Cell, world: World) -> Result:
    """One cell's runs, judged by each method (module docstring); per run the first look of each event."""
    harder = world.with_harder_mix(cell.value) if cell.name == "mix" else None
    s = scenario(cell)
    runs = simulate(world, s, cell.runs, cell.seed, harder=harder)
    default = default_dcg(runs, world)
    out: Result = {"eligible": first(default.path.eligible),
                   "default": first(default.path.code == REGRESSION)}
    if cell.name == "breakage":
        out["off"] = first(default_dcg(runs, world, adjusted=False).path.code == REGRESSION)
        out["before"] = first(pooled_dcg(runs).code == REGRESSION)
        pnr = default_pnr(runs, world)
        out["pnr"] = first(pnr.path.code == REGRESSION)
        out["overall"] = np.minimum(out["default"], out["pnr"])
    elif cell.name == "pnr":
        pnr, seed = default_pnr(runs, world), seed_pnr(runs)
        out["pnr_reg"], out["pnr_pass"] = first(pnr.path.code == REGRESSION), first(pnr.path.code == PASS)
        out["seed_reg"], out["seed_pass"] = first(seed.code == REGRESSION), first(seed.code == PASS)
        out["overall"] = np.minimum(out["default"], out["pnr_reg"])
    elif cell.name in ("mix", "srm", "aa"):
        assert default.imbalanced is not None
        out["imbalance"] = first(default.imbalanced)
        unchecked = unchecked_dcg(runs, world)
        out["unchecked_pass"] = first(unchecked.code == PASS)
        out["unchecked_reg"] = first(unchecked.code == REGRESSION)
        assert s.share is not None
        out["srm"] = first(sample_ratio_flags(runs, s.share))
        out["off"] = first(default_dcg(runs, world, adjusted=False).path.code == REGRESSION)
    return out


def cells(runs: int, seed: int) -> list[Cell]:
    out = []
    for bucket in ("head", "tail"):
        for kind, share in SETTINGS:
            for value in BREAKAGE:
                out.append(Cell("breakage", bucket, kind, share, value, runs, seed))
                seed += 1
        for value in (0.05, 1.0):
            out.append(Cell("pnr", bucket, "canary", 0.5, value, runs, seed))
            seed += 1
        out.append(Cell("mix", bucket, "canary", 0.5, 0.05, runs, seed))
        out.append(Cell("aa", bucket, "canary", 0.5, 0.0, runs, seed + 1))
        out.append(Cell("aa", bucket, "canary", 0.05, 0.0, runs, seed + 2))
        out.append(Cell("srm", bucket, "canary", 0.5, 0.10, runs, seed + 3))
        out.append(Cell("srm", bucket, "canary", 0.05, 0.10, runs, seed + 4))
        seed += 5
    return out


# -- printing ---------------------------------------------------------------------------------------------
def rate(index: npt.NDArray[np.generic]) -> float:
    return float((np.asarray(index) != NEVER).mean())


def hours(index: npt.NDArray[np.generic]) -> str:
    hit = np.asarray(index)[np.asarray(index) != NEVER]
    return "—" if hit.size == 0 else f"{(np.median(hit) + 1) / LOOKS_PER_HOUR:.2f}"


def setting_name(kind: str, share: float) -> str:
    return "deploy 10:00" if kind == "deploy" else f"canary {share:.0%}"


def print_breakage(results: Sequence[tuple[Cell, Result]]) -> None:
    print("### A candidate that returns nothing relevant (DCG 0) in part of its sessions\n")
    print("24 h, night dip 4%, default labelling budget; 'at the first look': the regression came at the "
          "first "
          "look where both arms had `min_sessions` (200); hours: median from the start, over the runs that "
          "reached it. default = what users get; off = the adjustment for query difficulty off; before = the "
          "verdict until this issue (one slope pooled over both arms, no exact bounds).\n")
    print("| bucket | setting | broken | runs | DCG regression: default · off · before | at the first look: "
          "default | hours to regression: default · off · before | PNR regression | overall regression "
          "(at the first look) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for cell, r in results:
        if cell.name != "breakage":
            continue
        at_first = float(((r["default"] == r["eligible"]) & (r["default"] != NEVER)).mean())
        overall_first = float(((r["overall"] == r["eligible"]) & (r["overall"] != NEVER)).mean())
        print(f"| {cell.bucket} | {setting_name(cell.kind, cell.share)} | {cell.value:.0%} | {cell.runs} | "
              f"{rate(r['default']):.1%} · {rate(r['off']):.1%} · {rate(r['before']):.1%} | {at_first:.1%} | "
              f"{hours(r['default'])} · {hours(r['off'])} · {hours(r['before'])} | {rate(r['pnr']):.1%} | "
              f"{rate(r['overall']):.1%} ({overall_first:.1%}) |")
    print()


def print_pnr(results: Sequence[tuple[Cell, Result]]) -> None:
    print("### PNR on lists with nothing relevant in them (50/50 canary, 48 h)\n")
    print("The candidate is the baseline's ranker except that a share of its lists are all irrelevant (every "
          "pair grade-tied). PNR (default): concordant / discordant, guarded by the pairs of different "
          "grades; ties-positive convention: grade-tied pairs counted as positive, as the verdict was "
          "decided before.\n")
    print("| bucket | lists all irrelevant | runs | PNR: pass · regression | ties-positive PNR: pass · "
          "regression | DCG regression | overall regression |")
    print("|---|---|---|---|---|---|---|")
    for cell, r in results:
        if cell.name != "pnr":
            continue
        print(f"| {cell.bucket} | {cell.value:.0%} | {cell.runs} | {rate(r['pnr_pass']):.1%} · "
              f"{rate(r['pnr_reg']):.1%} | {rate(r['seed_pass']):.1%} · {rate(r['seed_reg']):.1%} | "
              f"{rate(r['default']):.1%} | {rate(r['overall']):.1%} |")
    print()


def print_checks(results: Sequence[tuple[Cell, Result]]) -> None:
    print("### When a verdict cannot be trusted as it stands: mix shift and sample-ratio mismatch (24 h)\n")
    print("mix shift: the candidate's traffic has harder queries (its expected mean DCG@k 5% lower from the "
          "mix alone); srm: the canary gets 10% fewer sessions than its declared share; A/A: neither. "
          "Flagged: the "
          "check declared it within 24 h. DCG regression: default (falls back to the unadjusted comparison "
          "on an imbalance) · off · the adjustment without the check (pass in brackets).\n")
    print("| bucket | scenario | runs | imbalance flagged | sample ratio flagged | hours to the flag "
          "(median) | "
          "DCG regression: default · off · adjusted without the check (its pass) |")
    print("|---|---|---|---|---|---|---|")
    for cell, r in results:
        if cell.name not in ("mix", "srm", "aa"):
            continue
        name = {"mix": "mix shift −5%", "srm": f"srm −10% at {cell.share:.0%}",
                "aa": f"A/A at {cell.share:.0%}"}
        flag = r["imbalance"] if cell.name == "mix" else r["srm"]
        print(f"| {cell.bucket} | {name[cell.name]} | {cell.runs} | {rate(r['imbalance']):.1%} | "
              f"{rate(r['srm']):.1%} | {hours(flag)} | {rate(r['default']):.1%} · {rate(r['off']):.1%} · "
              f"{rate(r['unchecked_reg']):.1%} ({rate(r['unchecked_pass']):.1%}) |")
    print()


def print_goals(results: Sequence[tuple[Cell, Result]], alpha: float,
                realistic: Sequence[tuple[str, float]] = ()) -> None:
    """The issue's must-show lines, from the rows above; ``realistic``: (what, rate) of the A/A false
    alarms of the other tables (canary, deploy, ramp cells), for the A/A line."""
    rows = []
    total = [(c, r) for c, r in results if c.name == "breakage" and c.value == 1.0]
    def at_first(r: Result, key: str) -> float:
        return float(((r[key] == r["eligible"]) & (r[key] != NEVER)).mean())

    worst = min(min(at_first(r, "default"), at_first(r, "overall")) for _, r in total)
    rows.append(("100% broken: regression at the first look with min_sessions, DCG and overall, every "
                 "setting (≥ 99%)", f"lowest {worst:.1%}", worst >= 0.99))
    near = [(c, r) for c, r in results if c.name == "breakage" and c.value == 0.99]
    slower = []
    for c, r in near:
        d, o = np.asarray(r["default"]), np.asarray(r["off"])
        med_d = np.median(np.where(d == NEVER, 10**9, d))
        med_o = np.median(np.where(o == NEVER, 10**9, o))
        slower.append((c, med_d, med_o))
    ok = all(d <= o for _, d, o in slower)
    text = "; ".join(f"{c.bucket} {setting_name(c.kind, c.share)} {(d + 1) / 4:.2f} vs {(o + 1) / 4:.2f} h"
                     for c, d, o in slower)
    rows.append(("99% broken: median hours to regression, default no worse than the adjustment off", text,
                 ok))
    pnr = [(c, r) for c, r in results if c.name == "pnr" and c.value == 0.05]
    ok = all(rate(r["overall"]) >= 0.99 and rate(r["pnr_pass"]) == 0 for _, r in pnr)
    rows.append(("5% all-irrelevant lists: overall regression, no PNR pass",
                 "; ".join(f"{c.bucket}: overall {rate(r['overall']):.1%}, PNR pass {rate(r['pnr_pass']):.1%}"
                           for c, r in pnr), ok))
    flags = [(c, r) for c, r in results if c.name in ("mix", "srm")]
    ok = all(rate(r["imbalance"] if c.name == "mix" else r["srm"]) >= 0.95 for c, r in flags)
    rows.append(("10% sample-ratio mismatch and a mix-shifting candidate flagged within 24 h (≥ 95%)",
                 "; ".join(f"{c.bucket} {c.name}{'' if c.name == 'mix' else f' {c.share:.0%}'}: "
                           f"{rate(r['imbalance'] if c.name == 'mix' else r['srm']):.1%}" for c, r in flags),
                 ok))
    aa = [(c, r) for c, r in results if c.name == "aa"]
    alarms = [(f"{c.bucket} A/A at {c.share:.0%} {what}", rate(r[key])) for c, r in aa
              for what, key in (("regression", "default"), ("imbalance", "imbalance"),
                                ("sample ratio", "srm"))]
    alarms += list(realistic)
    worst = max(alarms, key=lambda item: item[1])
    rows.append((f"A/A: false regressions and false mismatch alarms ≤ α = {alpha:.0%} in every realistic "
                 "cell "
                 "(50/50 and 5% canaries, deploy hours × dips, ramped; default)",
                 f"highest {worst[1]:.1%} ({worst[0]}) of {len(alarms)} rates", worst[1] <= alpha))
    print("### The issue's goals (issue 26)\n")
    print("| goal | measured | met |")
    print("|---|---|---|")
    for goal, measured, met in rows:
        print(f"| {goal} | {measured} | {'yes' if met else 'NO'} |")
    print()
