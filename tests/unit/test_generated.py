"""``write_or_check``: generator scripts write their files, or ``--check`` names the stale ones and exits 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.generated import write_or_check


def files() -> dict[str, str]:
    return {"a.json": "{}\n", "b.yaml": "x: 1\n"}


def test_writes_then_checks_clean(tmp_path: Path) -> None:
    assert write_or_check([], "d", tmp_path, files, "python gen.py") == 0
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == files()
    assert write_or_check(["--check"], "d", tmp_path, files, "python gen.py") == 0


def test_check_names_stale_and_missing_files_and_writes_nothing(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.json").write_text("old\n")
    assert write_or_check(["--check"], "d", tmp_path, files, "python gen.py") == 1
    assert capsys.readouterr().err == "out of date: a.json, b.yaml (run python gen.py)\n"
    assert (tmp_path / "a.json").read_text() == "old\n"
    assert not (tmp_path / "b.yaml").exists()
