"""``prometheus`` (the Debian package), scraping the monitor and sending alerts to the local Alertmanager.

The configuration is the shipped ``deploy/prometheus/prometheus.yml``, rendered into the working folder
with the ports actually used: its three quoted default addresses (Alertmanager ``127.0.0.1:9093``, the
monitor's ``127.0.0.1:9464``, Prometheus's own ``127.0.0.1:9090``) and its ``rules/*.yml`` glob (made
absolute) are replaced, so the file that runs is the file that ships. Readiness is ``GET /-/ready``.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from monitor.services.install import REPO_ROOT, require_binary
from monitor.services.ports import LOOPBACK
from monitor.services.server import LocalServer, http_ok

CONFIG = REPO_ROOT / "deploy" / "prometheus" / "prometheus.yml"
DEFAULT_METRICS_PORT = 9464


def render_config(
    template: str,
    *,
    prometheus: str,
    alertmanager: str,
    metrics: str,
    rules_dir: Path,
    scrape_interval: str | None = None,
) -> str:
    """The shipped configuration with its default addresses replaced by the given ``host:port`` ones."""
    replacements = {
        '"127.0.0.1:9093"': f'"{alertmanager}"',
        '"127.0.0.1:9464"': f'"{metrics}"',
        '"127.0.0.1:9090"': f'"{prometheus}"',
        "- rules/*.yml": f"- {rules_dir.resolve() / '*.yml'}",
    }
    if scrape_interval is not None:
        replacements["scrape_interval: 15s"] = f"scrape_interval: {scrape_interval}"
        replacements["evaluation_interval: 15s"] = f"evaluation_interval: {scrape_interval}"
    text = template
    for old, new in replacements.items():
        if text.count(old) != 1:
            found = text.count(old)
            raise ValueError(f"{CONFIG.name}: expected {old!r} exactly once, found it {found} times")
        text = text.replace(old, new)
    return text


class PrometheusServer(LocalServer):
    """Prometheus on ``port``, scraping ``127.0.0.1:<metrics_port>``, alerting ``alertmanager``."""

    name: ClassVar[str] = "prometheus"

    def __init__(
        self,
        workdir: Path,
        port: int,
        *,
        alertmanager: str,
        metrics_port: int = DEFAULT_METRICS_PORT,
        scrape_interval: str | None = None,
    ) -> None:
        super().__init__(workdir, port)
        self.alertmanager = alertmanager
        self.metrics_port = metrics_port
        self.scrape_interval = scrape_interval

    @property
    def address(self) -> str:
        return f"http://{self.host_port}"

    def write_config(self) -> None:
        (self.dir / "data").mkdir(exist_ok=True)
        rendered = render_config(
            CONFIG.read_text(),
            prometheus=self.host_port,
            alertmanager=self.alertmanager,
            metrics=f"{LOOPBACK}:{self.metrics_port}",
            rules_dir=CONFIG.parent / "rules",
            scrape_interval=self.scrape_interval,
        )
        (self.dir / "prometheus.yml").write_text(rendered)

    def argv(self) -> list[str]:
        return [
            require_binary("prometheus"),
            f"--config.file={self.dir / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.dir / 'data'}",
            "--storage.tsdb.retention.time=7d",
            f"--web.listen-address={self.host_port}",
            "--web.enable-lifecycle",
        ]

    def answers(self) -> bool:
        return http_ok(f"{self.address}/-/ready")
