"""Canary verdicts and alerts as the demo shows, records and sends them.

:class:`VerdictRow` is one comparison (bucket, metric, canary vs baseline: verdict, relative effect and
its always-valid confidence sequence, whether it can be trusted and the checks that ran);
:class:`OverallRow` one pair's verdict over its metrics (:func:`overall_rows`, from the rows);
:class:`AlertNote` one notification (firing or resolved) with its event time and wall offset. A
:class:`Judge` turns the pipeline's history (statistics per epoch) and the deploys seen into rows and
notes; :class:`CanaryJudge` is the one the demo and replays use, an adapter to
:mod:`monitor.core.canary`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from monitor.alerting import AlertmanagerClient
from monitor.core.canary import CanaryConfig, Check, Comparison, Verdict, comparisons, every_deploy, overall
from monitor.core.canary.alerts import AlertBook, AlertConfig, Notification, check_note
from monitor.core.canary.verdict import VERDICTS, VerdictName
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
    trusted: bool = True  # False: a check failed that the verdict cannot correct (sample-ratio mismatch)
    checks: tuple[Check, ...] = ()  # the checks that ran (sample ratio, covariate balance)

    @classmethod
    def of(cls, c: Comparison) -> VerdictRow:
        v = c.verdict
        return cls(c.bucket, c.metric, c.kind, c.baseline, c.candidate, v.verdict, v.estimate, v.lower,
                   v.upper, v.n_baseline, v.n_candidate, v.reason, v.adjusted, v.trusted, v.checks)

    def to_json(self) -> dict[str, Any]:
        return {"bucket": self.bucket, "metric": self.metric, "kind": self.kind, "baseline": self.baseline,
                "candidate": self.candidate, "verdict": self.verdict, "estimate": self.estimate,
                "lower": self.lower, "upper": self.upper, "n_baseline": self.n_baseline,
                "n_candidate": self.n_candidate, "reason": self.reason, "adjusted": self.adjusted,
                "trusted": self.trusted, "checks": [check_json(check) for check in self.checks]}


def check_json(check: Check) -> dict[str, Any]:
    return {"name": check.name, "flagged": check.flagged, "note": check_note(check),
            "estimate": check.estimate, "lower": check.lower, "upper": check.upper,
            "evidence": check.evidence, "expected": check.expected, "detail": check.detail,
            **({} if check.applicable else {"applicable": False})}


@dataclass(frozen=True)
class OverallRow:
    """One pair's verdict over its metrics (regression if any regressed, pass only if all passed:
    :func:`monitor.core.canary.overall`), with the pair's checks, each once."""

    bucket: str
    kind: str
    baseline: str
    candidate: str
    verdict: str
    reason: str
    trusted: bool
    n_baseline: int
    n_candidate: int
    checks: tuple[Check, ...] = ()

    @property
    def flagged(self) -> list[Check]:
        return [check for check in self.checks if check.flagged]

    def to_json(self) -> dict[str, Any]:
        return {"bucket": self.bucket, "kind": self.kind, "baseline": self.baseline,
                "candidate": self.candidate, "verdict": self.verdict, "reason": self.reason,
                "trusted": self.trusted, "n_baseline": self.n_baseline, "n_candidate": self.n_candidate,
                "checks": [check_json(check) for check in self.checks]}


def _name(verdict: str) -> VerdictName:
    for name in VERDICTS:
        if name == verdict:
            return name
    raise ValueError(f"verdict: expected one of {', '.join(VERDICTS)}, got {verdict!r}")


def overall_rows(rows: Sequence[VerdictRow]) -> list[OverallRow]:
    """Each pair's overall verdict, in the rows' order."""
    found = [Comparison(r.bucket, r.metric, r.kind, r.baseline, r.candidate,
                        Verdict(_name(r.verdict), r.estimate, r.lower, r.upper, None, r.n_baseline,
                                r.n_candidate, r.reason, checks=r.checks, trusted=r.trusted)) for r in rows]
    checks: dict[tuple[str, str, str, str], dict[str, Check]] = {}
    for r in rows:
        for check in r.checks:
            checks.setdefault((r.bucket, r.kind, r.baseline, r.candidate), {}).setdefault(check.name, check)
    out = []
    for o in overall(found):
        held = checks.get((o.bucket, o.kind, o.baseline, o.candidate), {})
        out.append(OverallRow(o.bucket, o.kind, o.baseline, o.candidate, o.verdict, o.reason, o.trusted,
                              o.n_baseline, o.n_candidate, tuple(held.values())))
    return out


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
        self.latest = (found, every_deploy(history, deploys))
        rows = [VerdictRow.of(c) for c in found]
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
    from monitor.export.prometheus import RelevanceCollector
    from monitor.export.verdict_gauges import CanaryCollector

    out: list[Any] = [RelevanceCollector(lambda: engine.latest, max_rankers, max_variants)]
    if isinstance(engine.judge, CanaryJudge):
        out.append(CanaryCollector(engine.judge.source, max_rankers))
    return out
