"""Canary verdicts and alerts as the demo shows, records and sends them.

:class:`VerdictRow` is one comparison (bucket, metric, canary vs baseline: verdict, relative effect and
its interval); :class:`AlertNote` one notification (firing or resolved) with its event time and wall
offset. A :class:`Judge` turns the cumulative totals and the deploys seen into both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from monitor.core.events import Deploy
from monitor.core.stream.stats import Stats


@dataclass(frozen=True)
class VerdictRow:
    bucket: str
    metric: str
    kind: str
    baseline: str
    candidate: str
    verdict: str
    estimate: float | None
    lower: float | None
    upper: float | None
    n_baseline: int
    n_candidate: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"bucket": self.bucket, "metric": self.metric, "kind": self.kind, "baseline": self.baseline,
                "candidate": self.candidate, "verdict": self.verdict, "estimate": self.estimate,
                "lower": self.lower, "upper": self.upper, "n_baseline": self.n_baseline,
                "n_candidate": self.n_candidate, "reason": self.reason}


@dataclass(frozen=True)
class AlertNote:
    """A notification: ``labels`` identify the alert, ``annotations`` explain it (summary, runbook)."""

    status: str  # "firing" or "resolved"
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    ts: float
    wall: float
    payload: object = field(default=None, compare=False)  # what the Alertmanager client sends

    @property
    def key(self) -> tuple[str, ...]:
        return tuple(f"{k}={v}" for k, v in sorted(self.labels.items()))

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "alert")

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "alertname": self.name, "bucket": self.labels.get("bucket"),
                "metric": self.labels.get("metric"), "labels": dict(self.labels),
                "annotations": dict(self.annotations), "ts": self.ts, "wall": round(self.wall, 3)}


class Judge(Protocol):
    def update(self, totals: Mapping[str, Stats], deploys: Sequence[Deploy], ts: float,
               wall: float) -> tuple[list[VerdictRow], list[AlertNote]]:
        """Verdicts on the cumulative ``totals`` (group → stats) at event time ``ts``, and the alerts
        that start firing or resolve now."""
        ...


class NoJudge:
    """No canary detector: no verdicts, no alerts."""

    def update(self, totals: Mapping[str, Stats], deploys: Sequence[Deploy], ts: float,
               wall: float) -> tuple[list[VerdictRow], list[AlertNote]]:
        return [], []


def make_judge() -> Judge:
    """The canary judge of the demo and of replays."""
    return NoJudge()


def alertmanager_post(url: str) -> Callable[[Sequence[AlertNote]], None]:
    """A function posting notifications to the Alertmanager at ``url`` (ValueError for a bad URL)."""
    raise ValueError("--alertmanager: alert delivery is not available yet")


def collectors(engine: Any) -> list[Any]:
    """What /metrics serves for ``engine``: the relevance series and the canary verdicts."""
    from monitor.export.prometheus import RelevanceCollector

    return [RelevanceCollector(lambda: engine.latest)]
