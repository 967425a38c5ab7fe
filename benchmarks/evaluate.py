"""Benchmark: ``monitor evaluate`` against pytrec_eval on a 20,000-query × 100-document TREC run.

World: synthetic (no real collection is involved). ``write_collection`` (seed 7) gives each query q0,
q1, ... a pool of ``docs + 20`` ids drawn uniformly from doc0..doc9999999 (repeats dropped); 40 of the
pool are judged, grades drawn from (0, 0, 0, 1, 1, 2, 3), and ``docs`` of the pool are retrieved with
scores uniform in [0, 1) printed to 6 decimals. So some judged documents are never retrieved, about
two thirds of the retrieved ones are unjudged, and a few scores tie. 20,000 × 100 gives a 2 M-line
(73 MiB) run and an 800 k-line (16 MiB) qrels.

Writes the run and qrels once, then for each repeat runs both whole processes one after the other
(which one goes first alternates):

* ``python -m monitor evaluate QRELS RUN -m nDCG@10 -m P@10 -m AP -m RR --format json`` (aggregate only),
* a pytrec_eval script doing the same from the same files (its own ``parse_qrel``/``parse_run``, then
  ``RelevanceEvaluator`` for ndcg_cut.10, P.10, map, recip_rank and the mean of each),

checks both print the same aggregates (to 1e-12), and prints for each the median wall time, CPU time
(user + system) and peak RSS (``ru_maxrss`` of the child), and the median over repeats of the per-repeat
ratios monitor / pytrec_eval. Pairing each repeat's two runs keeps the ratio steady when other work on
the machine slows both down. Goal: wall-time ratio ≤ 0.5, peak-RSS ratio ≤ 1.0.

    python benchmarks/evaluate.py [--queries 20000] [--docs 100] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PYTREC_SCRIPT = """
import json, sys, pytrec_eval
with open(sys.argv[1]) as f:
    qrels = pytrec_eval.parse_qrel(f)
with open(sys.argv[2]) as f:
    run = pytrec_eval.parse_run(f)
names = {"ndcg_cut_10": "nDCG@10", "P_10": "P@10", "map": "AP", "recip_rank": "RR"}
result = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "P.10", "map", "recip_rank"}).evaluate(run)
print(json.dumps({ours: sum(v[theirs] for v in result.values()) / len(result)
                  for theirs, ours in names.items()}))
"""


def write_collection(directory: Path, queries: int, docs: int, seed: int = 7) -> tuple[Path, Path]:
    rng = random.Random(seed)
    qrels, run = directory / "qrels", directory / "run"
    with qrels.open("w") as q_out, run.open("w") as r_out:
        for q in range(queries):
            qid = f"q{q}"
            pool = [f"doc{rng.randrange(10**7)}" for _ in range(docs + 20)]
            pool = list(dict.fromkeys(pool))
            judged = rng.sample(pool, min(len(pool), 40))  # some judged docs are never retrieved
            q_out.writelines(f"{qid} 0 {d} {rng.choice((0, 0, 0, 1, 1, 2, 3))}\n" for d in judged)
            retrieved = rng.sample(pool, docs)  # many retrieved docs are unjudged
            r_out.writelines(f"{qid} Q0 {d} {rank} {rng.random():.6f} bench\n"
                             for rank, d in enumerate(retrieved, start=1))
    return qrels, run


def timed(args: list[str]) -> tuple[float, int, str, float]:
    """Wall time (s), peak RSS (MiB), stdout and CPU time (user + system, s) of one whole process."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - started
        out.seek(0)
        stdout = out.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{args[:4]} failed: {process.stderr.read().decode() if process.stderr else ''}")
    return elapsed, usage.ru_maxrss // 1024, stdout, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=20_000)
    parser.add_argument("--docs", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        print(f"writing {options.queries} queries x {options.docs} documents ...", file=sys.stderr)
        qrels, run = write_collection(Path(folder), options.queries, options.docs)
        print(f"run {run.stat().st_size / 2**20:.0f} MiB, qrels {qrels.stat().st_size / 2**20:.0f} MiB",
              file=sys.stderr)
        ours_cmd = [sys.executable, "-m", "monitor", "evaluate", str(qrels), str(run), "-m", "nDCG@10",
                    "-m", "P@10", "-m", "AP", "-m", "RR", "--format", "json"]
        theirs_cmd = [sys.executable, "-c", PYTREC_SCRIPT, str(qrels), str(run)]
        ours: list[tuple[float, int, str, float]] = []
        theirs: list[tuple[float, int, str, float]] = []
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start", file=sys.stderr)
        for i in range(options.repeats):
            if i % 2 == 0:
                ours.append(timed(ours_cmd))
                theirs.append(timed(theirs_cmd))
            else:
                theirs.append(timed(theirs_cmd))
                ours.append(timed(ours_cmd))
            print(f"  repeat {i + 1}: monitor {ours[-1][0]:.2f}s (cpu {ours[-1][3]:.2f}s) {ours[-1][1]} MiB, "
                  f"pytrec_eval {theirs[-1][0]:.2f}s (cpu {theirs[-1][3]:.2f}s) {theirs[-1][1]} MiB",
                  file=sys.stderr)
        mine = json.loads(ours[0][2])["aggregate"]
        reference = json.loads(theirs[0][2])
        worst = max(abs(mine[m] - reference[m]) for m in reference)
        if worst > 1e-12 or any(json.loads(r[2])["aggregate"] != mine for r in ours):
            raise SystemExit(f"aggregates differ: {mine} vs {reference}")

        def median(runs: list[tuple[float, int, str, float]], field: int) -> float:
            return statistics.median(float(r[field]) for r in runs)

        def ratio(field: int) -> float:
            return statistics.median(float(a[field]) / float(b[field])
                                     for a, b in zip(ours, theirs, strict=True))

        print(f"world: synthetic, {options.queries} queries x {options.docs} documents (seed 7), "
              f"{options.repeats} repeats, {os.cpu_count()} CPUs")
        print(f"aggregates agree (max difference {worst:.1e})")
        print(f"median wall time: monitor {median(ours, 0):.2f} s, pytrec_eval {median(theirs, 0):.2f} s; "
              f"median ratio {ratio(0):.2f} (goal <= 0.5)")
        print(f"median CPU time:  monitor {median(ours, 3):.2f} s, pytrec_eval {median(theirs, 3):.2f} s; "
              f"median ratio {ratio(3):.2f}")
        print(f"median peak RSS:  monitor {median(ours, 1):.0f} MiB, "
              f"pytrec_eval {median(theirs, 1):.0f} MiB; median ratio {ratio(1):.2f} (goal <= 1.0)")

if __name__ == "__main__":
    main()
