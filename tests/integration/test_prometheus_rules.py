"""The shipped rules and inhibitions: promtool checks and unit-tests every rule file, every alert and
recording rule is covered by a test and has its labels, annotations and runbook, and the real
Alertmanager inhibits what alertmanager.yml says it inhibits."""

from __future__ import annotations

import re
import subprocess
import urllib.parse
import uuid
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from monitor.core.canary.alerts import ALERTNAMES, CHECK_ALERTNAMES
from monitor.services.alertmanager import CONFIG as ALERTMANAGER_CONFIG
from monitor.services.install import BINARIES_OF, REPO_ROOT, ensure_binaries, require_binary
from tests.support.http_helpers import eventually, http_json

pytestmark = pytest.mark.integration

RULES = REPO_ROOT / "deploy" / "prometheus" / "rules"
TESTS = REPO_ROOT / "deploy" / "prometheus" / "tests"
RUNBOOKS = REPO_ROOT / "docs" / "runbooks"
RULE_FILES = sorted(RULES.glob("*.yml"))
TEST_FILES = sorted(TESTS.glob("*.yml"))
DIRECT = sorted({*ALERTNAMES.values(), *CHECK_ALERTNAMES.values()})  # the monitor's own alerts


@cache
def tool(name: str) -> str:
    ensure_binaries(BINARIES_OF["prometheus" if name == "promtool" else "alertmanager"])
    return require_binary(name)


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)


def alert_blocks() -> dict[str, str]:
    """alert name → the text of its rule (from ``- alert:`` to the next rule)."""
    blocks: dict[str, str] = {}
    for path in RULE_FILES:
        for chunk in re.split(r"\n(?=\s+- (?:alert|record):)", path.read_text()):
            found = re.match(r"\s+- alert: (\S+)", chunk)
            if found:
                blocks[found.group(1)] = chunk
    return blocks


def recorded() -> list[str]:
    return [name for path in RULE_FILES for name in re.findall(r"- record: (\S+)", path.read_text())]


