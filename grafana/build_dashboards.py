"""Builds the three provisioned Grafana dashboards (``grafana/dashboards/*.json``) from one description.

Run ``python grafana/build_dashboards.py`` after an edit and commit the JSON it writes;
``tests/unit/test_dashboards_static.py`` fails when the committed files differ from what this script
builds (``--check`` makes the same comparison from the command line). Standard library only.

Conventions every panel follows (the static test checks the first and the last):

- every query names the templated data source ``${datasource}``; the provisioned one has the uid
  :data:`DATASOURCE_UID` (``grafana/provisioning/datasources/prometheus.yml``);
- series the monitor computes from the shared Redis state are exported identically by every worker, so
  panels take ``max by (...)`` over instances, never ``sum`` (``docs/metrics.md``); per-process series
  (``search_relevance_events_total``, ``process_start_time_seconds``) are summed or counted;
- only metric names from ``docs/metrics.md`` and the worker's canary and pipeline-health series.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from monitor.generated import write_or_check

Json = dict[str, Any]

HERE = Path(__file__).resolve().parent
OUT = HERE / "dashboards"
DATASOURCE_UID = "srm-prometheus"
DS = {"type": "prometheus", "uid": "${datasource}"}
JOB = "search-relevance-monitor"
DEPLOY_TIME = "search_relevance_deploy_timestamp_seconds"
TAGS = ["search-relevance"]
#: Fixed colours per traffic arm, so a mean line and its interval band share one (``control`` is the
#: stream's default arm; ``other`` is where arms beyond the label cap are merged).
VARIANT_COLOURS = {"control": "blue", "canary": "orange", "other": "purple"}
VERDICT_MAPPINGS = [{"type": "value", "options": {
    "1": {"text": "PASS", "color": "green", "index": 0},
    "0": {"text": "INCONCLUSIVE", "color": "yellow", "index": 1},
    "-1": {"text": "REGRESSION", "color": "red", "index": 2},
}}]
VERDICT_STEPS = [{"color": "red", "value": None}, {"color": "yellow", "value": 0},
                 {"color": "green", "value": 1}]
#: A pair's check (1 flagged, 0 checked and fine); the panels show -1 where it did not run (no series
#: while the pair has an overall verdict): the series itself is absent there, never 0.
NOT_CHECKED = -1


def check_mappings(flagged: str, fine: str, skipped: str) -> list[Json]:
    return [{"type": "value", "options": {
        "1": {"text": flagged, "color": "red", "index": 0},
        "0": {"text": fine, "color": "green", "index": 1},
        str(NOT_CHECKED): {"text": skipped, "color": "text", "index": 2},
    }}]


CHECK_STEPS = [{"color": "text", "value": None}, {"color": "green", "value": 0}, {"color": "red", "value": 1}]
WHY_DCG = """\
**Why DCG@k leads and NDCG@k stands beside it.** NDCG divides DCG by the best DCG the query's *labelled*
documents could give. If recall returns only poor documents, their ideal order is still poor, so NDCG can be
≈ 1 while the user saw nothing good; DCG@k stays low and shows it. Dashboards and alerts therefore lead
with DCG@k (k = 40 for head queries, 20 for torso and tail); NDCG@k tells whether what *was* recalled is
well ordered.

**PNR** (positive / negative pairs in model-score order) is position-blind: an inversion at rank 1 costs
the same as one at rank 40; DCG is not. They catch different failures, so both are shown.

