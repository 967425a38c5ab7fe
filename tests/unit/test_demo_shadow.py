"""``monitor demo --shadow`` (issue 28): a shadow candidate beside the live canary, in the live view, the
summary, the JSON summary and a replay of the written events; the served traffic as without it."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from monitor.demo import cli, replay_cli
from monitor.demo.demo import DemoOptions, DemoResult, run_demo
from monitor.demo.settings import SHADOW_CANDIDATE, DemoSettings
from monitor.demo.verdict_rows import CanaryJudge, Judge, NoJudge
from monitor.demo.view import Header, render
from monitor.sim import Simulation

SMALL = DemoSettings(sessions=300, hours=1.0, seed=5, shadow=True)
# 2,500 sessions over 3 hours: about 400 tail sessions paired, enough for the 10% worse candidate (about
# 5% below the served lists, of which the 10% worse canary serves half after its start) to be judged
REGRESSED = DemoSettings(sessions=2500, hours=3.0, seed=3, shadow=True)


def play(settings: DemoSettings, judge: Judge, tmp: Path | None = None) -> DemoResult:
    options = DemoOptions(settings, port=None, fast=True,
                          write_events=None if tmp is None else tmp / "events.jsonl")
    return run_demo(options, io.StringIO(), io.StringIO(), judge, tty=False)


def test_the_shadow_setting_adds_the_candidate_and_leaves_the_served_impressions() -> None:
    assert DemoSettings().shadow is False and DemoSettings().sim_config().shadow == ()
    assert SMALL.sim_config().shadow == (SHADOW_CANDIDATE,)
    assert (SHADOW_CANDIDATE.ranker, SHADOW_CANDIDATE.drop, SHADOW_CANDIDATE.bucket) == ("ranker-c", 0.10, "tail")
    assert cli.build_parser().parse_args(["--shadow"]).shadow is True
    plain = [json.loads(e.value) for e in Simulation(DemoSettings(sessions=300, hours=1.0, seed=5).sim_config())
             .events() if e.topic == "impressions" and e.valid]
    shadowed = [json.loads(e.value) for e in Simulation(SMALL.sim_config()).events()
                if e.topic == "impressions" and e.valid]
    assert all(s.pop("shadow")[0]["ranker"] == "ranker-c" for s in shadowed)
    assert shadowed == plain


def test_a_short_demo_shows_the_candidate_in_the_view_and_the_summary() -> None:
    result = play(SMALL, NoJudge())
    rows = [g for g in result.summary["groups"] if g["variant"] == "shadow"]
    assert {g["bucket"] for g in rows} == {"head", "torso", "tail"} and {g["ranker"] for g in rows} == {"ranker-c"}
    for row in rows:
        served = sum(g["sessions"] for g in result.summary["groups"]
                     if g["bucket"] == row["bucket"] and g["variant"] != "shadow")
        assert 0 < row["sessions"] <= served and row["dcg"] > 0  # its paired sessions, its own DCG@k
        assert row["pnr"] is None and row["coverage"] is None
    view = "\n".join(render(result.engine, Header("monitor demo", 1.0, 1.0, 1.0, None)))
    assert "tail @20 shadow ranker-c" in view
    assert result.summary["source"]["shadow"] is True


@pytest.mark.slow  # 10–30 s: 2,500 sessions through the engine and the canary judge, then their replay
def test_the_worse_candidate_is_judged_a_regression_beside_the_canary_and_in_a_replay(tmp_path: Path) -> None:
    result = play(REGRESSED, CanaryJudge(), tmp_path)
    summary = result.summary
    shadow = {(v["bucket"], v["metric"]): v for v in summary["verdicts"] if v["kind"] == "shadow"}
    assert set(shadow) == {(b, m) for b in ("head", "torso", "tail") for m in ("dcg", "pnr")}
    assert all((v["candidate"], v["baseline"]) == ("ranker-c", "served") for v in shadow.values())
    assert shadow[("tail", "dcg")]["verdict"] == "regression" and shadow[("tail", "dcg")]["upper"] < 0
    assert shadow[("head", "dcg")]["verdict"] == "pass" and shadow[("torso", "dcg")]["verdict"] != "regression"
    assert {v["candidate"] for v in summary["verdicts"] if v["kind"] == "canary"} == {"ranker-b"}
    overall = {(o["bucket"], o["kind"]): o for o in summary["overall"]}
    assert overall[("tail", "shadow")]["verdict"] == "regression"
    assert any(a["labels"].get("kind") == "shadow" and a["bucket"] == "tail" for a in summary["alerts"])
    view = "\n".join(render(result.engine, Header("monitor demo", 1.0, 1.0, 1.0, None)))
    assert "shadow: a candidate's lists against the lists served" in view
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert replay_cli.main([str(tmp_path / "events.jsonl"), "--json"]) == 0
    replayed = json.loads(out.getvalue())
    for key in ("groups", "verdicts", "overall"):
        assert replayed[key] == summary[key], key
