"""The README's first command runs the demo, and the commands of its demo section parse as written."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from monitor.demo import cli as demo_cli
from monitor.demo import replay_cli, report_cli
from monitor.demo.settings import DemoSettings

README = Path(__file__).resolve().parents[2] / "README.md"
FIRST_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/monitor demo"
PARSERS = {"demo": demo_cli.build_parser, "replay": replay_cli.build_parser, "report": report_cli.build_parser}


def bash_blocks(text: str) -> list[list[str]]:
    return [block.strip().splitlines() for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_the_first_set_up_command_installs_and_runs_the_demo() -> None:
    first = bash_blocks(README.read_text(encoding="utf-8"))[0]
    assert first[0] == FIRST_COMMAND
    assert demo_cli.build_parser().parse_args([]).duration == DemoSettings().duration == 20.0


def demo_section_commands() -> list[list[str]]:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Demo, replay and report", 1)[1].split("\n## ", 1)[0]
    lines = bash_blocks(section)[0]
    return [shlex.split(line.split("#", 1)[0]) for line in lines]


@pytest.mark.parametrize("argv", demo_section_commands(), ids=lambda argv: " ".join(argv[1:3]))
def test_the_demo_section_commands_parse(argv: list[str]) -> None:
    assert argv[0] == ".venv/bin/monitor" and argv[1] in PARSERS
    PARSERS[argv[1]]().parse_args(argv[2:])  # argparse exits on an unknown option or a bad value