The band around DCG@k is its 95% interval (`search_relevance_dcg_ci_lower` / `_upper`). A window without
scored sessions has no value: no data is not zero."""


# ---------------------------------------------------------------- queries


def top(metric: str, by: str, match: str) -> str:
    """``max by (by) (metric{match})``: one value per label set, however many workers export it."""
    return f"max by ({by}) ({metric}{{{match}}})" if match else f"max by ({by}) ({metric})"


def checked_per_bucket(flag: str, match: str) -> str:
    """A check's flag per bucket, or :data:`NOT_CHECKED` where the pair has a verdict but the check did
    not run (the flag's series is absent there)."""
    return (f"{top(flag, 'bucket', match)} or "
            f"(0 * {top('search_relevance_canary_overall_verdict', 'bucket', match)} - {-NOT_CHECKED})")


def rate_per_bucket(metric: str, match: str) -> str:
    """Per-bucket rate of a counter every worker exports with the same global value."""
    return f"sum by (bucket) (max by (bucket, ranker, variant) (rate({metric}{{{match}}}[$__rate_interval])))"


# ---------------------------------------------------------------- panels


class Layout:
    """Hands out panel ids and grid positions: panels fill 24 columns left to right, then wrap."""

    def __init__(self) -> None:
        self.next_id, self.x, self.y, self.line_height = 1, 0, 0, 0

    def place(self, width: int, height: int) -> tuple[int, Json]:
        if self.x + width > 24:
            self.new_line()
        grid = {"h": height, "w": width, "x": self.x, "y": self.y}
        self.x += width
        self.line_height = max(self.line_height, height)
        panel_id, self.next_id = self.next_id, self.next_id + 1
        return panel_id, grid

    def new_line(self) -> None:
        if self.x:
            self.x, self.y, self.line_height = 0, self.y + self.line_height, 0


def targets(*queries: tuple[str, str], instant: bool = False) -> list[Json]:
    """One Prometheus target per (expr, legend), refIds A, B, C, ..."""
    return [{"datasource": DS, "editorMode": "code", "expr": expr, "instant": instant, "range": not instant,
             "legendFormat": legend, "refId": chr(ord("A") + i)}
            for i, (expr, legend) in enumerate(queries)]


LINE = {"drawStyle": "line", "lineWidth": 2, "fillOpacity": 0, "showPoints": "never", "spanNulls": False}
TABLE_LEGEND = {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull"]},
                "tooltip": {"mode": "multi", "sort": "desc"}}
REDUCE_LAST = {"calcs": ["lastNotNull"], "fields": "", "values": False}
STAT = {"reduceOptions": REDUCE_LAST, "colorMode": "value", "graphMode": "area", "textMode": "value_and_name",
        "orientation": "auto", "justifyMode": "auto"}
BARS = {"reduceOptions": REDUCE_LAST, "orientation": "horizontal", "displayMode": "basic",
        "showUnfilled": True}


def panel(lay: Layout, kind: str, title: str, description: str, queries: list[Json], *, width: int,
          height: int = 8, unit: str = "short", decimals: int | None = None, custom: Json | None = None,
          overrides: list[Json] | None = None, options: Json | None = None,
          mappings: list[Json] | None = None, steps: list[Json] | None = None, **extra: Any) -> Json:
    panel_id, grid = lay.place(width, height)
    defaults: Json = {
        "unit": unit,
        "color": {"mode": "palette-classic" if kind == "timeseries" else "thresholds"},
        "mappings": mappings or [],
        "thresholds": {"mode": "absolute", "steps": steps or [{"color": "green", "value": None}]},
    }
    if decimals is not None:
        defaults["decimals"] = decimals
    if kind == "timeseries":
        defaults["custom"] = {**LINE, **(custom or {})}
    return {"id": panel_id, "type": kind, "title": title, "description": description, "datasource": DS,
            "gridPos": grid, "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
            "options": options or (TABLE_LEGEND if kind == "timeseries" else {}), "targets": queries, **extra}


def text(lay: Layout, title: str, content: str, *, width: int, height: int) -> Json:
    panel_id, grid = lay.place(width, height)
    return {"id": panel_id, "type": "text", "title": title, "gridPos": grid,
            "options": {"mode": "markdown", "content": content}}


def row(lay: Layout, title: str, *, repeat: str | None = None) -> Json:
    lay.new_line()
    panel_id, grid = lay.place(24, 1)
    lay.new_line()
    out: Json = {"id": panel_id, "type": "row", "title": title, "collapsed": False, "gridPos": grid,
                 "panels": []}
    if repeat:
        out["repeat"] = repeat
    return out


def band(names: Iterable[str], lower: str, upper: str) -> list[Json]:
    """Series ``<name><upper>`` filled down to ``<name><lower>``, both drawn as a band without a line."""
    out = [{"matcher": {"id": "byRegexp", "options": f"/({lower}|{upper})$/"},
            "properties": [{"id": "custom.lineWidth", "value": 0},
                           {"id": "custom.fillOpacity", "value": 18},
                           {"id": "custom.hideFrom",
                            "value": {"legend": True, "tooltip": False, "viz": False}}]}]
    out += [{"matcher": {"id": "byName", "options": f"{name}{upper}"},
             "properties": [{"id": "custom.fillBelowTo", "value": f"{name}{lower}"}]} for name in names]
    return out


def colours(by_prefix: dict[str, str]) -> list[Json]:
    return [{"matcher": {"id": "byRegexp", "options": f"/^{prefix}( |$)/"},
             "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": colour}}]}
            for prefix, colour in by_prefix.items()]


