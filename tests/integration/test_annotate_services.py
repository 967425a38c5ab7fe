"""``monitor services up --only label-studio``: Label Studio on loopback for trying the bridge.

A real ``up`` in a temporary working folder on free ports: Label Studio answers, ``status`` reports it,
the personal access token it leaves (mode 0600) works through the refresh flow of the bridge's client,
a second ``up`` finds it running, and ``down`` stops it. The default ``up`` does not start it.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.annotate.client import LabelStudio, is_personal_access_token
from monitor.services.process import start_time
from monitor.services.stack import DEFAULT_SERVICES

pytestmark = pytest.mark.integration


def monitor(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MONITOR_SERVICES_DIR": str(workdir)}
    return subprocess.run([sys.executable, "-m", "monitor", "services", *args], capture_output=True, text=True,
                          env=env, timeout=400, check=False)


async def projects(url: str, token: str) -> int:
    async with LabelStudio(url, token) as ls:
        return await ls.find_or_create_project("services test", "<View><Text name='t' value='$t'/></View>")


def test_up_only_label_studio_status_token_and_down(tmp_path: Path) -> None:
    assert "label-studio" not in DEFAULT_SERVICES
    workdir = tmp_path / "services"
    started = monitor(workdir, "up", "--only", "label-studio", "--free-ports")
    service: dict[str, object] = {}
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert "personal access token in" in started.stdout
        shown = monitor(workdir, "status", "--json")
        assert shown.returncode == 0, shown.stdout + shown.stderr
        service = json.loads(shown.stdout)["services"]["label-studio"]
        assert service["answers"] and service["user"] == "admin@example.com"
        token_file = Path(str(service["token_file"]))
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        assert is_personal_access_token(token)
        assert asyncio.run(projects(str(service["address"]), token)) > 0  # Bearer through /api/token/refresh
        again = monitor(workdir, "up", "--only", "label-studio", "--free-ports")
        assert again.returncode == 0 and "already running" in again.stdout, again.stdout + again.stderr
        assert token_file.read_text().strip() == token  # the same token file, not a new token
    finally:
        stopped = monitor(workdir, "down")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert service and start_time(int(str(service["pid"]))) is None
