"""Benchmark: ``monitor evaluate`` against pytrec_eval (and trec_eval) on a 20,000 × 100 TREC run.

World: synthetic (no real collection is involved). ``write_collection`` (seed 7) gives each query q0,
q1, ... a pool of ``docs + 20`` ids drawn uniformly from doc0..doc9999999 (repeats dropped); 40 of the
pool are judged, grades drawn from (0, 0, 0, 1, 1, 2, 3), and ``docs`` of the pool are retrieved with
scores uniform in [0, 1) printed to 6 decimals. So some judged documents are never retrieved, about
two thirds of the retrieved ones are unjudged, and a few scores tie. 20,000 × 100 gives a 2 M-line
(73 MiB) run and an 800 k-line (16 MiB) qrels.

Writes the run and qrels once, then for each repeat runs every whole process one after the other
(which one goes first rotates):

* ``python -m monitor evaluate QRELS RUN -m nDCG@10 -m P@10 -m AP -m RR --format json`` (aggregate only),
* a pytrec_eval script doing the same from the same files (its own ``parse_qrel``/``parse_run``, then
  ``RelevanceEvaluator`` for ndcg_cut.10, P.10, map, recip_rank and the mean of each),
* and, when given, the trec_eval C binary (``trec_eval -m ndcg_cut.10 -m P.10 -m map -m recip_rank``):
  ``--trec-eval PATH`` runs that binary; ``--trec-eval-source DIR`` builds one with trec_eval's own
  Makefile (plain ``make``, its flags as shipped: ``-g``, no ``-O``) in
  ``~/.cache/search-relevance-monitor/trec_eval/<commit or hash>/`` and reuses it on later runs. DIR is a
  checkout of https://github.com/usnistgov/trec_eval or a bare git directory of it (then its HEAD is
  built). Its code is never copied into this repository.

checks they print the same aggregates (pytrec_eval to 1e-12; trec_eval prints 4 decimals, so to 5e-5),
and prints for each the median wall time, CPU time (user + system) and peak RSS (``ru_maxrss`` of the
child), and the median over repeats of the per-repeat ratios monitor / peer. Pairing each repeat's runs
keeps the ratio steady when other work on the machine slows all of them down; the load average is
printed at the start and at the end. Goal: wall-time ratio to pytrec_eval ≤ 0.5, peak-RSS ratio ≤ 1.0.

    python benchmarks/evaluate.py [--queries 20000] [--docs 100] [--repeats 5]
                                  [--trec-eval PATH | --trec-eval-source DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
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


TREC_EVAL_NAMES = {"ndcg_cut_10": "nDCG@10", "P_10": "P@10", "map": "AP", "recip_rank": "RR"}
CACHE = Path.home() / ".cache" / "search-relevance-monitor" / "trec_eval"

Timing = tuple[float, int, str, float]


def build_trec_eval(source: Path) -> Path:
    """trec_eval built from ``source`` (a checkout or a bare git directory) with its own Makefile, cached."""
    bare = (source / "HEAD").is_file() and (source / "objects").is_dir()
    if bare:
        version = subprocess.run(["git", "--git-dir", str(source), "rev-parse", "HEAD"], check=True,
                                 capture_output=True, text=True).stdout.strip()
    else:
        digest = hashlib.sha256()
        for path in [*sorted(source.glob("*.[ch]")), source / "Makefile"]:
            digest.update(path.name.encode() + path.read_bytes())
        version = digest.hexdigest()[:16]
    binary = CACHE / version / "trec_eval"
    if binary.is_file():
        return binary
    build = CACHE / f"{version}.building"
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir(parents=True)
    if bare:
        archive = subprocess.run(["git", "--git-dir", str(source), "archive", "HEAD"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(build)], input=archive, check=True)
    else:
        shutil.copytree(source, build, dirs_exist_ok=True)
    print(f"building trec_eval {version} in {build} ...", file=sys.stderr)
    subprocess.run(["make", "-C", str(build)], check=True, capture_output=True)
    build.rename(binary.parent)
    return binary


def timed(args: list[str]) -> Timing:
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


def aggregates(name: str, stdout: str) -> dict[str, float]:
    """The four aggregates a peer printed, under our measure names."""
    if name == "monitor":
        values: dict[str, float] = json.loads(stdout)["aggregate"]
        return values
    if name == "pytrec_eval":
        return {key: float(value) for key, value in json.loads(stdout).items()}
    found = {}
    for line in stdout.splitlines():
        measure, query, value = line.split()
        if query == "all" and measure in TREC_EVAL_NAMES:
            found[TREC_EVAL_NAMES[measure]] = float(value)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=20_000)
    parser.add_argument("--docs", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    peer = parser.add_mutually_exclusive_group()
    peer.add_argument("--trec-eval", type=Path, metavar="PATH", help="a trec_eval binary to time as well")
    peer.add_argument("--trec-eval-source", type=Path, metavar="DIR",
                      help="trec_eval's source (checkout or bare git dir): built into ~/.cache, then timed")
    options = parser.parse_args()
    trec_eval = options.trec_eval
    if options.trec_eval_source is not None:
        trec_eval = build_trec_eval(options.trec_eval_source)
    if trec_eval is not None and not os.access(trec_eval, os.X_OK):
        raise SystemExit(f"{trec_eval}: not an executable trec_eval")
    with tempfile.TemporaryDirectory() as folder:
        print(f"writing {options.queries} queries x {options.docs} documents ...", file=sys.stderr)
        qrels, run = write_collection(Path(folder), options.queries, options.docs)
        print(f"run {run.stat().st_size / 2**20:.0f} MiB, qrels {qrels.stat().st_size / 2**20:.0f} MiB",
              file=sys.stderr)
        commands = {
            "monitor": [sys.executable, "-m", "monitor", "evaluate", str(qrels), str(run), "-m", "nDCG@10",
                        "-m", "P@10", "-m", "AP", "-m", "RR", "--format", "json"],
            "pytrec_eval": [sys.executable, "-c", PYTREC_SCRIPT, str(qrels), str(run)],
        }
        if trec_eval is not None:
            commands["trec_eval"] = [str(trec_eval), "-m", "ndcg_cut.10", "-m", "P.10", "-m", "map", "-m",
                                     "recip_rank", str(qrels), str(run)]
        names = list(commands)
        runs: dict[str, list[Timing]] = {name: [] for name in names}
        load_at_start = os.getloadavg()[0]
        print(f"{os.cpu_count()} CPUs, load average {load_at_start:.2f} at start", file=sys.stderr)
        for i in range(options.repeats):
            for name in names[i % len(names):] + names[:i % len(names)]:
                runs[name].append(timed(commands[name]))
            print(f"  repeat {i + 1}: " + ", ".join(
                f"{name} {runs[name][-1][0]:.2f}s (cpu {runs[name][-1][3]:.2f}s) {runs[name][-1][1]} MiB"
                for name in names), file=sys.stderr)
        load_at_end = os.getloadavg()[0]
        mine = aggregates("monitor", runs["monitor"][0][2])
        if any(aggregates("monitor", r[2]) != mine for r in runs["monitor"]):
            raise SystemExit("monitor printed different aggregates in different repeats")
        worst = {}
        for name, tolerance in (("pytrec_eval", 1e-12), ("trec_eval", 5e-5 + 1e-12)):
            if name in runs:
                theirs = aggregates(name, runs[name][0][2])
                worst[name] = max(abs(mine[m] - theirs[m]) for m in TREC_EVAL_NAMES.values())
                if worst[name] > tolerance:
                    raise SystemExit(f"aggregates differ from {name}: {mine} vs {theirs}")

        def median(name: str, field: int) -> float:
            return statistics.median(float(r[field]) for r in runs[name])

        def ratio(name: str, field: int) -> float:
            return statistics.median(float(a[field]) / float(b[field])
                                     for a, b in zip(runs["monitor"], runs[name], strict=True))

        peers = names[1:]
        print(f"world: synthetic, {options.queries} queries x {options.docs} documents (seed 7), "
              f"{options.repeats} repeats, {os.cpu_count()} CPUs, load average {load_at_start:.2f} at start, "
              f"{load_at_end:.2f} at end")
        print("aggregates agree: " + ", ".join(f"{name} max difference {worst[name]:.1e}" for name in peers)
              + (" (trec_eval prints 4 decimals)" if "trec_eval" in peers else ""))
        goals = {0: " (goal vs pytrec_eval <= 0.5)", 1: " (goal vs pytrec_eval <= 1.0)", 3: ""}
        for label, field, unit in (("wall time", 0, "s"), ("CPU time", 3, "s"), ("peak RSS", 1, "MiB")):
            digits = 0 if unit == "MiB" else 2
            print(f"median {label + ':':10s} " + ", ".join(
                f"{name} {median(name, field):.{digits}f} {unit}" for name in names)
                + "; median ratio " + ", ".join(f"vs {name} {ratio(name, field):.2f}" for name in peers)
                + goals[field])


if __name__ == "__main__":
    main()
