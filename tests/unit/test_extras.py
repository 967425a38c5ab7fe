"""Optional dependencies: pyarrow and matplotlib are extras the worker never imports, and a command that
needs a missing one exits 2 naming the extra (``None`` in ``sys.modules`` makes its import fail)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from monitor.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "monitor" / "examples"
NEEDS_AN_EXTRA = {"monitor.offline.trec", "monitor.offline.trec_batch", "monitor.demo.plots"}


def test_evaluate_trec_without_pyarrow_names_the_offline_extra(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    code = main(["evaluate", str(EXAMPLES / "qrels.txt"), str(EXAMPLES / "run.txt")])
    _, err = capsys.readouterr()
    assert code == 2
    assert err == ("monitor evaluate: error: monitor evaluate QRELS RUN needs pyarrow, which is not installed: "
                   "pip install 'search-relevance-monitor[offline]' (--sessions works without it)\n")


def test_evaluate_sessions_needs_no_pyarrow(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    code = main(["evaluate", "--sessions", str(EXAMPLES / "sessions.jsonl"), "-m", "CG@4", "--format", "csv"])
    out, _ = capsys.readouterr()
    assert code == 0 and out.startswith("query,measure,value\n")


def test_report_without_matplotlib_names_the_report_extra(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code = main(["report", str(tmp_path / "run.json"), "--out", str(tmp_path / "out")])
    _, err = capsys.readouterr()
    assert code == 2
    assert err == ("monitor report: error: monitor report needs matplotlib, which is not installed: "
                   "pip install 'search-relevance-monitor[report]'\n")
    assert not (tmp_path / "out").exists()


def test_only_the_modules_that_draw_or_read_trec_files_import_them() -> None:
    # Every module of the package but three imports with pyarrow and matplotlib absent: the worker, the
    # demo and the CLIs import them lazily. A fresh interpreter: in this one, other tests imported both.
    script = (
        "import importlib, pkgutil, sys\n"
        "import monitor\n"
        "sys.modules['pyarrow'] = sys.modules['matplotlib'] = None\n"
        f"skip = {sorted(NEEDS_AN_EXTRA | {'monitor.__main__'})!r}\n"
        "for module in pkgutil.walk_packages(monitor.__path__, 'monitor.'):\n"
        "    if module.name not in skip:\n"
        "        importlib.import_module(module.name)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_heavy_packages_are_extras_and_the_test_extra_installs_them() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]

    def names(requirements: list[str]) -> set[str]:
        return {r.split(">")[0].split("[")[0].split("=")[0].strip() for r in requirements}

    assert not names(project["dependencies"]) & {"pyarrow", "matplotlib"}
    assert "pyarrow" in names(extras["offline"]) and "matplotlib" in names(extras["report"])
    assert not names(extras["worker"]) & {"pyarrow", "matplotlib"}
    assert "aiohttp" in names(extras["worker"])  # monitor/worker/http.py imports it directly
    test_extras = extras["test"][0]
    assert test_extras.startswith("search-relevance-monitor[")
    assert {"worker", "annotate", "offline", "report"} <= set(test_extras.split("[")[1].rstrip("]").split(","))
