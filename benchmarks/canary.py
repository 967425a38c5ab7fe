"""Benchmark: the canary verdict under continuous monitoring, against two common canary rules.

Sessions come from the project's simulator (:mod:`monitor.sim`) made sparser than its defaults (most
documents irrelevant, queries that vary a lot, ``grade_concentration`` 1): for each bucket a pool of
sessions, each shown by a healthy ranker and, for the same query, by a broken one (relevance signal
flipped), with DCG@k and PNR pair counts computed by :mod:`monitor.core`. Tail DCG@20 then has 37%
zeros, a coefficient of variation of 1.24 and heavy ties (five values hold half the sessions).

A simulated canary is one stream of ``--horizon`` sessions assigned at random to control or canary
(50/50). Control sessions are drawn from the healthy pool; a canary session is the broken list of its
query with probability q, else the healthy one, q chosen so that the canary's mean DCG (or its PNR) is
exactly ``drop`` below the control's (A/A: q = 0). On the same streams:

* **sequential** (this monitor, :func:`monitor.core.canary.compare` vectorised by
  :mod:`monitor.core.canary.paths`): verdict after *every* session, defaults (α 0.05, minimum drop of
  interest 2%, 200 sessions per arm, τ 0.05);
* **threshold** (Argo Rollouts / Flagger style): every ``--interval`` sessions, the interval's
  canary/control ratio is checked against 0.95 (and, separately, 0.90); regression when 3 checks have
  failed (failure limit 3); pass at the end of the horizon;
* **Mann–Whitney** (Kayenta style): every ``--interval`` sessions, a two-sided Mann–Whitney U test (tie
  corrected, normal approximation) of all canary vs all control sessions so far at 98% confidence;
  regression when the canary is significantly lower; pass at the end. Per-session values: DCG@k, and
  for PNR the session's positive-pair share P / (P + N) (ranks equal those of per-session P / N).

Printed: per bucket, metric, true change and method, the share of canaries with a regression verdict
within the horizon (A/A: false alarms, must be ≤ α for the sequential test) and the median sessions per
arm until it, and the share that passed (sequential: first decisive verdict was pass) with its median.

    python benchmarks/canary.py [--aa 2000] [--ab 500] [--horizon 40000] [--workers 2] [--quick]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.core.canary import CanaryConfig
from monitor.core.canary.paths import PASS, REGRESSION, log_mean_path, log_pnr_path, verdict_path
from monitor.core.metrics import dcg
from monitor.core.metrics.pairs import pair_counts
from monitor.sim.config import BUCKETS, SimConfig
from monitor.sim.queries import build_vocabulary
from monitor.sim.rankers import Ranker
from monitor.sim.relevance import LEVEL_GAINS, draw_pools

FloatArray = npt.NDArray[np.float64]
SIM = SimConfig(seed=1, grades_head=(0.55, 0.25, 0.12, 0.08), grades_torso=(0.70, 0.18, 0.08, 0.04),
                grades_tail=(0.80, 0.12, 0.06, 0.02), grade_concentration=1.0, pool_head=200, pool_other=100)
THRESHOLDS, FAILURE_LIMIT = (0.95, 0.90), 3
MW_Z = 2.3263478740408408  # two-sided 98%: Φ⁻¹(0.99)
NEVER = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Pool:
    """Per pooled session: DCG@k and pair counts (P = concordant + grade-tied, N = discordant), healthy and
    broken."""

    dcg: FloatArray
    dcg_broken: FloatArray
    pos: FloatArray
    neg: FloatArray
    pos_broken: FloatArray
    neg_broken: FloatArray


def build_pool(bucket: str, size: int, seed: int) -> Pool:
    rng = np.random.default_rng(seed)
    vocabulary = build_vocabulary(SIM, rng)
    pools = draw_pools(SIM, vocabulary, rng)
    ranker = Ranker("bench", SIM.score_weight, SIM.session_noise)
    numbers = np.asarray(vocabulary.of_bucket(bucket))
    weights = vocabulary.probabilities[numbers] / vocabulary.probabilities[numbers].sum()
    gains = np.asarray(LEVEL_GAINS)
    k, top = SIM.label_k(bucket), SIM.top_n(bucket)
    out: dict[bool, list[list[float]]] = {False: [[], [], []], True: [[], [], []]}
    for query in rng.choice(numbers, size=size, p=weights):
        levels, effects = pools.levels[query], pools.doc_effects[query]
        for broken in (False, True):
            ranking = ranker.rank(levels, effects, top, rng, broken=broken)
            shown = levels[ranking.indices][:k]
            pairs = pair_counts(shown, ranking.scores[:k])
            out[broken][0].append(dcg(gains[shown], k))
            out[broken][1].append(pairs.concordant + pairs.grade_tied)
            out[broken][2].append(pairs.discordant)
    a = {b: [np.asarray(v, dtype=np.float64) for v in out[b]] for b in (False, True)}
    return Pool(a[False][0], a[True][0], a[False][1], a[False][2], a[True][1], a[True][2])


def broken_share(pool: Pool, metric: str, drop: float) -> float:
    """q such that mixing broken sessions at rate q lowers the mean DCG (or PNR = ΣP/ΣN) by ``drop``."""
    if drop == 0.0:
        return 0.0
    if metric == "dcg":
        mean, broken = pool.dcg.mean(), pool.dcg_broken.mean()
        q = float(drop * mean / (mean - broken))
    else:
        p, n, pb, nb = pool.pos.mean(), pool.neg.mean(), pool.pos_broken.mean(), pool.neg_broken.mean()
        q = float(drop * p / (p - pb + (1 - drop) * p / n * (nb - n)))
    if not 0.0 < q <= 1.0:
        raise ValueError(f"{metric}: even an all-broken canary cannot lower it by {drop:.0%} (q = {q:.2f})")
    return q


def first(flags: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    """Index of the first True per row, NEVER if none."""
    hit = flags.any(axis=1)
    return np.where(hit, flags.argmax(axis=1), NEVER).astype(np.int64)


def mann_whitney_z(counts_c: npt.NDArray[np.int64], counts_b: npt.NDArray[np.int64]) -> FloatArray:
    """z of the Mann–Whitney U of canary vs control from per-value counts (rows: streams; columns: the
    sorted distinct values), mid-ranks for ties, tie-corrected variance, continuity correction 0.5."""
    n1, n2 = counts_c.sum(axis=1).astype(np.float64), counts_b.sum(axis=1).astype(np.float64)
    total = counts_c + counts_b
    below = np.cumsum(total, axis=1) - total
    rank_sum = (counts_c * (below + (total + 1) / 2.0)).sum(axis=1)
    u = rank_sum - n1 * (n1 + 1) / 2.0
    n = n1 + n2
    ties = (total.astype(np.float64) ** 3 - total).sum(axis=1)
    variance = n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1)))
    centred = u - n1 * n2 / 2.0
    return np.asarray((centred - np.sign(centred) * 0.5) / np.sqrt(variance), dtype=np.float64)


Task = tuple[str, str, float, int, int, int, int, CanaryConfig]


def simulate(task: Task) -> dict[str, npt.NDArray[np.int64]]:
    """One batch of canaries: the first index (session) of each method's regression and pass."""
    bucket, metric, drop, streams, horizon, interval, seed, config = task
    pool = POOLS[bucket]
    q = broken_share(pool, metric, drop)
    rng = np.random.default_rng(seed)
    names = ("seq_reg", "seq_pass", "mw_reg", *(f"thr_reg_{t}" for t in THRESHOLDS))
    result: dict[str, list[npt.NDArray[np.int64]]] = {name: [] for name in names}
    if metric == "dcg":
        values = np.concatenate([pool.dcg, pool.dcg_broken])
    else:
        both_p = np.concatenate([pool.pos, pool.pos_broken])
        both_n = np.concatenate([pool.neg, pool.neg_broken])
        values = both_p / np.maximum(both_p + both_n, 1.0)
    distinct, codes = np.unique(np.round(values, 9), return_inverse=True)
    size = pool.dcg.size
    for start in range(0, streams, 20):
        c = min(20, streams - start)
        canary = rng.random((c, horizon)) < 0.5
        index = rng.integers(0, size, (c, horizon)) + size * (canary & (rng.random((c, horizon)) < q))
        arms = (~canary, canary)
        masks = [a.astype(np.float64) for a in arms]
        def per_interval(v: FloatArray, rows: int = c) -> FloatArray:
            return np.asarray(v.reshape(rows, -1, interval).sum(axis=2), dtype=np.float64)

        if metric == "dcg":
            x = values[index]
            paths = [log_mean_path(*(np.cumsum(v, axis=1) for v in (m, x * m, x * x * m))) for m in masks]
            window = [per_interval(x * m) / np.maximum(per_interval(m), 1.0) for m in masks]
        else:
            p = np.concatenate([pool.pos, pool.pos_broken])[index]
            n = np.concatenate([pool.neg, pool.neg_broken])[index]
            moments = (np.ones_like(p), p, n, p * p, n * n, p * n)
            paths = [log_pnr_path(*(np.cumsum(v * m, axis=1) for v in moments)) for m in masks]
            window = [per_interval(p * m) / np.maximum(per_interval(n * m), 1.0) for m in masks]
        code = verdict_path(paths[0], paths[1], config).code
        result["seq_reg"].append(first(code == REGRESSION))
        result["seq_pass"].append(first(code == PASS))
        for threshold in THRESHOLDS:
            with np.errstate(divide="ignore", invalid="ignore"):
                failed = np.cumsum(window[1] / window[0] < threshold, axis=1) >= FAILURE_LIMIT
            at = (failed.argmax(axis=1) + 1) * interval - 1
            result[f"thr_reg_{threshold}"].append(np.where(failed.any(axis=1), at, NEVER))
        # Mann–Whitney on cumulative per-value counts at the end of every interval
        counts = [np.zeros((c, distinct.size), dtype=np.int64) for _ in arms]
        rows = np.arange(c)[:, None] * distinct.size
        hit = np.full(c, NEVER, dtype=np.int64)
        for j in range(horizon // interval):
            part = slice(j * interval, (j + 1) * interval)
            flat = (rows + codes[index[:, part]]).ravel()
            for counter, arm in zip(counts, arms, strict=True):
                counter += np.bincount(flat[arm[:, part].ravel()], minlength=c * distinct.size).reshape(c, -1)
            z = mann_whitney_z(counts[1], counts[0])
            hit = np.where((hit == NEVER) & (z < -MW_Z), (j + 1) * interval - 1, hit)
        result["mw_reg"].append(hit)
    return {name: np.concatenate(parts) for name, parts in result.items()}


POOLS: dict[str, Pool] = {}


def _init(pools: dict[str, Pool]) -> None:
    POOLS.update(pools)


def median_per_arm(index: npt.NDArray[np.int64]) -> str:
    hit = index[index != NEVER]
    return f"{np.median(hit + 1) / 2:,.0f}" if hit.size else "—"


def rate(index: npt.NDArray[np.int64]) -> float:
    return float((index != NEVER).mean())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--aa", type=int, default=2000, help="A/A canaries of the A/B table's bucket:metric")
    parser.add_argument("--aa-other", type=int, default=500, help="A/A canaries of the other bucket:metric")
    parser.add_argument("--ab", type=int, default=500, help="A/B canaries per drop and bucket:metric")
    parser.add_argument("--ab-pairs", default="tail:dcg,head:pnr",
                        help="bucket:metric pairs of the A/B table (tail PNR is dominated by tied pairs of "
                             "irrelevant documents: no ranker can lower it by 10%%)")
    parser.add_argument("--horizon", type=int, default=40_000, help="sessions per canary (both arms)")
    parser.add_argument("--interval", type=int, default=1_000, help="sessions between checks of the rules")
    parser.add_argument("--pool", type=int, default=20_000, help="pooled sessions per bucket")
    parser.add_argument("--mixture-sd", type=float, default=CanaryConfig.mixture_sd, help="τ of the test")
    parser.add_argument("--min-sessions", type=int, default=CanaryConfig.min_sessions, help="per arm")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a small run for a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.aa, args.aa_other, args.ab, args.horizon, args.pool = 100, 50, 40, 20_000, 3_000
    if args.horizon % args.interval:
        parser.error("--horizon must be a multiple of --interval")
    config = CanaryConfig(mixture_sd=args.mixture_sd, min_sessions=args.min_sessions)
    started = time.perf_counter()
    pools = {}
    for i, bucket in enumerate(BUCKETS):
        pools[bucket] = build_pool(bucket, args.pool, seed=100 + i)
        print(f"[{time.perf_counter() - started:5.1f} s] pool {bucket}: {args.pool} sessions",
              file=sys.stderr)
    for bucket, pool in pools.items():
        _, counts = np.unique(pool.dcg, return_counts=True)
        pnr, pnr_broken = pool.pos.sum() / pool.neg.sum(), pool.pos_broken.sum() / pool.neg_broken.sum()
        print(f"{bucket}: mean DCG@{SIM.label_k(bucket)} {pool.dcg.mean():.3f} "
              f"(broken {pool.dcg_broken.mean():.3f}), cv {pool.dcg.std() / pool.dcg.mean():.2f}, "
              f"zeros {(pool.dcg == 0).mean():.0%}, 5 commonest values "
              f"{np.sort(counts)[-5:].sum() / pool.dcg.size:.0%} of sessions; PNR {pnr:.1f} "
              f"(broken {pnr_broken:.1f}), sessions without inversions {(pool.neg == 0).mean():.0%}")

    tested = [tuple(pair.split(":")) for pair in args.ab_pairs.split(",")]
    scenarios = [(b, m, 0.0, args.aa if (b, m) in tested else args.aa_other) for b in BUCKETS
                 for m in ("dcg", "pnr")]
    scenarios += [(b, m, d, args.ab) for b, m in tested for d in (0.02, 0.05, 0.10)]
    scenarios = [scenario for scenario in scenarios if scenario[3] > 0]
    tasks, owners = [], []
    for number, (bucket, metric, drop, count) in enumerate(scenarios):
        for k, start in enumerate(range(0, count, 100)):
            tasks.append((bucket, metric, drop, min(100, count - start), args.horizon, args.interval,
                          10_000 * number + k, config))
            owners.append(number)
    results: dict[int, list[dict[str, npt.NDArray[np.int64]]]] = {n: [] for n in range(len(scenarios))}
    context = multiprocessing.get_context("fork")
    with context.Pool(args.workers, initializer=_init, initargs=(pools,)) as workers:
        for done, (owner, out) in enumerate(zip(owners, workers.imap(simulate, tasks), strict=True), start=1):
            results[owner].append(out)
            print(f"[{time.perf_counter() - started:5.1f} s] {done}/{len(tasks)} batches", file=sys.stderr)

    print(f"\n{args.horizon:,} sessions per canary (both arms, 50/50), checks every session (sequential: "
          f"{config}) or every {args.interval:,} sessions (threshold, Mann–Whitney)\n")
    print("| bucket | metric | true change | canaries | method | regression | median sessions/arm | pass | "
          "median sessions/arm |")
    print("|---|---|---|---|---|---|---|---|---|")
    for number, (bucket, metric, drop, count) in enumerate(scenarios):
        merged = {name: np.concatenate([r[name] for r in results[number]]) for name in results[number][0]}
        seq_first_pass = merged["seq_pass"] < merged["seq_reg"]
        passed = np.where(seq_first_pass, merged["seq_pass"], NEVER)
        change = "none (A/A)" if drop == 0 else f"−{drop:.0%}"
        rows = [("sequential (this monitor)", merged["seq_reg"], passed),
                *((f"threshold {t:.2f}, {FAILURE_LIMIT} failures", merged[f"thr_reg_{t}"], None)
                  for t in THRESHOLDS),
                ("Mann–Whitney 98%", merged["mw_reg"], None)]
        for method, regression, pass_index in rows:
            if pass_index is None:
                pass_rate, pass_median = 1.0 - rate(regression), f"{args.horizon / 2:,.0f} (end)"
            else:
                pass_rate, pass_median = rate(pass_index), median_per_arm(pass_index)
            print(f"| {bucket} | {metric.upper()} | {change} | {count} | {method} | {rate(regression):.1%} | "
                  f"{median_per_arm(regression)} | {pass_rate:.1%} | {pass_median} |")
    print(f"\ntotal {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
