"""``prometheus-alertmanager`` (the Debian package) on its own loopback port, clustering off.

It runs the shipped ``deploy/alertmanager/alertmanager.yml`` (copied into the working folder). The
gossip listener, which would bind 0.0.0.0:9094, is switched off with an empty
``--cluster.listen-address``: one Alertmanager, loopback only. Readiness is ``GET /-/ready``.
"""

from __future__ import annotations

import shutil
from typing import ClassVar

from monitor.services.install import REPO_ROOT, require_binary
from monitor.services.server import LocalServer, http_ok

CONFIG = REPO_ROOT / "deploy" / "alertmanager" / "alertmanager.yml"


class AlertmanagerServer(LocalServer):
    """Alertmanager on ``port`` with its silences and notification log in ``<workdir>/alertmanager/data``."""

    name: ClassVar[str] = "alertmanager"

    @property
    def address(self) -> str:
        return f"http://{self.host_port}"

    def write_config(self) -> None:
        (self.dir / "data").mkdir(exist_ok=True)
        shutil.copyfile(CONFIG, self.dir / "alertmanager.yml")

    def argv(self) -> list[str]:
        return [
            require_binary("prometheus-alertmanager"),
            f"--config.file={self.dir / 'alertmanager.yml'}",
            f"--storage.path={self.dir / 'data'}",
            f"--web.listen-address={self.host_port}",
            "--cluster.listen-address=",
        ]

    def answers(self) -> bool:
        return http_ok(f"{self.address}/-/ready")
