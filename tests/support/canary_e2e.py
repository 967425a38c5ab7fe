"""The canary end-to-end setup: its stream config, timings, traffic and the expected comparison."""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monitor.core.canary import Comparison, Verdict
from monitor.core.stream.config import StreamConfig, stream_toml
from monitor.sim import SimConfig
from monitor.sim.records import SimEvent
from tests.support.http_helpers import http_json
from tests.support.worker_harness import Group, Stream, Worker, flush_events

CONFIG_TOML = stream_toml(StreamConfig(join_window=1800, min_coverage=0.8, max_closes_per_step=1_000_000,
                                       budget={"head": 1e9, "torso": 1e9, "tail": 1e9}))
JOIN_WINDOW = 1800
ALERT_INTERVAL = 1.0
TRAFFIC = SimConfig(seed=4, n_sessions=5000, duration_s=2 * 3600, bucket_hint_share=1.0, head_share=0.2,
                    torso_share=0.2, tail_share=0.6, canary_start=0.0, canary_share=0.5, label_share=1.0,
                    batch_share=1.0, regression_bucket="tail")


def comparison(row: dict[str, Any]) -> Comparison:
    """A row of ``monitor canary --json`` back as the comparison it prints."""
    verdict = Verdict(row["verdict"], row["estimate"], row["lower"], row["upper"], row["evidence"],
                      row["n_baseline"], row["n_candidate"], row["reason"])
    return Comparison(row["bucket"], row["metric"], row["kind"], row["baseline"], row["candidate"], verdict)


@dataclass
class CandidateRun:
    """A worker group that drained simulated traffic in which ``candidate`` is judged against ``control``
    (its ``messages`` in ``seconds``)."""

    group: Group
    worker: Worker
    control: str
    candidate: str
    messages: int
    seconds: float

    def alerts(self) -> list[dict[str, Any]]:
        """Alertmanager's current (unresolved) alerts about the candidate."""
        return alerts_about(self.group, self.candidate)

    def verdicts(self) -> tuple[int, list[dict[str, Any]]]:
        """``monitor canary --candidate <candidate> --json``: exit status and rows."""
        return canary_json(self.group, self.candidate)


def alerts_about(group: Group, ranker: str) -> list[dict[str, Any]]:
    """Alertmanager's current (unresolved) alerts about ``ranker`` (the group's ``MONITOR_ALERTMANAGER_URL``)."""
    url = group.extra_env["MONITOR_ALERTMANAGER_URL"]
    query = urllib.parse.urlencode({"filter": f'ranker="{ranker}"'})
    return list(http_json(f"{url}/api/v2/alerts?{query}"))


def canary_json(group: Group, candidate: str) -> tuple[int, list[dict[str, Any]]]:
    """``monitor canary --candidate <candidate> --json``: exit status and rows."""
    done = group.cli("canary", "--candidate", candidate, "--json")
    assert done.returncode in (0, 1, 2), done.stderr
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else []


def drained(groups: list[Group], kafka_bootstrap: str, redis_url: str, alertmanager_url: str, workdir: Path,
            name: str, config_toml: str, events: list[SimEvent], join_window: float) -> tuple[Group, Worker, int]:
    """``events`` and a flush past their join window sent to fresh topics, a worker group ``name`` (added to
    ``groups``, for the fixture to stop) that alerts ``alertmanager_url`` directly, started and drained:
    the group, its worker and the messages sent."""
    stream = Stream(kafka_bootstrap)
    sent = [*events, *flush_events(stream, max(e.ts for e in events) + join_window + 1, prefix=f"flush-{name}")]
    assert stream.send(sent) == len(sent)
    group = Group(stream, redis_url, workdir, name, config_toml, extra_env={
        "MONITOR_ALERTMANAGER_URL": alertmanager_url, "MONITOR_ALERT_INTERVAL": str(ALERT_INTERVAL)})
    groups.append(group)
    worker = group.start()
    group.drain()
    return group, worker, len(sent)