# ---------------------------------------------------------------- variables and annotations


def query_variable(name: str, label: str, metric: str, label_name: str, *, multi: bool,
                   default: str | None = None) -> Json:
    definition = f"label_values({metric}, {label_name})"
    if multi:
        current: Json = {"selected": True, "text": ["All"], "value": ["$__all"]}
    else:
        current = {"selected": True, "text": default, "value": default} if default else {}
    return {"name": name, "label": label, "type": "query", "datasource": DS, "definition": definition,
            "query": {"qryType": 1, "query": definition,
                      "refId": "PrometheusVariableQueryEditor-VariableQuery"},
            "refresh": 2, "sort": 1, "multi": multi, "includeAll": multi,
            **({"allValue": ".*"} if multi else {}),
            "current": current, "hide": 0, "regex": "", "options": []}


def datasource_variable() -> Json:
    return {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
            "current": {}, "hide": 0, "refresh": 1, "regex": "", "options": []}


def constant_variable(name: str, value: str) -> Json:
    return {"name": name, "type": "constant", "query": value, "hide": 2,
            "current": {"text": value, "value": value}, "options": []}


def deploys(ranker_regex: str) -> Json:
    """Deploy events from ``search_relevance_deploy_timestamp_seconds``: the value is the event time, so each
    distinct value is one annotation at that time (``useValueForTime`` wants milliseconds)."""
    match = f'ranker=~"{ranker_regex}"'
    return {"name": "Deploys", "datasource": DS, "enable": True, "iconColor": "purple",
            "expr": f"{top(DEPLOY_TIME, 'ranker, kind', match)} * 1000",
            "step": "60s", "useValueForTime": True, "titleFormat": "{{kind}}: {{ranker}}",
            "textFormat": "ranker {{ranker}}, event {{kind}}", "tagKeys": "kind,ranker"}


BUILTIN_ANNOTATION = {"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
                      "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts",
                      "type": "dashboard"}


def dashboard(uid: str, title: str, description: str, variables: list[Json], annotation: Json,
              panels: list[Json]) -> Json:
    return {
        "uid": uid, "title": title, "description": description, "tags": TAGS, "timezone": "browser",
        "editable": False, "graphTooltip": 1, "time": {"from": "now-6h", "to": "now"}, "refresh": "30s",
        "schemaVersion": 39, "version": 1,
        "links": [{"title": "Search relevance", "type": "dashboards", "tags": TAGS, "asDropdown": True,
                   "includeVars": False, "keepTime": True}],
        "annotations": {"list": [BUILTIN_ANNOTATION, annotation]},
        "templating": {"list": variables},
        "panels": panels,
    }


# ---------------------------------------------------------------- the dashboards


