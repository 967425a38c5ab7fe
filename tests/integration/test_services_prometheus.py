"""Prometheus, for real: promtool accepts the shipped configuration, and a running Prometheus scrapes
the monitor's job and sends to the session's Alertmanager."""

from __future__ import annotations

import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from monitor.services.install import BINARIES_OF, ensure_binaries, require_binary
from monitor.services.prometheus import CONFIG, render_config
from tests.support.http_helpers import eventually, http_json

pytestmark = pytest.mark.integration


def promtool() -> str:
    """promtool, installed first (with the Debian package prometheus) as the services are if missing."""
    ensure_binaries(BINARIES_OF["prometheus"])
    return require_binary("promtool")


def promtool_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), "check", "config", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("path", [CONFIG, CONFIG.parent / "prometheus.compose.yml"], ids=["local", "compose"])
def test_promtool_accepts_the_shipped_configuration(path: Path) -> None:
    """Both: the local services' and the compose stack's (which lived in tests/unit/test_compose.py, where
    the fast loop, which needs only .venv, failed without the promtool binary)."""
    done = promtool_check(path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_promtool_accepts_the_rendered_configuration(tmp_path: Path) -> None:
    rendered = render_config(
        CONFIG.read_text(),
        prometheus="127.0.0.1:1",
        alertmanager="127.0.0.1:2",
        metrics="127.0.0.1:3",
        rules_dir=CONFIG.parent / "rules",
        scrape_interval="1s",
    )
    assert '"127.0.0.1:2"' in rendered and '"127.0.0.1:3"' in rendered
    (tmp_path / "prometheus.yml").write_text(rendered)
    done = promtool_check(tmp_path / "prometheus.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_prometheus_scrapes_the_monitor_and_knows_the_alertmanager(
    prometheus_url: str, alertmanager_url: str, monitor_metrics_port: int
) -> None:
    registry = CollectorRegistry()
    Gauge("monitor_services_test_up", "set by the services test", registry=registry).set(1)
    server, thread = start_http_server(monitor_metrics_port, addr="127.0.0.1", registry=registry)
    try:

        def scraped() -> list[Any]:
            """Prometheus scraped the monitor's job"""
            query = urllib.parse.urlencode(
                {"query": 'monitor_services_test_up{job="search-relevance-monitor"}'}
            )
            return list(http_json(f"{prometheus_url}/api/v1/query?{query}")["data"]["result"])

        result = eventually(scraped)
        assert result[0]["value"][1] == "1"
        assert result[0]["metric"]["instance"] == f"127.0.0.1:{monitor_metrics_port}"
    finally:
        server.shutdown()
        thread.join(timeout=5)

    def alertmanager_known() -> bool:
        """Prometheus lists the session's Alertmanager as active"""
        active = http_json(f"{prometheus_url}/api/v1/alertmanagers")["data"]["activeAlertmanagers"]
        return any(entry["url"].startswith(alertmanager_url) for entry in active)

    eventually(alertmanager_known)
