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
from monitor.demo.canary import NoJudge
from monitor.demo.demo import DemoOptions, DemoResult, run_demo
from monitor.demo.events_file import LineError, read_events
from monitor.demo.settings import DemoSettings
from monitor.sim import Simulation

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
