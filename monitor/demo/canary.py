"""Canary verdicts and alerts as the demo shows, records and sends them.

:class:`VerdictRow` is one comparison (bucket, metric, canary vs baseline: verdict, relative effect and
its always-valid confidence sequence); :class:`AlertNote` one notification (firing or resolved) with its
event time and wall offset. A :class:`Judge` turns the pipeline's history (statistics per epoch) and
the deploys seen into both; :class:`CanaryJudge` is the one the demo and replays use, an adapter to
:mod:`monitor.core.canary`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from monitor.alerting import AlertmanagerClient
from monitor.core.canary import CanaryConfig, Comparison, comparisons, detect_deploys
from monitor.core.canary.alerts import AlertBook, AlertConfig, Notification
from monitor.core.events import Deploy
from monitor.core.stream.history import History
from monitor.demo.recording import iso


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
    adjusted: float | None = None  # share of sessions adjusted for query difficulty (None: unadjusted)

    def to_json(self) -> dict[str, Any]:
        return {"bucket": self.bucket, "metric": self.metric, "kind": self.kind, "baseline": self.baseline,
                "candidate": self.candidate, "verdict": self.verdict, "estimate": self.estimate,
                "lower": self.lower, "upper": self.upper, "n_baseline": self.n_baseline,
                "n_candidate": self.n_candidate, "reason": self.reason, "adjusted": self.adjusted}


@dataclass(frozen=True)
class AlertNote:
    """A notification: ``labels`` identify the alert, ``annotations`` explain it (summary, runbook)."""

    status: str  # "firing" or "resolved"
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    ts: float
    wall: float
    update: bool = False  # a firing alert whose text changed (re-sent, not a new alert)
    payload: Notification | None = field(default=None, compare=False)  # what goes to Alertmanager

    @property
    def key(self) -> tuple[str, ...]:
        return tuple(f"{k}={v}" for k, v in sorted(self.labels.items()))

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "alert")

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "alertname": self.name, "bucket": self.labels.get("bucket"),
                "metric": self.labels.get("metric"), "labels": dict(self.labels),
                "annotations": dict(self.annotations), "ts": self.ts, "time": iso(self.ts),
                "wall": round(self.wall, 3)}


class Judge(Protocol):
    def update(self, history: History, deploys: Sequence[Deploy], ts: float,
               wall: float) -> tuple[list[VerdictRow], list[AlertNote]]:
        """Verdicts on the ``history`` (statistics per epoch and group) at event time ``ts``, and the
        alerts that start firing or resolve now."""
        ...


class NoJudge:
    """No canary detector: no verdicts, no alerts."""

    def update(self, history: History, deploys: Sequence[Deploy], ts: float,
               wall: float) -> tuple[list[VerdictRow], list[AlertNote]]:
        return [], []


class CanaryJudge:
    """The canary verdicts of :mod:`monitor.core.canary` and their alerts (:class:`AlertBook`).

    Compares every canary with its control per bucket on DCG@k and PNR, and each deploy with the ranker
    it replaced, over their periods (:mod:`monitor.core.canary.pairing`), from the pipeline's history.
    ``latest`` (comparisons and deploys, detected ones too) is what the canary collector serves; it is
    replaced in one assignment, so a scrape from another thread reads a consistent pair.
    """

    def __init__(self, config: CanaryConfig | None = None, alerts: AlertConfig | None = None) -> None:
        self.config = config or CanaryConfig()
        self.book = AlertBook(alerts or AlertConfig(alpha=self.config.alpha))
        self.latest: tuple[list[Comparison], list[Deploy]] = ([], [])

    def source(self) -> tuple[Sequence[Comparison], Sequence[Deploy]]:
        return self.latest

    def update(self, history: History, deploys: Sequence[Deploy], ts: float,
               wall: float) -> tuple[list[VerdictRow], list[AlertNote]]:
        found = comparisons(history, deploys, self.config)
        self.latest = (found, sorted([*deploys, *detect_deploys(history, deploys)], key=lambda d: d.ts))
        rows = [VerdictRow(c.bucket, c.metric, c.kind, c.baseline, c.candidate, c.verdict.verdict,
                           c.verdict.estimate, c.verdict.lower, c.verdict.upper, c.verdict.n_baseline,
                           c.verdict.n_candidate, c.verdict.reason, c.verdict.adjusted) for c in found]
        notes = [AlertNote(n.status, n.labels, n.annotations, ts, wall, update=n.status == "firing"
                           and n.starts_at < ts, payload=n) for n in self.book.update(ts, found)]
        return rows, notes


def make_judge() -> CanaryJudge:
    """The canary judge of the demo and of replays (default settings, ``docs/canary.md``)."""
    return CanaryJudge()


def alertmanager_client(url: str) -> AlertmanagerClient:
    """The client that delivers the demo's alerts to the Alertmanager at ``url`` (ValueError naming a bad
    URL). It queues, retries and re-sends firing alerts on its own thread: the demo never waits for it."""
    try:
        return AlertmanagerClient(url)
    except ValueError as error:
        raise ValueError(f"--alertmanager: {error}") from None


def collectors(engine: Any, max_rankers: int = 10, max_variants: int = 5) -> list[Any]:
    """What /metrics serves for ``engine``: the relevance series and, with a canary judge, its verdicts
    (label values capped as the worker's ``max_rankers`` and ``max_variants`` cap them)."""
    from monitor.export.canary import CanaryCollector
    from monitor.export.prometheus import RelevanceCollector

    out: list[Any] = [RelevanceCollector(lambda: engine.latest, max_rankers, max_variants)]
    if isinstance(engine.judge, CanaryJudge):
        out.append(CanaryCollector(engine.judge.source, max_rankers))
    return out
