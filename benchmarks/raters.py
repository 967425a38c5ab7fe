"""Benchmark: rater quality with simulated annotators (issue 30, item 4), for docs/annotate.md.

Runs :func:`monitor.sim.raters.run_panel` (the annotation loop: 10% of pairs overlapped, a third
annotator past one step of disagreement, 5% gold tasks) over the simulator's true grades, for panels of
``--panel`` annotators (default 5 and 10), each scenario over ``--seeds`` seeds:

* ``honest``: every annotator honest (one step off with probability 0.2);
* ``careless``: one annotator answers uniformly at random, the others honest;
* ``drifting``: one annotator grows 1 level harsher per hour over a 2-hour run;
* ``noisy``: every annotator honest but one step off with probability 0.4 (a hard guideline).

Prints per scenario the overall ordinal alpha and the lowest per-bucket alpha (min and max over seeds),
the honest annotators' lowest kappa against their peers and gold accuracy, the odd annotator's, the share
of chosen grades equal to the truth, and what :func:`monitor.core.agreement.tally.assess` flags with the
default :class:`RaterThresholds` (in how many seeds). ``python benchmarks/raters.py`` takes about a minute
on the 2-core machine with the defaults (20,000 pairs a run: about 20 minutes of the default budget's
requests, 2,000 sessions per bucket and hour with about 10 unjudged documents each, issue 30).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from monitor.core.agreement.tally import RaterThresholds, assess
from monitor.sim.raters import PanelConfig, PanelRun, RaterSpec, honest_panel, run_panel


def scenario(name: str, size: int) -> tuple[tuple[RaterSpec, ...], float]:
    """The panel of a scenario (the odd annotator last) and the run's hours."""
    honest = honest_panel(size)
    if name == "honest":
        return honest, 1.0
    if name == "careless":
        return (*honest[:-1], RaterSpec(f"r{size}", kind="careless")), 1.0
    if name == "drifting":
        return (*honest[:-1], RaterSpec(f"r{size}", kind="drifting", drift_per_hour=-1.0)), 2.0
    if name == "noisy":
        return honest_panel(size, noise=0.4), 1.0
    raise ValueError(name)


def figures(run: PanelRun, odd: str) -> dict[str, float]:
    tally = run.tally
    bucket_alphas = [c.alpha("ordinal") or 0.0 for c in tally.buckets.values()]
    kappas = {r: m.kappa("quadratic") or 0.0 for r, m in tally.peers.items()}
    gold = {r: m.exact_share() or 0.0 for r, m in tally.gold.items()}
    others = [r for r in kappas if r != odd]
    return {
        "alpha": tally.overall().alpha("ordinal") or 0.0,
        "bucket_alpha_min": min(bucket_alphas),
        "honest_kappa_min": min(kappas[r] for r in others),
        "honest_gold_min": min(gold[r] for r in others),
        "odd_kappa": kappas[odd],
        "odd_gold": gold[odd],
        "odd_within": tally.gold[odd].within_share(1) or 0.0,
        "chosen_exact": run.chosen_exact(),
        "thirds": run.thirds / run.overlapped,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=20_000)
    parser.add_argument("--panel", type=int, nargs="+", default=[5, 10])
    args = parser.parse_args()
    thresholds = RaterThresholds()
    print(f"thresholds: {thresholds}")
    started = time.perf_counter()
    for size in args.panel:
        for name in ("honest", "careless", "drifting", "noisy"):
            raters, hours = scenario(name, size)
            odd = raters[-1].name
            rows = []
            flagged: Counter[str] = Counter()
            for seed in range(args.seeds):
                run = run_panel(PanelConfig(raters=raters, pairs=args.pairs, hours=hours, seed=seed))
                rows.append(figures(run, odd))
                low = [f for f in assess(run.tally, thresholds) if f.status == "low"]
                flagged.update(f"{f.key}:{f.measure}" for f in low)
            spans = {k: (min(r[k] for r in rows), max(r[k] for r in rows)) for k in rows[0]}
            text = "  ".join(f"{k} {lo:.3f}–{hi:.3f}" for k, (lo, hi) in spans.items())
            print(f"panel {size:2d} {name:9s} {text}")
            counts = ", ".join(f"{name} {flagged[name]}/{args.seeds}" for name in sorted(flagged))
            print(f"{'':19s}flagged low (seeds): {counts or 'nothing'}")
    print(f"{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
