"""monitor report: an HTML page that links its figures, and figures that hold a plot, not a blank canvas."""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from monitor.demo import report_cli
from monitor.demo.demo import DemoOptions, run_demo
from monitor.demo.recording import read_recording
from monitor.demo.series import arm_series, verdict_series
from monitor.demo.settings import DemoSettings
from monitor.demo.verdict_rows import CanaryJudge

pytestmark = pytest.mark.slow  # seconds each: not in the fast loop (pytest -m "not integration and not slow")

SETTINGS = DemoSettings(sessions=2200, hours=3.0, seed=1, regression=0.5, bucket="all")  # fires in head
# (3 h: the verdicts read an epoch once its sessions closed, about 1 h 15 min after it ended)
FIGURES = ("dcg", "pnr", "canary", "coverage")


@pytest.fixture(scope="module")
def run_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "run.json"
    run_demo(DemoOptions(SETTINGS, port=None, fast=True, record=path), io.StringIO(), io.StringIO(),
             CanaryJudge(), tty=False)
    return path


@pytest.fixture(scope="module")
def report(run_file: Path) -> Path:
    out = run_file.parent / "report"
    assert report_cli.main([str(run_file), "--out", str(out)]) == 0
    return out


def test_the_page_links_every_figure_and_shows_the_alert(report: Path, run_file: Path) -> None:
    page = (report / "index.html").read_text(encoding="utf-8")
    sources = re.findall(r'<img src="([^"]+)"', page)
    assert sources == [f"{name}.png" for name in FIGURES]
    assert all((report / src).is_file() for src in sources)
    alerts = json.loads(run_file.read_text())["alerts"]
    assert alerts and "SearchRelevanceCanaryRegression" in page and "<td class=\"\">head</td>" in page
    assert "Canary verdicts at the end of the run" in page and "regression" in page
    assert "<script" not in page and "<link" not in page and 'src="http' not in page  # nothing from elsewhere


@pytest.mark.parametrize("name", FIGURES)
def test_each_figure_decodes_and_is_not_blank(report: Path, name: str) -> None:
    path = report / f"{name}.png"
    assert path.stat().st_size > 30_000
    pixels = np.asarray(matplotlib.image.imread(path))
    height, width = pixels.shape[:2]
    assert width >= 1000 and height >= 700
    rgb = pixels[..., :3]
    assert rgb.std() > 0.05  # not one flat colour
    inked = (rgb < 0.9).any(axis=-1).mean()
    assert 0.03 < inked < 0.6  # lines, bands, text: a plot, not an empty canvas nor a solid block
    coloured = (np.ptp(rgb, axis=-1) > 0.25).mean()
    assert coloured > 0.005  # the data is drawn in colour, not only axes and text


def test_series_leave_gaps_where_there_is_no_data(run_file: Path) -> None:
    recording = read_recording(run_file)
    arms = arm_series(recording, "1h")
    assert set(arms) == {(b, v) for b in ("head", "torso", "tail") for v in ("control", "canary")}
    canary = arms[("head", "canary")]
    assert math.isnan(canary.dcg[0])  # before the canary started: no value, not 0
    assert canary.label == "canary (ranker-b)"
    assert all(lo <= m <= hi for lo, m, hi in zip(canary.dcg_lower, canary.dcg, canary.dcg_upper, strict=True)
               if not math.isnan(lo))
    verdicts = verdict_series(recording)
    head = verdicts[("head", "dcg", "canary", "ranker-a", "ranker-b")]
    assert len(head.ts) == len(head.verdict) > 10 and head.verdict[-1] == "regression"
    assert head.verdict[0] == "inconclusive"  # too few sessions at first


def test_a_file_that_is_not_a_run_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text('{"type":"deploy","kind":"deploy","ranker":"r","ts":1}\n')
    assert report_cli.main([str(events), "--out", str(tmp_path / "out")]) == 2
    assert f"monitor report: error: {events}: not a run file" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text('{"format": "something-else"}')
    assert report_cli.main([str(other), "--out", str(tmp_path / "out")]) == 2
    assert "write one with monitor demo --record FILE" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_unknown_window_is_refused(run_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report_cli.main([str(run_file), "--out", str(tmp_path), "--window", "5m"]) == 2
    assert "--window '5m': the run recorded 15m, 1h, 24h" in capsys.readouterr().err