def overview() -> Json:
    lay = Layout()
    arms = 'ranker=~"$ranker", variant=~"$variant"'
    every = f'bucket=~"$bucket", {arms}, window="$window"'
    one = f'bucket="$bucket", {arms}, window="$window"'
    group = "bucket, ranker, variant"
    legend = "{{bucket}} {{ranker}} {{variant}}"
    dcg_match = 'bucket="$bucket", ranker="$ranker", variant=~"$variant", window="$window"'
    panels = [
        panel(lay, "stat", "Sessions scored ($window)",
              "Scored sessions in the rolling window, per bucket (search_relevance_sessions_scored).",
              targets((f"sum by (bucket) ({top('search_relevance_sessions_scored', group, every)})",
                       "{{bucket}}")),
              width=8, height=7, options=STAT),
        panel(lay, "stat", "Label coverage ($window)",
              "Mean share of the top k labelled, over scored and expired sessions "
              "(search_relevance_label_coverage).",
              targets((top("search_relevance_label_coverage", group, every), legend)),
              width=8, height=7, unit="percentunit", decimals=1, options=STAT,
              steps=[{"color": "red", "value": None}, {"color": "yellow", "value": 0.5},
                     {"color": "green", "value": 0.8}]),
        text(lay, "Why DCG leads", WHY_DCG, width=8, height=7),
        row(lay, "Bucket: $bucket", repeat="bucket"),
        panel(lay, "timeseries", "DCG@k with 95% interval: $bucket, $ranker ($window)",
              "Mean DCG@k per scored session (gains 1 / 0.7 / 0.3 / 0, log2 discount): one panel per "
              "ranker, one line per traffic arm, the band is the 95% interval "
              "(search_relevance_dcg_ci_lower/_upper).",
              targets((top("search_relevance_dcg", "variant", dcg_match), "{{variant}}"),
                      (top("search_relevance_dcg_ci_lower", "variant", dcg_match), "{{variant}} 95% lower"),
                      (top("search_relevance_dcg_ci_upper", "variant", dcg_match), "{{variant}} 95% upper")),
              width=24, height=9, decimals=3,
              overrides=[*colours(VARIANT_COLOURS), *band(VARIANT_COLOURS, " 95% lower", " 95% upper")],
              repeat="ranker", repeatDirection="h", maxPerRow=3),
        panel(lay, "timeseries", "NDCG@k: $bucket ($window)",
              "Mean NDCG@k beside DCG@k. Its ideal is the best order of every labelled document of the "
              "query, so it can be ≈ 1 when recall found only poor documents (see 'Why DCG leads').",
              targets((top("search_relevance_ndcg", "ranker, variant", one), "{{ranker}} {{variant}}")),
              width=12, decimals=3, custom={"axisSoftMin": 0, "axisSoftMax": 1}),
        panel(lay, "timeseries", "PNR: $bucket ($window)",
              "Positive / negative pairs in model-score order over the top k, summed over sessions "
              "(equal grades count as positive, the seeds' convention). Dashed: equal grades left out "
              "(search_relevance_pnr_strict). A window without inversions is +Inf.",
              targets((top("search_relevance_pnr", "ranker, variant", one), "{{ranker}} {{variant}}"),
                      (top("search_relevance_pnr_strict", "ranker, variant", one),
                       "{{ranker}} {{variant}} (ties left out)")),
              width=12, decimals=2,
              overrides=[{"matcher": {"id": "byRegexp", "options": "/ties left out/"},
                          "properties": [{"id": "custom.lineStyle",
                                          "value": {"fill": "dash", "dash": [10, 10]}}]}]),
        panel(lay, "bargauge", "DCG@k by rolling window: $bucket",
              "Mean DCG@k now, in each rolling window (15m, 1h, 24h by default): a drop that shows in the "
              "short window first is recent.",
              targets((top("search_relevance_dcg", "window, ranker, variant", f'bucket="$bucket", {arms}'),
                       "{{window}} {{ranker}} {{variant}}"), instant=True),
              width=12, height=7, decimals=3, options=BARS),
        panel(lay, "bargauge", "PNR by rolling window: $bucket", "PNR now, in each rolling window.",
              targets((top("search_relevance_pnr", "window, ranker, variant", f'bucket="$bucket", {arms}'),
                       "{{window}} {{ranker}} {{variant}}"), instant=True),
              width=12, height=7, decimals=2, options=BARS),
        row(lay, "Sessions and labels"),
        panel(lay, "timeseries", "Sessions scored ($window)",
              "Sessions scored in the rolling window (search_relevance_sessions_scored).",
              targets((top("search_relevance_sessions_scored", group, every), legend)), width=8),
        panel(lay, "timeseries", "Label coverage ($window)",
              "Mean share of the top k labelled (search_relevance_label_coverage). Low coverage means the "
              "annotators are behind and sessions expire unscored.",
              targets((top("search_relevance_label_coverage", group, every), legend)),
              width=8, unit="percentunit"),
        panel(lay, "timeseries", "Sessions expired ($window)",
              "Sessions whose join window closed below the coverage minimum "
              "(search_relevance_sessions_expired).",
              targets((top("search_relevance_sessions_expired", group, every), legend)), width=8),
    ]
    variables = [
        datasource_variable(),
        query_variable("bucket", "Bucket", "search_relevance_sessions_scored", "bucket", multi=True),
        query_variable("ranker", "Ranker", 'search_relevance_sessions_scored{bucket=~"$bucket"}', "ranker",
                       multi=True),
        query_variable("variant", "Variant", "search_relevance_sessions_scored", "variant", multi=True),
        query_variable("window", "Window", "search_relevance_sessions_scored", "window", multi=False,
                       default="1h"),
    ]
    return dashboard("srm-overview", "Search relevance: overview",
                     "DCG@k and PNR per query-frequency bucket over rolling windows, with deploys.",
                     variables, deploys("$ranker"), panels)


