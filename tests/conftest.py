"""Test-session wiring: the real-service fixtures live in ``tests/fixtures/services.py``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

pytest_plugins = ["tests.fixtures.services"]

# The shared helpers (tests/support/) assert too: rewrite their asserts as pytest does a test module's, so
# a failing comparison there reports its operands.
pytest.register_assert_rewrite("tests.support")

# The fixtures that start (or reach) a real service. The fast loop, ``pytest -m "not integration"``,
# starts none, so a test that asks for one, directly or through another fixture, must be marked.
SERVICE_FIXTURES = frozenset({
    "services_dir", "kafka_service", "kafka_bootstrap", "redis_service", "redis_url", "alertmanager_url",
    "prometheus_url", "label_studio", "redis_cluster_service", "redis_cluster_url", "kafka_cluster_service",
    "kafka_cluster_bootstrap",
})


def pytest_configure(config: pytest.Config) -> None:
    """The tests' commands find no services but their own: ``monitor worker``, ``produce``, ``canary`` and
    ``annotate`` take the addresses of what ``monitor services up`` runs in ``$MONITOR_SERVICES_DIR``
    (else ``.services/``, where a developer's may run), so point it at a folder that does not exist; a
    test of that finding sets its own."""
    os.environ["MONITOR_SERVICES_DIR"] = str(Path(tempfile.gettempdir()) / f"monitor-tests-no-services-{os.getpid()}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    unmarked = [item.nodeid for item in items
                if SERVICE_FIXTURES & set(getattr(item, "fixturenames", ()))
                and item.get_closest_marker("integration") is None]
    if unmarked:
        raise pytest.UsageError("these tests use a real service but are not marked integration, so "
                                f"`pytest -m \"not integration\"` would start it: {', '.join(unmarked)}")