def test_there_are_rules_and_tests() -> None:
    assert [p.name for p in RULE_FILES] == ["annotate.yml", "canary.yml", "relevance.yml"]
    assert [p.name for p in TEST_FILES] == ["annotate_test.yml", "canary_test.yml", "relevance_test.yml"]
    assert len(alert_blocks()) == 12 and len(recorded()) == 5


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_promtool_checks_the_rules(path: Path) -> None:
    done = run(tool("promtool"), "check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_promtool_unit_tests_pass(path: Path) -> None:
    done = run(tool("promtool"), "test", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_is_tested_firing_and_every_recording_rule_is_tested() -> None:
    tests = "\n".join(path.read_text() for path in TEST_FILES)
    for name in alert_blocks():
        assert re.search(rf"alertname: {name}\n\s+exp_alerts:( &\w+)?\n\s+- exp_labels", tests), \
            f"no test expects {name} to fire"
        assert re.search(rf"alertname: {name}\n\s+exp_alerts: \[\]", tests), f"no test expects {name} quiet"
    for name in recorded():
        assert re.search(rf"- expr: {re.escape(name)}\n", tests), f"no promql_expr_test of {name}"


@pytest.mark.parametrize("name", sorted(alert_blocks()))
def test_every_alert_has_severity_annotations_and_its_runbook(name: str) -> None:
    block = alert_blocks()[name]
    assert re.search(r"\n\s+labels:\n\s+severity: (critical|warning)\n", block)
    for annotation in ("summary", "description", "runbook_url"):
        assert re.search(rf"\n\s+{annotation}: \S", block), f"{name} has no {annotation}"
    runbook = re.search(r"runbook_url: (\S+)", block)
    assert runbook is not None
    assert runbook.group(1).endswith(f"/docs/runbooks/{name}.md")
    assert (RUNBOOKS / f"{name}.md").is_file()


@pytest.mark.parametrize("name", DIRECT)
def test_the_monitors_direct_alerts_have_runbooks(name: str) -> None:
    assert (RUNBOOKS / f"{name}.md").is_file()


def test_amtool_accepts_the_inhibitions_and_they_name_real_alerts() -> None:
    done = run(tool("amtool"), "check-config", str(ALERTMANAGER_CONFIG))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "8 inhibit rules" in done.stdout
    known = set(alert_blocks()) | set(DIRECT)
    text = ALERTMANAGER_CONFIG.read_text()
    for pattern in re.findall(r'alertname=~?"([^"]+)"', text):
        assert any(re.fullmatch(pattern, name) for name in known), pattern


# --- the inhibitions, in a real Alertmanager -----------------------------------------------------------

def post(url: str, test_id: str, alertname: str, **labels: str) -> None:
    now = datetime.now(UTC)
    http_json(f"{url}/api/v2/alerts", [{
        "labels": {"alertname": alertname, "severity": "warning", "test_id": test_id, **labels},
        "annotations": {"summary": alertname},
        "startsAt": now.isoformat(), "endsAt": (now + timedelta(minutes=10)).isoformat(),
    }])


def states(url: str, test_id: str) -> dict[tuple[str, str, str], tuple[str, bool]]:
    """(alertname, bucket, metric or kind) → (state, inhibited)."""
    query = urllib.parse.urlencode({"filter": f'test_id="{test_id}"'})
    found: list[dict[str, Any]] = http_json(f"{url}/api/v2/alerts?{query}")
    return {(a["labels"]["alertname"], a["labels"]["bucket"], a["labels"].get("metric", a["labels"].get("kind", ""))):
            (a["status"]["state"], bool(a["status"]["inhibitedBy"])) for a in found}


def test_alertmanager_inhibits_the_threshold_and_the_copies(alertmanager_url: str) -> None:
    test_id = uuid.uuid4().hex
    pair = {"ranker": "ranker-b", "baseline": "ranker-a"}
    post(alertmanager_url, test_id, "SearchRelevanceCanaryRegression", bucket="tail", metric="dcg", **pair)
    post(alertmanager_url, test_id, "SearchRelevanceCanaryVerdictRegression", bucket="tail", metric="dcg", **pair)
    post(alertmanager_url, test_id, "SearchRelevanceCanaryVerdictRegression", bucket="tail", metric="pnr", **pair)
    post(alertmanager_url, test_id, "SearchRelevanceDeployVerdictRegression", bucket="torso", metric="pnr", **pair)
    post(alertmanager_url, test_id, "SearchRelevanceDCGDrop", bucket="tail")
    post(alertmanager_url, test_id, "SearchRelevanceDCGDrop", bucket="torso")  # a PNR regression: not the cause
    post(alertmanager_url, test_id, "SearchRelevanceLabelsStalled", bucket="head")
    post(alertmanager_url, test_id, "SearchRelevanceDCGDrop", bucket="head")
    # a shadow's DCG regression serves no user: it explains no DCG drop of its bucket
    post(alertmanager_url, test_id, "SearchRelevanceCanaryRegression", bucket="shadowed", metric="dcg",
         kind="shadow", ranker="ranker-c", baseline="served")
    post(alertmanager_url, test_id, "SearchRelevanceDCGDrop", bucket="shadowed")
    # and its Prometheus copy is inhibited by it (tail pnr: no direct alert, the copy notifies)
    shadow = {"kind": "shadow", "ranker": "ranker-c", "baseline": "served"}
    post(alertmanager_url, test_id, "SearchRelevanceShadowVerdictRegression", bucket="shadowed", metric="dcg",
         **shadow)
    post(alertmanager_url, test_id, "SearchRelevanceShadowVerdictRegression", bucket="shadowed", metric="pnr",
         **shadow)
    # the checks: one alert per pair, with kind and no metric
    post(alertmanager_url, test_id, "SearchRelevanceSampleRatioMismatch", bucket="tail", kind="canary", **pair)
    post(alertmanager_url, test_id, "SearchRelevanceSampleRatioMismatchExported", bucket="tail", kind="canary",
         **pair)
    post(alertmanager_url, test_id, "SearchRelevanceCovariateImbalance", bucket="head", kind="canary", **pair)
    post(alertmanager_url, test_id, "SearchRelevanceCovariateImbalanceExported", bucket="head", kind="deploy",
         **pair)
    post(alertmanager_url, test_id, "SearchRelevanceShadowCoverage", bucket="shadowed", kind="shadow", **pair)
    post(alertmanager_url, test_id, "SearchRelevanceShadowCoverageExported", bucket="shadowed", kind="shadow",
         **pair)

    expected = {
        ("SearchRelevanceCanaryRegression", "tail", "dcg"): ("active", False),
        ("SearchRelevanceCanaryVerdictRegression", "tail", "dcg"): ("suppressed", True),  # the direct one fires
        ("SearchRelevanceCanaryVerdictRegression", "tail", "pnr"): ("active", False),  # the direct one is dcg
        ("SearchRelevanceDeployVerdictRegression", "torso", "pnr"): ("active", False),
        ("SearchRelevanceDCGDrop", "tail", ""): ("suppressed", True),  # explained by the canary's DCG
        ("SearchRelevanceDCGDrop", "torso", ""): ("active", False),
        ("SearchRelevanceLabelsStalled", "head", ""): ("active", False),
        ("SearchRelevanceDCGDrop", "head", ""): ("suppressed", True),
        ("SearchRelevanceCanaryRegression", "shadowed", "dcg"): ("active", False),
        ("SearchRelevanceDCGDrop", "shadowed", ""): ("active", False),  # not inhibited by a shadow
        ("SearchRelevanceShadowVerdictRegression", "shadowed", "dcg"): ("suppressed", True),
        ("SearchRelevanceShadowVerdictRegression", "shadowed", "pnr"): ("active", False),
        ("SearchRelevanceSampleRatioMismatch", "tail", "canary"): ("active", False),
        ("SearchRelevanceSampleRatioMismatchExported", "tail", "canary"): ("suppressed", True),
        ("SearchRelevanceCovariateImbalance", "head", "canary"): ("active", False),
        ("SearchRelevanceCovariateImbalanceExported", "head", "deploy"): ("active", False),  # another kind
        ("SearchRelevanceShadowCoverage", "shadowed", "shadow"): ("active", False),
        ("SearchRelevanceShadowCoverageExported", "shadowed", "shadow"): ("suppressed", True),
    }

    def settled() -> bool:
        """Alertmanager reports the expected inhibitions"""
        return states(alertmanager_url, test_id) == expected

    try:
        eventually(settled, seconds=15)
    except BaseException:
        print(states(alertmanager_url, test_id))
        raise
