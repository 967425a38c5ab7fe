"""monitor demo: the simulator through the same stream core; its numbers, alerts, replay, /metrics, CLI.

The runs are short and unpaced (``fast``): sampling follows event time, so a fast run records the same
points and alerts as a paced one; only the wall offsets differ. 5,000 sessions over 4 hours give the
tail canary about 350 scored sessions, enough for the sequential test to see a 10% loss.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.core.stream.session import split_group
from monitor.core.stream.stats import summarise
from monitor.demo import cli, replay_cli
from monitor.demo.demo import Clock, DemoOptions, DemoResult, run_demo
from monitor.demo.settings import DemoSettings, stream_config
from monitor.demo.verdict_rows import CanaryJudge, Judge, NoJudge, collectors
from monitor.sim import Simulation
from tests.support.simulated import recompute as recompute_truth

pytestmark = pytest.mark.slow  # seconds each: not in the fast loop (pytest -m "not integration and not slow")

GAINS = [0.0, 0.3, 0.7, 1.0]
REGRESSED = DemoSettings(sessions=5000, hours=4.0, seed=3)  # the default: 10% in the tail
HEALTHY = DemoSettings(sessions=4000, hours=3.0, seed=3, regression=0.0)  # 280+ tail canary sessions


def play(settings: DemoSettings, tmp: Path | None = None, judge: Judge | None = None) -> DemoResult:
    out, err = io.StringIO(), io.StringIO()
    options = DemoOptions(settings, port=None, fast=True)
    if tmp is not None:
        options = DemoOptions(settings, port=None, fast=True, write_events=tmp / "events.jsonl",
                              record=tmp / "run.json")
    return run_demo(options, out, err, judge or NoJudge(), tty=False)


@pytest.fixture(scope="module")
def regressed(tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoResult, Path]:
    tmp = tmp_path_factory.mktemp("demo")
    return play(REGRESSED, tmp, CanaryJudge()), tmp


def recompute(settings: DemoSettings) -> dict[str, dict[str, float]]:
    """Per group, from the simulator's ground truth with the metric functions (no stream code)."""
    return recompute_truth(Simulation(settings.sim_config(0)).run(), stream_config())