def status(lay: Layout, title: str, description: str, expr: str, legend: str, mappings: list[Json],
           steps: list[Json], width: int = 8) -> Json:
    """A stat panel of a state per bucket (a verdict, a check), its value's name on a coloured background."""
    options = {**STAT, "colorMode": "background", "graphMode": "none"}
    return panel(lay, "stat", title, description, targets((expr, legend)), width=width, height=5,
                 mappings=mappings, steps=steps, options=options)


def verdicts(lay: Layout, pair: str) -> list[Json]:
    """The canary dashboard's top: the verdicts per bucket and metric, the overall verdict, the checks."""
    buckets = f'bucket=~"$bucket", {pair}'
    return [
        status(lay, "Verdict: $ranker against $baseline ($kind)",
               "The canary detector's verdict per bucket and metric (search_relevance_canary_verdict): PASS, "
               "INCONCLUSIVE (too little evidence either way) or REGRESSION.",
               top("search_relevance_canary_verdict", "bucket, metric", buckets),
               "{{bucket}} {{metric}}", VERDICT_MAPPINGS, VERDICT_STEPS, width=24),
        status(lay, "Overall verdict: $ranker against $baseline ($kind)",
               "One verdict per bucket over both metrics (search_relevance_canary_overall_verdict): "
               "REGRESSION if DCG@k or PNR regressed, PASS only if both passed, INCONCLUSIVE otherwise. "
               "A pass is withheld (inconclusive) while the sample-ratio check flags a mismatch.",
               top("search_relevance_canary_overall_verdict", "bucket", buckets),
               "{{bucket}}", VERDICT_MAPPINGS, VERDICT_STEPS),
        status(lay, "Sample ratio check",
               "Does the canary get the share of the impressions it declared "
               "(search_relevance_canary_sample_ratio_mismatch)? MISMATCH: no, and the pair's verdicts "
               "cannot be trusted (runbook SearchRelevanceSampleRatioMismatch; the size is "
               "search_relevance_canary_sample_ratio). NOT CHECKED: no share declared (canary_start "
               "`share`, canary_share events), a deploy, or a shadow (kind shadow: both lists of the same "
               "sessions, no split to check).",
               checked_per_bucket("search_relevance_canary_sample_ratio_mismatch", buckets),
               "{{bucket}}", check_mappings("MISMATCH", "OK", "NOT CHECKED"), CHECK_STEPS),
        status(lay, "Query mix check",
               "Did both arms see queries of the same difficulty "
               "(search_relevance_canary_covariate_imbalance)? IMBALANCED: no, and the DCG verdict "
               "compares per-session means without the adjustment for query difficulty (runbook "
               "SearchRelevanceCovariateImbalance). NOT CHECKED: the DCG verdict is not adjusted (no query "
               "with history before the period, or the adjustment is off), or a shadow (kind shadow: "
               "both lists of the same sessions, so of the same queries).",
               checked_per_bucket("search_relevance_canary_covariate_imbalance", buckets),
               "{{bucket}}", check_mappings("IMBALANCED", "BALANCED", "NOT CHECKED"), CHECK_STEPS),
    ]


