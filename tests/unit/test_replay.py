"""monitor replay: bad lines name FILE:LINE, invalid payloads are dead letters by reason.

(That a replay of the demo's events gives the demo's numbers is tested in test_demo.py, on the run that
fires the regression alert.)
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from monitor.demo import replay_cli
from monitor.demo.demo import DemoOptions, DemoResult, run_demo
from monitor.demo.events_file import LineError, read_events
from monitor.demo.settings import DemoSettings
from monitor.demo.verdict_rows import NoJudge
from monitor.sim import Simulation

pytestmark = pytest.mark.slow  # seconds each: not in the fast loop (pytest -m "not integration and not slow")

SETTINGS = DemoSettings(sessions=1000, hours=1.5, seed=11, invalid_rate=0.01)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoResult, Path]:
    tmp = tmp_path_factory.mktemp("replay")
    options = DemoOptions(SETTINGS, port=None, fast=True, write_events=tmp / "events.jsonl")
    return run_demo(options, io.StringIO(), io.StringIO(), NoJudge(), tty=False), tmp


@pytest.fixture(scope="module")
def replayed(demo: tuple[DemoResult, Path]) -> dict[str, Any]:
    """The JSON summary ``monitor replay`` prints for the demo's events."""
    _, tmp = demo
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = replay_cli.main([str(tmp / "events.jsonl"), "--json"])
    assert code == 0
    summary: dict[str, Any] = json.loads(out.getvalue())
    return summary


def test_the_replay_counts_invalid_payloads_as_dead_letters(
        demo: tuple[DemoResult, Path], replayed: dict[str, Any]) -> None:
    result, _ = demo
    dead = replayed["dead_letters"]
    invalid = [e for e in Simulation(SETTINGS.sim_config(0)).events() if e.expected_error is not None]
    left_out = result.summary["events_left_out"]  # malformed beyond routing: not JSON, no "type"
    assert left_out > 0 and sum(dead.values()) == len(invalid) - left_out > 10
    assert set(dead) <= set(result.summary["dead_letters"])
    assert "missing_field" in dead and "wrong_type" in dead


def write(path: Path, lines: list[str | bytes]) -> Path:
    path.write_bytes(b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines))
    return path


DEPLOY = '{"type":"deploy","kind":"deploy","ranker":"r1","ts":1763712000}'
IMPRESSION = ('{"type":"impression","session_id":"s-1","query":"q","ranker":"r1","variant":"control",'
              '"ts":1763712001,"results":[{"doc_id":"d1","position":1,"score":0.5}]}')


@pytest.mark.parametrize(("bad", "reason"), [
    ("impression s-1 蓝牙耳机", "not a JSON event (Expecting value at column 1)"),
    ('{"type":"impression","session_id":', "not a JSON event"),
    ('[{"type":"impression"}]', 'expected a JSON object with a "type", got list'),
    ('{"type":"click","session_id":"s-1"}', "unknown event type 'click' (expected impression, annotation"),
    ('{"session_id":"s-1","doc_id":"d1","grade":"高"}', "unknown event type None"),
])
def test_a_line_that_is_not_an_event_stops_the_replay_at_file_and_line(
        tmp_path: Path, bad: str, reason: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "events.jsonl", [DEPLOY, "", IMPRESSION, bad, IMPRESSION])
    assert replay_cli.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert f"monitor replay: error: {path}:4: {reason}" in err


