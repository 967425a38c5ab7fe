"""Each sub-command's ``--help`` tells a new user what it needs (issue 29): every option has help, the
environment variables are named, and ``--duration`` says which clock it counts."""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest

from monitor.cli import COMMANDS, main

PARSERS = {"demo": "monitor.demo.cli", "replay": "monitor.demo.replay_cli", "report": "monitor.demo.report_cli",
           "worker": "monitor.worker.cli", "produce": "monitor.worker.produce", "canary": "monitor.worker.canary_cli",
           "annotate": "monitor.annotate.cli", "evaluate": "monitor.offline.cli", "services": "monitor.services.cli"}
ROOT = Path(__file__).resolve().parents[2]


def parser_of(command: str) -> argparse.ArgumentParser:
    module = importlib.import_module(PARSERS[command])
    build = getattr(module, "build_parser", None) or module._parser
    parser: argparse.ArgumentParser = build()
    return parser


def help_of(command: str, capsys: pytest.CaptureFixture[str], *sub: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([command, *sub, "--help"])
    assert done.value.code == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return captured.out


def options_without_help(parser: argparse.ArgumentParser, where: str) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                missing += options_without_help(sub, f"{where} {name}")
        elif action.dest != "help" and not action.help:
            missing.append(f"{where} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_command_has_its_parser_here() -> None:
    assert set(PARSERS) == set(COMMANDS)


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_every_option_of_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert options_without_help(parser_of(command), f"monitor {command}") == []
    assert help_of(command, capsys).startswith(f"usage: monitor {command}")


def test_duration_says_which_clock(capsys: pytest.CaptureFixture[str]) -> None:
    demo = " ".join(help_of("demo", capsys).split())
    produce = " ".join(help_of("produce", capsys).split())
    assert "--duration SECONDS wall seconds to play the traffic in" in demo
    assert "--duration SECONDS event-time seconds a run's sessions span (default 3600), not wall time" in produce
    assert "join window" in produce and "close none of its sessions" in produce  # span vs window
    assert "--seed SEED simulator seed" in produce
    assert "--bucket {head,torso,tail,all} the query-frequency bucket where the canary regresses" in produce


def test_canary_names_the_environment_it_reads(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of("canary", capsys)
    for name in ("MONITOR_REDIS_URL", "MONITOR_REDIS_PREFIX", "MONITOR_CONFIG", "MONITOR_REDIS_PASSWORD",
                 "monitor services up"):
        assert name in text


def test_annotate_names_every_variable_its_settings_read(capsys: pytest.CaptureFixture[str]) -> None:
    source = (ROOT / "monitor" / "annotate" / "settings.py").read_text(encoding="utf-8")
    read = set(re.findall(r"MONITOR_[A-Z_]+", source))
    text = help_of("annotate", capsys)
    assert read and sorted(name for name in read if name not in text) == []
    assert "MONITOR_KAFKA_BOOTSTRAP" in text and "MONITOR_REDIS_URL" in text
