"""From comparisons to alerts: which should fire, what they say, and when they resolve (time passed in).

A comparison whose verdict is "regression" is an alert named ``SearchRelevanceCanaryRegression`` (canary
vs control) or ``SearchRelevanceDeployRegression`` (after vs before a deploy), with labels ``alertname,
severity, bucket, metric, ranker`` (the candidate) and ``baseline``. Annotations: ``summary`` (effect and
interval), ``description``, ``runbook_url``, ``dashboard_url``. Prometheus raises copies from the exported
verdict (``deploy/prometheus/rules/canary.yml``: ``SearchRelevanceCanaryVerdictRegression``,
``SearchRelevanceDeployVerdictRegression``, same labels otherwise); Alertmanager inhibits a copy while
this direct alert fires, so the copy notifies only when the direct path is missing.

:class:`AlertBook` keeps what is firing. ``update(now, comparisons)`` returns the notifications to send:

* firing, for a new regression (``starts_at = now``), and again when its summary (effect, interval)
  changes; other text (session counts) is kept up to date in :meth:`AlertBook.firing` for the periodic
  re-sends without a notification of its own;
* resolved (``ends_at = now``) when the comparison is gone (rollback, canary end), when its verdict is
  "pass", or when it has not been "regression" for ``resolve_after`` seconds (a verdict that wavers at the
  boundary between regression and inconclusive does not flap).

>>> book = AlertBook(AlertConfig())
>>> book.update(0.0, [])
[]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from monitor.core.canary.pairing import Comparison

ALERTNAMES = {"canary": "SearchRelevanceCanaryRegression", "deploy": "SearchRelevanceDeployRegression"}
METRIC_TITLES = {"dcg": "DCG", "pnr": "PNR"}
DEFAULT_RUNBOOK_BASE = "https://search-relevance-monitor.example/docs/runbooks"
DEFAULT_DASHBOARD_URL = ("http://127.0.0.1:3000/d/srm-canary"  # grafana/dashboards/canary-comparison.json
                         "?var-bucket={bucket}&var-ranker={ranker}&var-baseline={baseline}&var-kind={kind}")
_PLACEHOLDERS = {"bucket": "tail", "metric": "dcg", "ranker": "r", "baseline": "b", "kind": "canary"}


@dataclass(frozen=True)
class AlertConfig:
    """``runbook_base``: runbooks live at ``<base>/<alertname>.md``; ``dashboard_url``: a template with
    ``{bucket}``, ``{metric}``, ``{ranker}``, ``{baseline}``, ``{kind}`` (empty: no dashboard link);
    ``alpha``: that of the :class:`~monitor.core.canary.CanaryConfig` behind the verdicts (for the text)."""

    runbook_base: str = DEFAULT_RUNBOOK_BASE
    dashboard_url: str = DEFAULT_DASHBOARD_URL
    canary_severity: str = "critical"
    deploy_severity: str = "warning"
    resolve_after: float = 900.0
    alpha: float = 0.05

    def __post_init__(self) -> None:
        for name in ("runbook_base", "canary_severity", "deploy_severity"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name}: expected a non-empty string, got {value!r}")
        try:
            self.dashboard_url.format(**_PLACEHOLDERS)
        except (KeyError, IndexError, ValueError) as error:
            raise ValueError(f"dashboard_url: not a valid template ({error!r}); placeholders: "
                             f"{', '.join('{' + p + '}' for p in _PLACEHOLDERS)}") from None
        resolve = self.resolve_after
        if isinstance(resolve, bool) or not isinstance(resolve, (int, float)) or not math.isfinite(resolve) \
                or resolve < 0:
            raise ValueError(f"resolve_after: expected a finite number of seconds ≥ 0, got {resolve!r}")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not 0 < self.alpha < 1:
            raise ValueError(f"alpha: must be in (0, 1), got {self.alpha!r}")


@dataclass(frozen=True)
class Notification:
    """One alert state to send: firing (``ends_at`` None) or resolved at ``ends_at``. Times: Unix seconds."""

    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: float
    ends_at: float | None = None

    @property
    def status(self) -> str:
        return "firing" if self.ends_at is None else "resolved"

    @property
    def key(self) -> tuple[tuple[str, str], ...]:
        """The alert's identity (Alertmanager's: its label set)."""
        return tuple(sorted(self.labels.items()))


def _signed(x: float) -> str:
    return f"{x:+.1%}".replace("-", "−")


def labels_of(comparison: Comparison, config: AlertConfig) -> dict[str, str]:
    severity = config.canary_severity if comparison.kind == "canary" else config.deploy_severity
    return {"alertname": ALERTNAMES[comparison.kind], "severity": severity, "bucket": comparison.bucket,
            "metric": comparison.metric, "ranker": comparison.candidate, "baseline": comparison.baseline}


def annotations_of(comparison: Comparison, config: AlertConfig) -> dict[str, str]:
    """summary, description, runbook_url and dashboard_url of a regression."""
    c, v = comparison, comparison.verdict
    title = METRIC_TITLES.get(c.metric, c.metric.upper())
    size = "" if v.estimate is None else f"{abs(v.estimate):.1%} "
    direction = "below" if v.estimate is None or v.estimate < 0 else "above"
    interval = ("" if v.lower is None or v.upper is None
                else f" ({(1 - config.alpha) * 100:g}% CS {_signed(v.lower)} … {_signed(v.upper)})")
    summary = f"{c.bucket} {title}: {c.candidate} is {size}{direction} {c.baseline}{interval}"
    if c.kind == "canary":
        setting = (f"Canary {c.candidate} against control {c.baseline} on {c.bucket} queries, "
                   f"{v.n_candidate} canary and {v.n_baseline} control sessions.")
    else:
        setting = (f"{c.candidate} since its deploy against {c.baseline} before it on {c.bucket} queries, "
                   f"{v.n_candidate} and {v.n_baseline} sessions. Before and after also differ in time "
                   f"(time of day, query mix): weaker evidence than a canary.")
    evidence = "" if v.evidence is None else f" Evidence against no change: log Λ = {v.evidence:.1f}."
    action = ("Stop the canary unless the dashboard shows a labelling problem." if c.kind == "canary"
              else "Consider a rollback; confirm on the dashboard first.")
    description = (f"{setting} Mean {title} {size}{'lower' if direction == 'below' else 'higher'}"
                   f"{interval.replace(' CS ', ' confidence sequence, valid at every look: ')}."
                   f"{evidence} {action}")
    out = {"summary": summary, "description": description,
           "runbook_url": f"{config.runbook_base.rstrip('/')}/{ALERTNAMES[c.kind]}.md"}
    if config.dashboard_url:
        out["dashboard_url"] = config.dashboard_url.format(
            bucket=c.bucket, metric=c.metric, ranker=c.candidate, baseline=c.baseline, kind=c.kind)
    return out


def desired_alerts(comparisons: Sequence[Comparison], config: AlertConfig) -> list[Notification]:
    """The firing alerts the comparisons call for right now (``starts_at`` 0: not yet placed in time)."""
    return [Notification(labels_of(c, config), annotations_of(c, config), 0.0)
            for c in comparisons if c.verdict.verdict == "regression"]


@dataclass
class _Firing:
    notification: Notification
    last_regression: float


@dataclass
class AlertBook:
    """What is firing, and the notifications that move it (module docstring). Single-threaded."""

    config: AlertConfig
    _firing: dict[tuple[tuple[str, str], ...], _Firing] = field(default_factory=dict)

    def update(self, now: float, comparisons: Sequence[Comparison]) -> list[Notification]:
        out: list[Notification] = []
        seen: dict[tuple[tuple[str, str], ...], str] = {}
        for c in comparisons:
            labels = labels_of(c, self.config)
            key = tuple(sorted(labels.items()))
            seen[key] = c.verdict.verdict
            if c.verdict.verdict != "regression":
                continue
            annotations = annotations_of(c, self.config)
            entry = self._firing.get(key)
            if entry is None:
                note = Notification(labels, annotations, now)
                self._firing[key] = _Firing(note, now)
                out.append(note)
                continue
            entry.last_regression = now
            changed = entry.notification.annotations.get("summary") != annotations["summary"]
            entry.notification = Notification(labels, annotations, entry.notification.starts_at)
            if changed:
                out.append(entry.notification)
        for key, entry in list(self._firing.items()):
            verdict = seen.get(key)
            held = verdict == "inconclusive" and now - entry.last_regression < self.config.resolve_after
            if verdict == "regression" or held:
                continue
            note = entry.notification
            out.append(Notification(note.labels, note.annotations, note.starts_at, max(now, note.starts_at)))
            del self._firing[key]
        return out

    def firing(self) -> list[Notification]:
        """Every alert firing now, with its latest text (for periodic re-sending)."""
        return [entry.notification for entry in self._firing.values()]