def test_invalid_payloads_become_dead_letters_and_the_rest_is_replayed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "events.jsonl", [
        DEPLOY,
        IMPRESSION,
        '{"type":"impression","session_id":"s-2","query":"q","ranker":"r1","ts":1763712002}',  # no results
        '{"type":"annotation","session_id":"s-1","doc_id":"d1","grade":"很好"}',  # unknown grade
        IMPRESSION.replace('"score":0.5', '"score":NaN').replace("s-1", "s-3").encode(),
        IMPRESSION.replace('"query":"q"', '"query":"q\xff"').encode("latin-1"),  # not UTF-8
        '{"type":"annotation","session_id":"s-1","doc_id":"d1","grade":"高"}',
    ])
    assert replay_cli.main([str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["dead_letters"] == {"invalid_json": 1, "invalid_utf8": 1, "missing_field": 1,
                                       "unknown_grade": 1}
    assert summary["sessions"]["scored"] == 1 and summary["events"] == 7


def test_an_unreadable_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere.jsonl"
    assert replay_cli.main([str(missing)]) == 2
    assert f"monitor replay: error: {missing}: cannot read: No such file or directory" in capsys.readouterr().err
    with pytest.raises(LineError, match="cannot read"):
        list(read_events(missing))


def test_read_events_routes_by_type_and_keys_like_the_simulator(tmp_path: Path) -> None:
    path = write(tmp_path / "e.jsonl", [DEPLOY, IMPRESSION, '{"type":"annotation","query":"q","grades":[]}'])
    lines = list(read_events(path))
    assert [(x.number, x.topic, x.key) for x in lines] == [
        (1, "deploys", b"r1"), (2, "impressions", b"s-1"), (3, "annotations", b"q")]
    assert lines[-1].end == path.stat().st_size


SETTINGS_TOML = """
scale = "无=0,低=1,中=3,高=7@中"
max_rankers = 3
canary_alpha = 0.01
[stream]
k = {head = 5, torso = 4, tail = 3}
budget = {head = 40.0, torso = 40.0, tail = 40.0}
join_window = 1800
"""


def test_a_replay_with_the_workers_settings_file_runs_the_core_with_them(
        demo: tuple[DemoResult, Path], tmp_path: Path) -> None:
    """``--config``: the worker's TOML (k, budget, windows, scale, canary) gives the numbers of the core
    run with exactly those settings, computed here without the CLI."""
    from monitor.core.grades import parse_scale
    from monitor.core.stream.config import StreamConfig
    from monitor.store.memory import MemoryPipeline

    _, tmp = demo
    events = tmp / "events.jsonl"
    config = write(tmp_path / "worker.toml", [SETTINGS_TOML])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert replay_cli.main([str(events), "--json", "--config", str(config)]) == 0
    summary = json.loads(out.getvalue())
    stream = StreamConfig(k={"head": 5, "torso": 4, "tail": 3}, budget={"head": 40.0, "torso": 40.0, "tail": 40.0},
                          join_window=1800)
    pipeline = MemoryPipeline(stream, parse_scale("无=0,低=1,中=3,高=7@中"))
    for line in read_events(events):
        pipeline.submit(line.topic, line.key, line.value)
    pipeline.advance(float("inf"))
    expected = {g: s for g, s in pipeline.snapshot().totals().items() if s.get("sessions", 0.0) > 0}
    got = {f"{g['bucket']}|{g['ranker']}|{g['variant']}": g for g in summary["groups"] if g["sessions"]}
    assert set(got) == set(expected)
    for group, stats in expected.items():
        assert got[group]["sessions"] == round(stats["sessions"])
        assert got[group]["dcg"] == pytest.approx(stats["dcg"] / stats["sessions"], rel=1e-12)
        assert got[group]["k"] == stream.k[group.split("|")[0]]
    assert summary["sessions"]["sampled"] < SETTINGS.sessions / 2  # the budget of 40 per hour bit


def test_config_and_budget_options_are_one_or_the_other(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = write(tmp_path / "e.jsonl", [])
    config = write(tmp_path / "worker.toml", [SETTINGS_TOML])
    assert replay_cli.main([str(events), "--config", str(config), "--budget", "10"]) == 2
    assert "--config: give the budget in the settings file" in capsys.readouterr().err
    bad = write(tmp_path / "bad.toml", ["[stream]", "k = 0"])
    assert replay_cli.main([str(events), "--config", str(bad)]) == 2
    assert f"--config: {bad}: [stream] k must be a table of the buckets head, torso, tail" in capsys.readouterr().err
    assert replay_cli.main([str(events), "--hold", "1"]) == 2
    assert "--hold: needs --port" in capsys.readouterr().err


def test_a_replay_serves_its_metrics_while_it_holds(demo: tuple[DemoResult, Path]) -> None:
    """``--port 0 --hold``: /metrics on loopback after the summary, with the replay's numbers; then it
    exits by itself."""
    import re
    import subprocess
    import sys
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    _, tmp = demo
    process = subprocess.Popen([sys.executable, "-m", "monitor", "replay", str(tmp / "events.jsonl"), "--json",
                                "--port", "0", "--hold", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        assert process.stderr is not None and process.stdout is not None
        url = None
        for line in process.stderr:
            if line.startswith("serving "):
                url = line.split()[1]
                break
        assert url is not None and re.match(r"http://127\.0\.0\.1:\d+/metrics$", url), url
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        scored = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "search_relevance_scored_total":
                    key = (sample.labels["bucket"], sample.labels["ranker"], sample.labels["variant"])
                    scored[key] = scored.get(key, 0.0) + sample.value
        assert sum(scored.values()) > 100
    finally:
        process.send_signal(2)  # Ctrl-C ends the hold
        out, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    summary = json.loads(out)
    assert sum(scored.values()) == summary["sessions"]["scored"]
    assert summary["metrics_url"] == url
