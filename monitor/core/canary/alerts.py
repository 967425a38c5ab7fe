"""From comparisons to alerts: which should fire, what they say, and when they resolve (time passed in).

A comparison whose verdict is "regression" is an alert named ``SearchRelevanceCanaryRegression`` (canary
vs control, and a shadow candidate vs the served lists) or ``SearchRelevanceDeployRegression`` (after vs
before a deploy), with labels ``alertname, severity, bucket, metric, ranker`` (the candidate) and
``baseline``; a shadow's also ``kind="shadow"`` (baseline ``served``, severity ``shadow_severity``), so
that on-call sees no user is served by the candidate. Annotations: ``summary`` (effect and
interval), ``description``, ``runbook_url``, ``dashboard_url``. Prometheus raises copies from the exported
verdict (``deploy/prometheus/rules/canary.yml``: ``SearchRelevanceCanaryVerdictRegression``,
``SearchRelevanceDeployVerdictRegression``, ``SearchRelevanceShadowVerdictRegression`` for a shadow's, same
labels otherwise); Alertmanager inhibits a copy while this direct alert fires, so the copy notifies only
when the direct path is missing.

A flagged check of a pair (:mod:`.checks`) is an alert too, one per pair whatever the metrics that carry
it: ``SearchRelevanceSampleRatioMismatch`` (the canary's share of impressions is not the declared one:
the pair's verdicts cannot be trusted, a pass is withheld) and ``SearchRelevanceCovariateImbalance`` (the
arms saw different queries: the DCG verdict is not adjusted for query difficulty), labels ``alertname,
severity`` (``check_severity``, warning), ``bucket, kind, ranker, baseline``. Their Prometheus copies are
``SearchRelevanceSampleRatioMismatchExported`` and ``SearchRelevanceCovariateImbalanceExported``.

:class:`AlertBook` keeps what is firing. ``update(now, comparisons)`` returns the notifications to send:

* firing, for a new regression or a newly flagged check (``starts_at = now``), and again when its
  summary (effect, interval) changes; other text (session counts) is kept up to date in
  :meth:`AlertBook.firing` for the periodic re-sends without a notification of its own;
* resolved (``ends_at = now``) when the comparison is gone (rollback, canary end), when its verdict is
  "pass", or when it has not been "regression" for ``resolve_after`` seconds (a verdict that wavers at the
  boundary between regression and inconclusive does not flap); a check's alert when its check is no
  longer flagged or gone (flags hold once raised, so in practice: when the comparison ends).

>>> book = AlertBook(AlertConfig())
>>> book.update(0.0, [])
[]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from monitor.core.canary.checks import Check
from monitor.core.canary.pairing import Comparison

ALERTNAMES = {"canary": "SearchRelevanceCanaryRegression", "deploy": "SearchRelevanceDeployRegression",
              "shadow": "SearchRelevanceCanaryRegression"}
#: Check name (:class:`~monitor.core.canary.checks.Check`) → the direct alert raised while it is flagged.
CHECK_ALERTNAMES = {"sample_ratio": "SearchRelevanceSampleRatioMismatch",
                    "covariate_balance": "SearchRelevanceCovariateImbalance",
                    "shadow_coverage": "SearchRelevanceShadowCoverage"}
CHECK_WORDS = {"sample_ratio": ("SRM", "ratio ok"), "covariate_balance": ("imbalance", "balance ok"),
               "shadow_coverage": ("coverage", "coverage ok")}
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
    check_severity: str = "warning"  # sample-ratio mismatch and covariate imbalance
    shadow_severity: str = "warning"  # a shadow candidate's regression: no user is served by it

    def __post_init__(self) -> None:
        for name in ("runbook_base", "canary_severity", "deploy_severity", "check_severity",
                     "shadow_severity"):
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
    """A regression's labels; a shadow's also ``kind="shadow"`` (its baseline is ``served``)."""
    severity = {"canary": config.canary_severity, "shadow": config.shadow_severity}.get(
        comparison.kind, config.deploy_severity)
    out = {"alertname": ALERTNAMES[comparison.kind], "severity": severity, "bucket": comparison.bucket,
           "metric": comparison.metric, "ranker": comparison.candidate, "baseline": comparison.baseline}
    if comparison.kind == "shadow":
        out["kind"] = "shadow"
    return out


def annotations_of(comparison: Comparison, config: AlertConfig) -> dict[str, str]:
    """summary, description, runbook_url and dashboard_url of a regression."""
    c, v = comparison, comparison.verdict
    title = METRIC_TITLES.get(c.metric, c.metric.upper())
    size = "" if v.estimate is None else f"{abs(v.estimate):.1%} "
    direction = "below" if v.estimate is None or v.estimate < 0 else "above"
    interval = ("" if v.lower is None or v.upper is None
                else f" ({(1 - config.alpha) * 100:g}% CS {_signed(v.lower)} … {_signed(v.upper)})")
    summary = f"{c.bucket} {title}: {c.candidate} is {size}{direction} {c.baseline}{interval}"
    if c.kind == "shadow":
        summary = f"{c.bucket} {title}: shadow {c.candidate} is {size}{direction} the served lists{interval}"
        setting = (f"Shadow candidate {c.candidate} against the lists served for the same {v.n_candidate} "
                   f"sessions on {c.bucket} queries (paired: each session scored for both). No user is "
                   f"served by {c.candidate}.")
    elif c.kind == "canary":
        setting = (f"Canary {c.candidate} against control {c.baseline} on {c.bucket} queries, "
                   f"{v.n_candidate} canary and {v.n_baseline} control sessions.")
    else:
        setting = (f"{c.candidate} since its deploy against {c.baseline} before it on {c.bucket} queries, "
                   f"{v.n_candidate} and {v.n_baseline} sessions. Before and after also differ in time "
                   f"(time of day, query mix): weaker evidence than a canary.")
    evidence = "" if v.evidence is None else f" Evidence against no change: log Λ = {v.evidence:.1f}."
    action = {"canary": "Stop the canary unless the dashboard shows a labelling problem.",
              "shadow": f"Do not promote {c.candidate} to a canary or deploy; confirm on the dashboard."}.get(
                  c.kind, "Consider a rollback; confirm on the dashboard first.")
    description = (f"{setting} Mean {title} {size}{'lower' if direction == 'below' else 'higher'}"
                   f"{interval.replace(' CS ', ' confidence sequence, valid at every look: ')}."
                   f"{evidence} {action}")
    out = {"summary": summary, "description": description,
           "runbook_url": f"{config.runbook_base.rstrip('/')}/{ALERTNAMES[c.kind]}.md"}
    if config.dashboard_url:
        out["dashboard_url"] = config.dashboard_url.format(
            bucket=c.bucket, metric=c.metric, ranker=c.candidate, baseline=c.baseline, kind=c.kind)
    return out


def check_note(check: Check) -> str:
    """A check in a few words, for tables: ``SRM −9.6%`` or ``imbalance −4.8%`` when flagged (the
    relative difference seen), ``ratio ok`` or ``balance ok`` when it ran and found nothing, ``ratio n/a`` or
    ``balance n/a`` when it does not apply (a shadow comparison)."""
    flagged, fine = CHECK_WORDS.get(check.name, (check.name, f"{check.name} ok"))
    if not check.applicable:
        return fine.replace(" ok", " n/a")
    if not check.flagged:
        return fine
    return flagged if check.estimate is None else f"{flagged} {_signed(check.estimate)}"


def check_labels(comparison: Comparison, check: Check, config: AlertConfig) -> dict[str, str]:
    c = comparison
    return {"alertname": CHECK_ALERTNAMES[check.name], "severity": config.check_severity, "bucket": c.bucket,
            "kind": c.kind, "ranker": c.candidate, "baseline": c.baseline}


def _setting(c: Comparison) -> str:
    if c.kind == "shadow":
        return (f"Shadow candidate {c.candidate} against the lists served for the same sessions on "
                f"{c.bucket} queries")
    if c.kind == "canary":
        return f"Canary {c.candidate} against control {c.baseline} on {c.bucket} queries"
    return f"{c.candidate} since its deploy against {c.baseline} before it on {c.bucket} queries"


def check_annotations(comparison: Comparison, check: Check, config: AlertConfig) -> dict[str, str]:
    """summary, description, runbook_url and dashboard_url of a flagged check (what it means for the
    verdicts, and what to look at)."""
    c, name = comparison, CHECK_ALERTNAMES[check.name]
    size = "" if check.estimate is None else _signed(check.estimate)
    if check.name == "sample_ratio":
        if check.expected is not None and check.estimate is not None:
            seen = check.expected * (1.0 + check.estimate)
            against = "declared" if check.declared else "in its first hour"
            summary = (f"{c.bucket}: canary {c.candidate} has {seen:.1%} of the impressions against "
                       f"{check.expected:.1%} {against} ({size}; control {c.baseline})")
        else:
            summary = (f"{c.bucket}: canary {c.candidate} against {c.baseline}: the split is not the "
                       "declared one")
        description = (f"{_setting(c)}: the traffic split does not match the share the canary declared "
                       f"({check.detail}). The verdicts of this pair cannot be trusted while it lasts: a "
                       "pass is withheld (shown as inconclusive) and a regression still alerts, marked "
                       "untrusted. Check the router or bucketing (a stable hash of the user or session?), "
                       "bots or crawlers on one arm, a sampling or logging bug that loses one arm's "
                       "impressions, and whether the share changed during a ramp without a canary_share "
                       "event.")
        metric = ""
    elif check.name == "shadow_coverage":
        reach = "" if check.estimate is None else f" reach {check.estimate:.1%} of the served sessions"
        summary = f"{c.bucket}: shadow {c.candidate}'s lists{reach}, not a fair part of them"
        description = (f"{_setting(c)}: {check.detail}. The paired verdict judges the candidate only on "
                       "the sessions its lists reached; these are fewer than before, or unlike the others, "
                       "so its verdicts cannot be trusted as they stand: a pass is withheld (shown as "
                       "inconclusive) and a regression still alerts, marked untrusted. Check whether the "
                       "candidate times out or fails on some requests (the hardest, the longest), a sampling "
                       "of shadow requests by query, or a producer that drops the shadow field.")
        metric = ""
    else:
        interval = ("" if check.lower is None or check.upper is None
                    else f", CS {_signed(check.lower)} … {_signed(check.upper)}")
        harder = "different" if check.estimate is None else ("harder" if check.estimate < 0 else "easier")
        summary = (f"{c.bucket}: {c.candidate}'s sessions have {harder} queries than {c.baseline}'s "
                   f"(their mean DCG@k before the period {size or 'differs'}{interval})")
        moved = ("" if c.kind == "canary" else " After and before a deploy are not randomised: the mix may "
                 "also have moved on its own (an event, a campaign, the day of the week).")
        description = (f"{_setting(c)}: {check.detail}. The arms saw different queries, so the DCG verdict "
                       "compares per-session means, without the adjustment for query difficulty (adjusted, "
                       "it would measure only the change within queries); PNR is unchanged. Check whether "
                       "the candidate changes which queries reach it (users reformulating after poor "
                       "results, query rewriting, autocomplete), a routing rule that sends some queries to "
                       f"one arm only, or bots.{moved}")
        metric = "dcg"
    out = {"summary": summary, "description": description,
           "runbook_url": f"{config.runbook_base.rstrip('/')}/{name}.md"}
    if config.dashboard_url:
        out["dashboard_url"] = config.dashboard_url.format(
            bucket=c.bucket, metric=metric, ranker=c.candidate, baseline=c.baseline, kind=c.kind)
    return out


def check_alerts(comparisons: Sequence[Comparison], config: AlertConfig) -> list[Notification]:
    """One firing alert per pair and flagged check, however many of the pair's comparisons carry the
    check (a sample-ratio check is on both metrics); ``starts_at`` 0."""
    out: dict[tuple[tuple[str, str], ...], Notification] = {}
    for c in comparisons:
        for check in c.verdict.checks:
            if check.flagged and check.name in CHECK_ALERTNAMES:
                note = Notification(check_labels(c, check, config), check_annotations(c, check, config), 0.0)
                out.setdefault(note.key, note)
    return list(out.values())


def desired_alerts(comparisons: Sequence[Comparison], config: AlertConfig) -> list[Notification]:
    """The firing alerts the comparisons call for right now (``starts_at`` 0: not yet placed in time):
    regressions, then flagged checks."""
    return [*(Notification(labels_of(c, config), annotations_of(c, config), 0.0)
              for c in comparisons if c.verdict.verdict == "regression"), *check_alerts(comparisons, config)]


@dataclass
class _Firing:
    notification: Notification
    last_regression: float
    check: bool = False  # a check's alert: resolved as soon as it is no longer called for


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
            if c.verdict.verdict == "regression":
                self._fire(now, Notification(labels, annotations_of(c, self.config), now), out)
        for note in check_alerts(comparisons, self.config):
            seen[note.key] = "flagged"
            self._fire(now, Notification(note.labels, note.annotations, now), out, check=True)
        for key, entry in list(self._firing.items()):
            verdict = seen.get(key)
            held = (not entry.check and verdict == "inconclusive"
                    and now - entry.last_regression < self.config.resolve_after)
            if verdict in ("regression", "flagged") or held:
                continue
            note = entry.notification
            out.append(Notification(note.labels, note.annotations, note.starts_at, max(now, note.starts_at)))
            del self._firing[key]
        return out

    def _fire(self, now: float, note: Notification, out: list[Notification], check: bool = False) -> None:
        """``note`` is called for now: a new alert fires; a firing one keeps its start and takes the new
        text, notifying only when its summary changed."""
        entry = self._firing.get(note.key)
        if entry is None:
            self._firing[note.key] = _Firing(note, now, check)
            out.append(note)
            return
        entry.last_regression = now
        changed = entry.notification.annotations.get("summary") != note.annotations["summary"]
        entry.notification = Notification(note.labels, note.annotations, entry.notification.starts_at)
        if changed:
            out.append(entry.notification)

    def firing(self) -> list[Notification]:
        """Every alert firing now, with its latest text (for periodic re-sending)."""
        return [entry.notification for entry in self._firing.values()]
