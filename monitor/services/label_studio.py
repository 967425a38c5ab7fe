"""Label Studio on loopback: SQLite in its folder, a fixed admin user, for trying the bridge and the tests.

Label Studio is a Django application with pinned dependencies of its own, so it lives in a virtualenv
of its own: ``.venv-ls`` in the repository, made by :func:`ensure_label_studio` (``monitor services
install --only label-studio``, which the test command runs); ``$MONITOR_LABEL_STUDIO_BIN`` names another
``label-studio`` executable. The admin user (``admin@example.com``) gets a legacy API token, enabled for
this server only, with which :func:`personal_access_token` creates the personal access token the bridge
uses. Webhooks to loopback need Label Studio's SSRF protection off, acceptable on a server that listens
on 127.0.0.1 only; docs/annotate.md says what to set in a real deployment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from monitor.services.install import REPO_ROOT, ensure_binaries, install_packages
from monitor.services.ports import LOOPBACK
from monitor.services.process import ServerProcess, ServiceError
from monitor.services.server import LocalServer, http_ok

DEFAULT_USER = "admin@example.com"
DEFAULT_PASSWORD = "monitor-admin"  # a loopback server for trying things; docs/annotate.md says so
DEFAULT_LEGACY_TOKEN = "monitor-local-label-studio-token"


LABEL_STUDIO_REQUIREMENT = "label-studio>=1.23,<1.24"


def _configured_binary() -> str | None:
    configured = os.environ.get("MONITOR_LABEL_STUDIO_BIN")
    if configured:
        return configured
    local = REPO_ROOT / ".venv-ls" / "bin" / "label-studio"
    return str(local) if local.exists() else shutil.which("label-studio")


def ensure_label_studio(echo: Callable[[str], None] = lambda _: None) -> bool:
    """Install Label Studio in ``.venv-ls`` unless a ``label-studio`` is found; True if it installed it.

    Its own virtualenv, because its pinned dependencies (Django and friends) are not the project's.
    """
    if _configured_binary() is not None:
        return False
    venv = REPO_ROOT / ".venv-ls"
    echo(f"installing {LABEL_STUDIO_REQUIREMENT} in {venv} (about 1 GB, a few minutes)")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    for argv, what in (([sys.executable, "-m", "venv", str(venv)], "python -m venv .venv-ls"),
                       ([*pip, LABEL_STUDIO_REQUIREMENT], "pip install label-studio")):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise ServiceError(f"{what}: {error}") from None
        if done.returncode != 0:
            raise ServiceError(f"{what} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return True


def ensure_browser(echo: Callable[[str], None] = lambda _: None) -> None:
    """Headless Chromium and a font for Chinese (the grades 高/中/低/无, the queries), from Debian's
    packages: the screenshot of the labelling page (tests/integration/test_annotate_screenshot.py)."""
    ensure_binaries(["chromium", "fc-list"], echo)
    try:
        listed = subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ServiceError(f"fc-list: {error}") from None
    if not listed.stdout.strip():
        install_packages(["fonts-wqy-microhei"], echo)


def label_studio_binary() -> str:
    """``$MONITOR_LABEL_STUDIO_BIN``, else ``.venv-ls/bin/label-studio``, else ``label-studio`` on PATH."""
    found = _configured_binary()
    if found is None:
        raise ServiceError("label-studio is not installed: run `monitor services install --only "
                           "label-studio` (a virtualenv in .venv-ls) or set MONITOR_LABEL_STUDIO_BIN")
    return found


class LabelStudioServer(LocalServer):
    name: ClassVar[str] = "label-studio"
    ready_timeout: ClassVar[float] = 180.0  # the first start applies the database migrations

    def __init__(self, workdir: Path, port: int, username: str = DEFAULT_USER,
                 password: str = DEFAULT_PASSWORD, legacy_token: str = DEFAULT_LEGACY_TOKEN) -> None:
        super().__init__(workdir, port)
        self.username = username
        self.password = password
        self.legacy_token = legacy_token

    @property
    def address(self) -> str:
        return f"http://{self.host_port}"

    def write_config(self) -> None:
        (self.dir / "data").mkdir(parents=True, exist_ok=True)

    def argv(self) -> list[str]:
        # the admin's name, password and token go in the environment (not in ps or state.json)
        return [label_studio_binary(), "start", "--no-browser", "--internal-host", LOOPBACK,
                "--port", str(self.port), "--enable-legacy-api-token", "--log-level", "WARNING"]

    def environment(self) -> dict[str, str]:
        return {**os.environ, "LABEL_STUDIO_USERNAME": self.username, "LABEL_STUDIO_PASSWORD": self.password,
                "LABEL_STUDIO_USER_TOKEN": self.legacy_token,
                "LABEL_STUDIO_BASE_DATA_DIR": str(self.dir / "data"), "DJANGO_DB": "sqlite",
                "SSRF_PROTECTION_ENABLED": "false", "LATEST_VERSION_CHECK": "false",
                "COLLECT_ANALYTICS": "false", "LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK": "true"}

    def start(self, *, die_with_parent: bool = False) -> None:
        self.prepare()
        self._die_with_parent = die_with_parent
        self.process = ServerProcess.spawn(self.name, self.argv(), log_path=self.log_path, cwd=self.dir,
                                           env=self.environment(), die_with_parent=die_with_parent)

    def answers(self) -> bool:
        if not http_ok(f"{self.address}/health"):
            return False
        try:  # the admin user exists (it is made after the server starts answering)
            request = urllib.request.Request(f"{self.address}/api/projects?page_size=1",
                                             headers={"Authorization": f"Token {self.legacy_token}"})
            with urllib.request.urlopen(request, timeout=5) as response:
                return int(response.status) == 200
        except OSError:
            return False


def personal_access_token(server: LabelStudioServer) -> Path:
    """A file holding the admin's personal access token (a JWT refresh token), mode 0600 in the server's
    folder; created through the API with the legacy token the first time. Label Studio shows a token only
    when it is made, so the file is the only copy."""
    path = server.dir / "personal-access-token"
    if path.exists():
        return path
    headers = {"Authorization": f"Token {server.legacy_token}", "Content-Type": "application/json"}
    request = urllib.request.Request(f"{server.address}/api/token/", data=b"{}", headers=headers,
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            token = str(json.loads(response.read())["token"])
    except urllib.error.HTTPError as error:
        raise ServiceError(f"POST {server.address}/api/token/: HTTP {error.code} (a token made earlier "
                           f"and lost can be revoked in Label Studio's account settings)") from None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return path
