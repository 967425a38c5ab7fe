"""The stream as it flows (issue 42): the benchmark's fast path, monitor/sim/flow_fold.py, gives at every
look the history the stream core itself holds (MemoryPipeline, through monitor/sim/flow.py), and so the same
verdicts and alerts; the run's budget is spread over each hour; a quick form of benchmarks/verdict_flow.py."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from monitor.core.stream.config import StreamConfig
from monitor.core.stream.history import History
from monitor.sim.flow import Flow, FlowResult, run
from monitor.sim.flow_world import FlowWorld, Lister
from monitor.sim.world import World, WorldSettings

pytestmark = pytest.mark.slow  # tens of seconds: not in the fast loop (pytest -m "not integration and not slow")

RANKERS = (Lister("ranker-a"), Lister("ranker-b"), Lister("eq"), Lister("fresh", fresh=0.2),
           Lister("worse", target=0.9, fresh=0.2), Lister("miss", missing=0.4))
BUDGET = {"head": 200.0, "torso": 200.0, "tail": 200.0}
READ = ("sessions", "dcg", "dcg_sq", "concordant", "discordant", "pnr_con_sq", "pnr_neg_sq", "pnr_con_neg",
        "expired", "impressions", "sampled", "sent_n", "sent_x", "sent_xx", "pair_n", "pair_x", "pair_y",
        "pair_xx", "pair_yy", "pair_xy", "pair_cx", "pair_dx", "pair_cy", "pair_dy", "pair_cx_dy", "pair_wx",
        "pair_gx", "pair_wy", "pair_gy")


@pytest.fixture(scope="module", params=["head", "tail"])
def world(request: pytest.FixtureRequest) -> FlowWorld:
    k = 40 if request.param == "head" else 20
    settings = WorldSettings(k=k, queries=150 if k == 40 else 800, zipf=0.8 if k == 40 else 0.2, outcomes=12,
                             pool=80)
    built = FlowWorld.build(World.build(request.param, seed=3, settings=settings, night_dip=0.04), RANKERS,
                            seed=5)
    built.check(np.random.default_rng(0))
    return built


def flows(bucket: str) -> list[Flow]:
    stream = StreamConfig(budget=BUDGET)
    base = Flow(bucket, hours=3.0, warm=2.0, stream=stream, look=600.0)
    return [replace(base, shadows=("eq", "fresh", "worse", "miss"), exchange="eq"),
            replace(base, canary="ranker-b", shadows=("eq",)),
            replace(base, deploy="ranker-b")]


def differences(a: History, b: History) -> list[str]:
    out = []
    for e in set(a.epochs) | set(b.epochs):
        for g in set(a.epochs.get(e, {})) | set(b.epochs.get(e, {})):
            x, y = a.epochs.get(e, {}).get(g, {}), b.epochs.get(e, {}).get(g, {})
            out += [f"{e} {g} {f}: {x.get(f)} != {y.get(f)}" for f in READ
                    if not math.isclose(x.get(f, 0.0), y.get(f, 0.0), rel_tol=1e-9, abs_tol=1e-9)]
    for e in set(a.queries) | set(b.queries):
        for g in set(a.queries.get(e, {})) | set(b.queries.get(e, {})):
            x, y = a.queries.get(e, {}).get(g, {}), b.queries.get(e, {}).get(g, {})
            out += [f"{e} {g} {f}" for f in ("n", "x", "xx")
                    if not math.isclose(x.get(f, 0.0), y.get(f, 0.0), rel_tol=1e-9, abs_tol=1e-9)]
    if a.seen != b.seen:
        out.append(f"seen {a.seen} != {b.seen}")
    return out


def same_looks(a: FlowResult, b: FlowResult) -> bool:
    if sorted(a.looks) != sorted(b.looks):
        return False
    for key, looks in a.looks.items():
        for x, y in zip(looks, b.looks[key], strict=True):
            if (x.at, x.code, x.n_baseline, x.n_candidate, x.flagged) != (y.at, y.code, y.n_baseline,
                                                                           y.n_candidate, y.flagged):
                return False
            if (x.estimate is None) != (y.estimate is None) or (
                    x.estimate is not None and not math.isclose(x.estimate, y.estimate or 0.0, rel_tol=1e-9,
                                                                abs_tol=1e-9)):
                return False
    return True


@pytest.mark.parametrize("which", range(3), ids=["shadow", "canary", "deploy"])
def test_the_fold_holds_the_pipelines_history_at_every_look(world: FlowWorld, which: int) -> None:
    """The same run (traffic, annotators answering in minutes, hours or never, documents nobody graded,
    a candidate's lists missing on the hardest queries) through MemoryPipeline and through the fold: every
    field the verdicts read, in every epoch, group and query, equal at every look; the same verdicts and
    the same alerts."""
    flow = flows(world.world.bucket)[which]
    core = run(world, flow, seed=11, engine="core", keep=True)
    fold = run(world, flow, seed=11, engine="fold", keep=True)
    assert len(core.histories) == len(fold.histories) == 18
    for (at, a), (at_b, b) in zip(fold.histories, core.histories, strict=True):
        assert at == at_b and differences(a, b) == [], at
    assert same_looks(fold, core) and fold.alerts == core.alerts
    assert core.sessions >= 900 and core.answered > 100  # a real stream: sampled sessions, grades that came


def test_the_budget_is_spread_over_each_hour(world: FlowWorld) -> None:
    """Traffic at 10x the budget: each 15-minute epoch of the comparison has a quarter of its hour's
    sampled sessions (± 5 points), and a deploy at minute 5 has sessions of the new ranker sampled in its
    own epoch."""
    flow = replace(flows(world.world.bucket)[2], hours=4.0)
    result = run(world, flow, seed=2, engine="fold")
    assert result.history is not None
    epochs = result.history.epochs
    first = math.floor(flow.start / result.history.width)
    for hour in range(4):
        counts = [sum(s.get("sampled", 0.0) for s in epochs.get(first + 4 * hour + q, {}).values())
                  for q in range(4)]
        assert all(abs(c / sum(counts) - 0.25) <= 0.05 for c in counts), counts
    deployed = sum(s.get("sampled", 0.0) for g, s in epochs[first].items() if g.split("|")[1] == "ranker-b")
    assert deployed >= 10