def canary() -> Json:
    lay = Layout()
    pair = 'kind="$kind", baseline="$baseline", candidate="$ranker"'
    here = f'bucket="$bucket", {pair}'
    side = 'bucket="$bucket", ranker=~"$ranker|$baseline", window="$window"'
    panels = [
        *verdicts(lay, pair),
        row(lay, "Bucket: $bucket", repeat="bucket"),
    ]
    for metric, name in (("dcg", "DCG@k"), ("pnr", "PNR")):
        match = f'{here}, metric="{metric}"'
        panels.append(panel(
            lay, "timeseries", f"{name}: estimate and interval ($bucket)",
            f"Relative change of {name}, candidate $ranker against baseline $baseline (-10% = 10% lower), "
            "with its always-valid confidence sequence (search_relevance_canary_estimate, _canary_lower, "
            "_canary_upper). The dashed line is no change.",
            targets((f"max(search_relevance_canary_estimate{{{match}}})", "estimate"),
                    (f"max(search_relevance_canary_lower{{{match}}})", "lower"),
                    (f"max(search_relevance_canary_upper{{{match}}})", "upper")),
            width=8, unit="percentunit", decimals=1, custom={"thresholdsStyle": {"mode": "dashed"}},
            steps=[{"color": "text", "value": None}, {"color": "text", "value": 0}],
            overrides=[*colours({"estimate": "blue", "lower": "blue", "upper": "blue"}),
                       *band([""], "lower", "upper")],
        ))
    panels += [
        panel(lay, "timeseries", "Evidence over time ($bucket)",
              "Log mixture likelihood ratio against no change, per metric "
              "(search_relevance_canary_evidence); a gain is proven when it reaches log(1/alpha), a drop "
              "when it reaches log(2/alpha) (each metric's regression is decided at alpha/2).",
              targets((top("search_relevance_canary_evidence", "metric", here), "{{metric}}")),
              width=8, decimals=2),
        panel(lay, "state-timeline", "Verdict over time ($bucket)",
              "search_relevance_canary_verdict per metric over time.",
              targets((top("search_relevance_canary_verdict", "metric", here), "{{metric}}")),
              width=12, height=6, mappings=VERDICT_MAPPINGS, steps=VERDICT_STEPS,
              options={"showValue": "auto", "mergeValues": True, "rowHeight": 0.8,
                       "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}}),
        panel(lay, "timeseries", "Sessions per arm ($bucket)",
              "Sessions compared, per arm: baseline and candidate (search_relevance_canary_sessions).",
              targets((top("search_relevance_canary_sessions", "arm", here), "{{arm}}")), width=12, height=6),
        panel(lay, "timeseries", "DCG@k side by side ($bucket, $window)",
              "Mean DCG@k of the candidate and the baseline, per ranker and arm (search_relevance_dcg).",
              targets((top("search_relevance_dcg", "ranker, variant", side), "{{ranker}} {{variant}}")),
              width=12, decimals=3),
        panel(lay, "timeseries", "PNR side by side ($bucket, $window)",
              "PNR of the candidate and the baseline, per ranker and arm (search_relevance_pnr).",
              targets((top("search_relevance_pnr", "ranker, variant", side), "{{ranker}} {{variant}}")),
              width=12, decimals=2),
    ]
    of_candidate = 'search_relevance_canary_verdict{candidate="$ranker"}'
    variables = [
        datasource_variable(),
        query_variable("ranker", "Candidate", "search_relevance_canary_verdict", "candidate", multi=False),
        query_variable("baseline", "Baseline", of_candidate, "baseline", multi=False),
        query_variable("kind", "Kind", of_candidate, "kind", multi=False, default="canary"),
        query_variable("bucket", "Bucket", of_candidate, "bucket", multi=True),
        query_variable("window", "Window", "search_relevance_sessions_scored", "window", multi=False,
                       default="1h"),
    ]
    return dashboard("srm-canary", "Search relevance: canary comparison",
                     "A candidate ranker against its baseline per bucket and metric (kind canary, deploy, or "
                     "shadow: a shadow candidate against the lists served to the same sessions, baseline "
                     "served): estimate with its "
                     "interval, verdict, evidence over time; the overall verdict per bucket and the "
                     "sample-ratio and query-mix checks.",
                     variables, deploys("$ranker|$baseline"), panels)


def pipeline() -> Json:
    lay = Layout()
    chosen = 'bucket=~"$bucket", ranker=~"$ranker"'
    job = 'job="$job"'
    panels = [
        row(lay, "Kafka"),
        panel(lay, "timeseries", "Consumer lag by topic",
              "Messages behind the log end, summed over partitions (search_relevance_consumer_lag).",
              targets((f"sum by (topic) ({top('search_relevance_consumer_lag', 'topic, partition', '')})",
                       "{{topic}}")), width=12),
        panel(lay, "timeseries", "Events consumed per second",
              "Messages consumed per topic, summed over workers (search_relevance_events_total).",
              targets(("sum by (topic) (rate(search_relevance_events_total[$__rate_interval]))",
                       "{{topic}}")),
              width=12, unit="ops"),
        panel(lay, "timeseries", "Consumer lag by partition",
              "Messages behind the log end per partition: one stuck partition points at one worker.",
              targets((top("search_relevance_consumer_lag", "topic, partition", ""),
                       "{{topic}}/{{partition}}")),
              width=12),
        panel(lay, "timeseries", "Dead letters per second by reason",
              "Invalid events sent to the dead-letter topic, by reason code "
              "(search_relevance_dead_letters_total; the codes are listed in docs/metrics.md).",
              targets(("max by (reason) (rate(search_relevance_dead_letters_total[$__rate_interval]))",
                       "{{reason}}")),
              width=12, unit="ops"),
        row(lay, "Join"),
        panel(lay, "timeseries", "Join lag: impression to scoring",
              "Mean event-time delay from an impression to its scoring (search_relevance_join_lag_seconds).",
              targets((top("search_relevance_join_lag_seconds", "bucket, ranker, variant, window", chosen),
                       "{{bucket}} {{ranker}} {{variant}} {{window}}")), width=12, unit="s"),
        panel(lay, "timeseries", "Sessions waiting for labels",
              "Sessions in the join state, neither scored nor expired yet "
              "(search_relevance_waiting_sessions).",
              targets(("max(search_relevance_waiting_sessions)", "waiting")), width=6),
        panel(lay, "timeseries", "Watermark delay",
              "Wall clock minus the largest impression event time seen "
              "(search_relevance_watermark_seconds): how far the stream's event time is behind now.",
              targets(("time() - max(search_relevance_watermark_seconds)", "delay")), width=6, unit="s"),
        panel(lay, "timeseries", "Sessions per second",
              "Impressions seen, sessions scored and sessions expired, per bucket (the _total counters).",
              targets((rate_per_bucket("search_relevance_impressions_total", chosen),
                       "impressions {{bucket}}"),
                      (rate_per_bucket("search_relevance_scored_total", chosen), "scored {{bucket}}"),
                      (rate_per_bucket("search_relevance_expired_total", chosen), "expired {{bucket}}")),
              width=12, unit="ops"),
        panel(lay, "timeseries", "Re-scores and corrections per second",
              "Contributions taken back for a re-score, and labels that replaced an earlier grade.",
              targets((rate_per_bucket("search_relevance_rescored_total", chosen), "re-scored {{bucket}}"),
                      (rate_per_bucket("search_relevance_corrections_total", chosen),
                       "corrections {{bucket}}")),
              width=12, unit="ops"),
        row(lay, "Workers and Redis"),
        panel(lay, "stat", "Workers running",
              "Worker processes Prometheus scrapes (process_start_time_seconds of job $job).",
              targets((f"count(process_start_time_seconds{{{job}}})", "workers")),
              width=6, height=7, options=STAT),
        panel(lay, "timeseries", "Worker restarts",
              "Restarts per worker in the last hour: changes of process_start_time_seconds.",
              targets((f"sum by (instance) (changes(process_start_time_seconds{{{job}}}[1h]))",
                       "{{instance}}")),
              width=9, height=7),
        panel(lay, "timeseries", "Redis memory",
              "Memory used by the Redis that holds the join state and the aggregates "
              "(search_relevance_redis_memory_bytes).",
              targets(("max(search_relevance_redis_memory_bytes)", "used")), width=9, height=7, unit="bytes"),
        panel(lay, "timeseries", "Age of the exported values",
              "How old the rollup every series above and the relevance and canary dashboards show is "
              "(search_relevance_rollup_age_seconds, the youngest any worker exports). /readyz says not "
              "ready above max_rollup_age (30 s by default), and SearchRelevanceRollupStale fires after 5 "
              "minutes above 300 s (docs/worker.md, the exporter and the rollup).",
              targets((f"min(search_relevance_rollup_age_seconds{{{job}}})", "age"),
                      (f"max(search_relevance_rollup_duration_seconds{{{job}}})", "last computation")),
              width=12, height=7, unit="s"),
        row(lay, "Annotators"),
        panel(lay, "timeseries", "Agreement per bucket (Krippendorff's alpha, ordinal)",
              "Of the overlapped pairs' first two grades over the bridge's agreement window "
              "(search_relevance_annotate_agreement_alpha; the dashed line is the threshold). Low with a "
              "steady DCG: the raters, not the ranker (runbook SearchRelevanceRaterAgreementLow).",
              targets(("max by (bucket) (search_relevance_annotate_agreement_alpha)", "{{bucket}}"),
                      ('max(search_relevance_annotate_agreement_threshold{measure="alpha"})', "threshold")),
              width=8, decimals=2),
        panel(lay, "timeseries", "Each annotator against their peers (quadratic kappa)",
              "search_relevance_annotate_annotator_kappa per hashed annotator label: one low line is one "
              "careless or drifting rater; all low with few annotators, see gold accuracy.",
              targets(("max by (annotator) (search_relevance_annotate_annotator_kappa)", "{{annotator}}"),
                      ('max(search_relevance_annotate_agreement_threshold{measure="kappa"})', "threshold")),
              width=8, decimals=2),
        panel(lay, "timeseries", "Gold accuracy per annotator (exact)",
              "Share of gold tasks graded exactly right (search_relevance_annotate_annotator_gold_accuracy): "
              "exact low but within one step high is a drift; both low, random answers.",
              targets(("max by (annotator) "
                       '(search_relevance_annotate_annotator_gold_accuracy{match="exact"})', "{{annotator}}"),
                      ('max(search_relevance_annotate_agreement_threshold{measure="gold_exact"})',
                       "threshold")),
              width=8, unit="percentunit"),
        panel(lay, "timeseries", "Values below their threshold",
              "How many rater-quality values are low with enough counts behind them "
              "(search_relevance_annotate_agreement_low == 1); SearchRelevanceRaterAgreementLow fires after "
              "30 minutes.",
              targets(("count(max by (measure, bucket, annotator) (search_relevance_annotate_agreement_low) "
                       "== 1) or vector(0)", "low")),
              width=8, height=7),
        panel(lay, "timeseries", "Second and third opinions, gold tasks",
              "Tasks sent to two annotators, reopened for a third (two grades more than a step apart) and "
              "gold tasks mixed in, per hour. With honest annotators 1-2% of overlapped pairs need a third.",
              targets(("sum(increase(search_relevance_annotate_overlap_tasks_total[1h]))", "overlap"),
                      ("sum(increase(search_relevance_annotate_third_opinions_total[1h]))", "third"),
                      ("sum(increase(search_relevance_annotate_gold_tasks_total[1h]))", "gold")),
              width=8, height=7),
        panel(lay, "timeseries", "Annotation bridge backlog",
              "Requests waiting for their tasks and how long the oldest has waited "
              "(SearchRelevanceAnnotateBehind above 15 minutes).",
              targets(("max(search_relevance_annotate_backlog_requests)", "requests waiting"),
                      ("max(search_relevance_annotate_oldest_request_age_seconds)", "oldest, s")),
              width=8, height=7),
    ]
    variables = [
        datasource_variable(),
        constant_variable("job", JOB),
        query_variable("bucket", "Bucket", "search_relevance_impressions_total", "bucket", multi=True),
        query_variable("ranker", "Ranker", 'search_relevance_impressions_total{bucket=~"$bucket"}', "ranker",
                       multi=True),
    ]
    return dashboard("srm-pipeline", "Search relevance: pipeline health",
                     "Kafka consumption, the label join, dead letters, Redis, the workers, the annotators.",
                     variables, deploys(".*"), panels)


DASHBOARDS: dict[str, Callable[[], Json]] = {
    "relevance-overview.json": overview,
    "canary-comparison.json": canary,
    "pipeline-health.json": pipeline,
}


def built() -> dict[str, str]:
    """File name → the JSON text this script writes."""
    return {name: json.dumps(build(), indent=2, ensure_ascii=False) + "\n"
            for name, build in DASHBOARDS.items()}


def main(argv: list[str] | None = None) -> int:
    return write_or_check(argv, "Write grafana/dashboards/*.json.", OUT, built,
                          "python grafana/build_dashboards.py")


if __name__ == "__main__":
    sys.exit(main())
