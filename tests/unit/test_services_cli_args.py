"""``monitor services``: its options as a new user types them (issue 29)."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.services.cli import _parser, main


@pytest.mark.parametrize("command", ["up", "down", "status", "install"])
def test_workdir_is_taken_before_or_after_the_sub_command(command: str, tmp_path: Path) -> None:
    after = _parser().parse_args([command, "--workdir", str(tmp_path / "after")])
    before = _parser().parse_args(["--workdir", str(tmp_path / "before"), command])
    neither = _parser().parse_args([command])
    assert after.workdir == tmp_path / "after"
    assert before.workdir == tmp_path / "before"
    assert neither.workdir is None


@pytest.mark.parametrize("command", ["up", "down", "status", "install"])
def test_each_sub_commands_help_names_the_workdir(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        _parser().parse_args([command, "--help"])
    assert done.value.code == 0
    assert "--workdir" in capsys.readouterr().out


def test_status_after_the_sub_command_reads_that_folder(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--workdir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == f"nothing started by `monitor services up` in {tmp_path}"