def test_the_regression_fires_the_alert_for_the_regressed_bucket_only(
        regressed: tuple[DemoResult, Path]) -> None:
    result, _ = regressed
    summary = result.summary
    alerts = summary["alerts"]
    assert alerts, summary["verdicts"]
    assert {a["bucket"] for a in alerts} == {"tail"}
    assert {a["metric"] for a in alerts} <= {"dcg", "pnr"} and "dcg" in {a["metric"] for a in alerts}
    start, end = (datetime.fromisoformat(summary["event_time"][k].replace("Z", "+00:00")).timestamp()
                  for k in ("start", "end"))
    for a in alerts:
        assert a["status"] == "firing" and a["alertname"] == "SearchRelevanceCanaryRegression"
        assert a["labels"] | {"ranker": "ranker-b", "baseline": "ranker-a", "severity": "critical"} == a["labels"]
        assert "%" in a["annotations"]["summary"] and a["annotations"]["runbook_url"]
        assert start + 0.3 * REGRESSED.span <= a["ts"] <= end  # after the canary started, in event time
        assert a["time"] == datetime.fromtimestamp(a["ts"], UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert a["wall"] >= 0
    regressions = {(v["bucket"], v["metric"]) for v in summary["verdicts"] if v["verdict"] == "regression"}
    assert regressions and {b for b, _ in regressions} == {"tail"}
    assert len(summary["firing"]) == len(alerts)
    verdicts = {(v["bucket"], v["metric"]): v for v in summary["verdicts"]}
    assert verdicts[("tail", "dcg")]["upper"] < 0 and verdicts[("tail", "dcg")]["estimate"] < -0.05
    assert verdicts[("head", "dcg")]["verdict"] == "pass"
    # one overall verdict per pair (bucket): regression where a metric regressed, pass only where both passed
    overall = {o["bucket"]: o for o in summary["overall"]}
    assert list(overall) == ["head", "torso", "tail"]
    assert overall["tail"]["verdict"] == "regression" and overall["tail"]["trusted"] is True
    for bucket, o in overall.items():
        names = {verdicts[(bucket, m)]["verdict"] for m in ("dcg", "pnr")}
        assert o["verdict"] == ("regression" if "regression" in names else "pass" if names == {"pass"}
                                else "inconclusive"), (o, names)
        assert (o["kind"], o["baseline"], o["candidate"]) == ("canary", "ranker-a", "ranker-b")
        assert all(c["flagged"] is False for c in o["checks"])  # a sound split, the same queries


def test_a_healthy_canary_fires_no_alert() -> None:
    result = play(HEALTHY, judge=CanaryJudge())
    assert result.summary["alerts"] == [] and result.summary["firing"] == []
    verdicts = result.summary["verdicts"]
    assert len(verdicts) == 6 and "regression" not in {v["verdict"] for v in verdicts}
    assert min(v["n_candidate"] for v in verdicts) >= 200  # enough sessions that an alert could fire


def test_a_replay_of_the_written_events_gives_the_demo_numbers(
        regressed: tuple[DemoResult, Path]) -> None:
    result, tmp = regressed
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = replay_cli.main([str(tmp / "events.jsonl"), "--json", "--record", str(tmp / "replay.json")])
    assert code == 0
    summary = json.loads(out.getvalue())
    played = json.loads((tmp / "run.json").read_text())
    replayed = json.loads((tmp / "replay.json").read_text())
    assert len(played["points"]) == len(replayed["points"]) > 100
    for a, b in zip(played["points"], replayed["points"], strict=True):
        assert a["ts"] == b["ts"]
        assert a["windows"] == b["windows"]  # every window, group and statistic, exactly
        assert a["verdicts"] == b["verdicts"]
    assert replayed["deploys"] == played["deploys"] and len(played["deploys"]) == 2
    assert [(a["status"], a["labels"], a["ts"]) for a in replayed["alerts"]] == [
        (a["status"], a["labels"], a["ts"]) for a in played["alerts"]] != []
    for key in ("sessions", "groups", "verdicts", "event_time", "firing"):
        assert summary[key] == result.summary[key], key
    assert summary["command"] == "replay" and summary["events_file"] == str(tmp / "events.jsonl")


def test_demo_numbers_equal_an_offline_recomputation_from_the_truth(
        regressed: tuple[DemoResult, Path]) -> None:
    result, _ = regressed
    expected = recompute(REGRESSED)
    final = result.engine.latest
    whole = {g: s for (w, g), s in final.windows.items() if w == "24h"}  # 4 h of traffic: all of it
    cumulative = final.totals()
    assert set(whole) == set(expected) == {g for g, s in cumulative.items() if s.get("sessions", 0) or
                                           s.get("expired", 0)}
    assert {split_group(g)[2] for g in expected} == {"control", "canary"}
    for group, want in expected.items():
        for stats in (whole[group], cumulative[group]):
            got = summarise(stats)
            assert (got.sessions, got.expired) == (want["sessions"], want["expired"]), group
            assert got.dcg == pytest.approx(want["dcg"] / want["sessions"], abs=1e-9)
            assert got.ndcg == pytest.approx(want["ndcg"] / want["sessions"], abs=1e-9)
            assert (got.pairs.positive("seed"), got.pairs.discordant) == (want["pos"], want["neg"])
    summary = result.summary
    assert summary["sessions"]["impressions"] == REGRESSED.sessions
    assert sum(g["sessions"] for g in summary["groups"]) == sum(w["sessions"] for w in expected.values())


def test_demo_counts_dead_letters_by_reason_and_records_points(regressed: tuple[DemoResult, Path]) -> None:
    result, tmp = regressed
    invalid = [e for e in Simulation(REGRESSED.sim_config(0)).events() if e.expected_error is not None]
    dead = result.summary["dead_letters"]
    assert invalid and sum(dead.values()) == len(invalid)
    assert all(isinstance(n, int) and n > 0 for n in dead.values())
    points = result.engine.recording.points
    assert len(points) >= REGRESSED.span / 120 - 2  # one point per 2 minutes of event time
    assert [p.ts for p in points] == sorted(p.ts for p in points)
    recorded = json.loads((tmp / "run.json").read_text())
    assert recorded["summary"]["events"] == result.summary["events"]
    assert recorded["points"][-1]["windows"]["24h"] == {
        g: s for (w, g), s in result.engine.latest.windows.items() if w == "24h"}


def test_an_unpaced_demo_samples_the_same_points_as_a_paced_one() -> None:
    settings = DemoSettings(sessions=300, hours=1.0, seed=5, duration=2.0)
    fake = {"now": 0.0}

    def sleep(seconds: float) -> None:
        fake["now"] += seconds

    clock = Clock(lambda: fake["now"], sleep)
    paced = run_demo(DemoOptions(settings, port=None), io.StringIO(), io.StringIO(), NoJudge(), tty=False,
                     clock=clock)
    fast = play(settings)
    assert fake["now"] >= settings.duration * 0.95  # it waited for event time, in (fake) wall seconds
    assert [(p.ts, p.windows) for p in paced.engine.recording.points] == [
        (p.ts, p.windows) for p in fast.engine.recording.points]
    walls = [p.wall for p in paced.engine.recording.points]
    assert walls == sorted(walls) and walls[-1] > 1.5


def test_metrics_are_served_during_the_demo() -> None:
    settings = DemoSettings(sessions=1500, hours=2.0, seed=2, duration=4.0)
    urls: list[str | None] = []
    ready = threading.Event()
    done: list[DemoResult] = []

    def on_ready(url: str | None) -> None:
        urls.append(url)
        ready.set()

    def run() -> None:
        done.append(run_demo(DemoOptions(settings, port=0), io.StringIO(), io.StringIO(), CanaryJudge(),
                             collectors=collectors, tty=False, on_ready=on_ready))

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert ready.wait(30) and urls[0] is not None
        deadline, samples, text = time.monotonic() + 20, [], ""
        while time.monotonic() < deadline and not samples:
            with urllib.request.urlopen(urls[0], timeout=5) as response:
                text = response.read().decode()
            families = {f.name: f for f in text_string_to_metric_families(text)}
            samples = families["search_relevance_dcg"].samples  # the family is there, empty at first
            time.sleep(0.2)
    finally:
        thread.join(60)
    assert samples, text[:2000]
    assert all(math.isfinite(s.value) and s.value > 0 for s in samples)
    assert {s.labels["bucket"] for s in samples} <= {"head", "torso", "tail"}
    assert "search_relevance_canary_verdict" in families  # the canary collector is registered too
    assert done and not done[0].interrupted
    with pytest.raises(OSError):  # the server is closed after the summary
        urllib.request.urlopen(urls[0], timeout=2)


def test_cli_prints_a_json_summary(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = cli.main(["--fast", "--port", "0", "--sessions", "200", "--hours", "0.5", "--regression", "0",
                     "--json", "--record", str(tmp_path / "run.json")])
    captured = capsys.readouterr()
    assert code == 0
    summary = json.loads(captured.out)
    assert summary["command"] == "demo" and summary["sessions"]["impressions"] == 200
    assert summary["alerts"] == [] and summary["source"]["regression"] == 0
    assert summary["metrics_url"].startswith("http://127.0.0.1:")
    assert "rolling 1h" in captured.err  # the live view went to stderr, the JSON alone to stdout
    assert (tmp_path / "run.json").exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["--regression", "1.5"], "regression: a relative loss in [0, 1), got 1.5"),
    (["--duration", "0"], "duration: must be a positive number"),
    (["--sessions", "0"], "sessions: expected a positive integer, got 0"),
])
def test_cli_rejects_bad_settings(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_cli_refuses_a_port_in_use(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert cli.main(["--fast", "--port", str(port), "--sessions", "50", "--hours", "0.2"]) == 1
    assert f"cannot serve /metrics on 127.0.0.1:{port}" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["settings", "events_file", "intervals"])
def test_docstring_examples(module: str) -> None:
    """monitor/demo is not among pytest's doctest paths; its examples are checked here."""
    import doctest
    import importlib

    failed, attempted = doctest.testmod(importlib.import_module(f"monitor.demo.{module}"))
    assert attempted > 0 and failed == 0


def test_ctrl_c_ends_the_demo_with_the_summary_of_what_was_seen() -> None:
    settings = DemoSettings(sessions=2000, hours=2.0, seed=5, duration=4.0)
    fake = {"now": 0.0}

    def sleep(seconds: float) -> None:
        fake["now"] += seconds
        if fake["now"] >= 1.0 and not fake.get("sent"):
            fake["sent"] = 1.0
            os.kill(os.getpid(), signal.SIGINT)  # the handler sets a flag; the loop stops between events

    out = io.StringIO()
    # what was there before (Python's default_int_handler; SIG_IGN when the suite runs as a background
    # job of a shell, which ignores SIGINT for its children)
    before = signal.getsignal(signal.SIGINT)
    result = run_demo(DemoOptions(settings, port=None), out, io.StringIO(), NoJudge(), tty=False,
                      clock=Clock(lambda: fake["now"], sleep))
    assert result.interrupted and result.summary["interrupted"]
    assert 200 < result.summary["sessions"]["impressions"] < 1000  # about a quarter of the run
    assert 1.0 <= fake["now"] < 1.5
    assert "== demo interrupted:" in out.getvalue()
    assert signal.getsignal(signal.SIGINT) is before  # the handler is put back


def test_cli_refuses_an_output_file_in_a_missing_folder(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "missing" / "run.json"
    assert cli.main(["--fast", "--port", "0", "--record", str(target)]) == 2  # before playing anything
    assert f"--record: the folder of {target} does not exist" in capsys.readouterr().err
