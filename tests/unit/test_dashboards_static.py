"""Static checks of the provisioned Grafana dashboards (``grafana/``), without a Grafana or a Prometheus.

The committed JSON equals what ``grafana/build_dashboards.py`` builds; every ``$variable`` is declared;
panel ids are unique; every data source reference is the templated variable or the provisioned uid; every
PromQL expression parses (``promql-parser``, the Rust parser's Python binding, offline) and names only
series that ``docs/metrics.md`` documents or that the worker's canary and pipeline-health code exports.

:func:`panel_queries` is the list of every query with its variables replaced by concrete values, for a live
test that runs each one against a real Prometheus (``from tests.unit.test_dashboards_static import
panel_queries``).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import promql_parser
import pytest
import yaml

from tests.support.dashboards import (
    BUILTIN_VALUES,
    DASHBOARD_DIR,
    DEFAULT_VALUES,
    GRAFANA,
    LABEL_VALUES,
    ROOT,
    VARIABLE,
    PanelQuery,
    _values,
    all_panels,
    dashboards,
    panel_queries,
    provisioned_datasource,
    substitute,
)

PROVIDERS = GRAFANA / "provisioning" / "dashboards" / "search-relevance.yml"
METRICS_DOC = ROOT / "docs" / "metrics.md"

#: Series the worker exports that docs/metrics.md may not list yet: the canary detector's, the deploy
#: times for annotations, pipeline health, and prometheus_client's process collector.
WORKER_SERIES = frozenset({
    "search_relevance_canary_estimate", "search_relevance_canary_lower", "search_relevance_canary_upper",
    "search_relevance_canary_evidence", "search_relevance_canary_verdict", "search_relevance_canary_sessions",
    "search_relevance_canary_overall_verdict", "search_relevance_canary_sample_ratio_mismatch",
    "search_relevance_canary_sample_ratio", "search_relevance_canary_covariate_imbalance",
    "search_relevance_deploy_timestamp_seconds",
    "search_relevance_events_total", "search_relevance_consumer_lag", "search_relevance_join_lag_seconds",
    "search_relevance_waiting_sessions", "search_relevance_redis_memory_bytes",
    "process_start_time_seconds",
})


def declared_variables(board: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {variable["name"]: variable for variable in board["templating"]["list"]}


def documented_series(text: str) -> set[str]:
    """Series names in the first column of docs/metrics.md's table; ``_upper`` after
    ``search_relevance_dcg_ci_lower`` means ``search_relevance_dcg_ci_upper``."""
    names: set[str] = set()
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        previous = ""
        for token in re.findall(r"`([a-z_]+)`", line.split("|")[1]):
            if token.startswith("_") and previous:
                token = previous.rsplit("_", 1)[0] + token
            names.add(token)
            previous = token
    return names


def allowed_series() -> set[str]:
    return documented_series(METRICS_DOC.read_text(encoding="utf-8")) | WORKER_SERIES


def series_names(expr: str) -> set[str | None]:
    """Metric names of every vector selector (``None`` for a selector without one)."""
    names: set[str | None] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            by_matcher = [m.value for m in node.matchers.matchers if m.name == "__name__"]
            names.add(node.name or (by_matcher[0] if by_matcher else None))

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def _builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_dashboards", GRAFANA / "build_dashboards.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def _datasource_refs(node: Any) -> Iterator[Any]:
    if isinstance(node, dict):
        if "datasource" in node:
            yield node["datasource"]
        for value in node.values():
            yield from _datasource_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _datasource_refs(value)


BOARDS = dashboards()
QUERIES = panel_queries()


# ---------------------------------------------------------------- the files


def test_committed_json_is_what_the_builder_writes() -> None:
    built = _builder().built()
    assert sorted(built) == sorted(BOARDS), "grafana/dashboards/ holds other files than the builder writes"
    for name, content in built.items():
        committed = (DASHBOARD_DIR / name).read_text(encoding="utf-8")
        assert committed == content, f"{name} is out of date: run python grafana/build_dashboards.py"


def test_three_dashboards_with_unique_uids_and_titles() -> None:
    assert len(BOARDS) == 3
    assert len({board["uid"] for board in BOARDS.values()}) == 3
    assert len({board["title"] for board in BOARDS.values()}) == 3


def test_provisioning_points_at_the_dashboards_and_the_builders_datasource() -> None:
    source = provisioned_datasource()
    assert source["type"] == "prometheus"
    assert source["uid"] == _builder().DATASOURCE_UID
    assert source["isDefault"] is True
    (provider,) = yaml.safe_load(PROVIDERS.read_text(encoding="utf-8"))["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == "/etc/grafana/dashboards"  # where docker-compose.yml mounts them


# ---------------------------------------------------------------- each dashboard


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_every_variable_used_is_declared(name: str) -> None:
    board = BOARDS[name]
    declared = set(declared_variables(board)) | set(BUILTIN_VALUES)
    used = {next(g for g in m.groups() if g) for s in _strings(board) for m in VARIABLE.finditer(s)}
    assert used - declared == set(), f"{name}: undeclared variables"
    for panel in all_panels(board["panels"]):
        if "repeat" in panel:
            assert declared_variables(board)[panel["repeat"]]["multi"], f"{name}: repeat over a single value"


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_panel_ids_are_unique_and_panels_fit_the_grid(name: str) -> None:
    panels = list(all_panels(BOARDS[name]["panels"]))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        refs = [target["refId"] for target in panel.get("targets", [])]
        assert len(refs) == len(set(refs)), f"{name}: {panel['title']}: duplicate refIds"


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_datasource_references_match_the_provisioning(name: str) -> None:
    board = BOARDS[name]
    variables = declared_variables(board)
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    accepted = {"${datasource}", "$datasource", provisioned_datasource()["uid"]}
    for ref in _datasource_refs(board):
        if ref == {"type": "grafana", "uid": "-- Grafana --"}:  # the built-in annotations
            continue
        assert isinstance(ref, dict), f"{name}: data source given by name: {ref!r}"
        assert ref["type"] == "prometheus" and ref["uid"] in accepted, f"{name}: {ref!r}"
    for panel in all_panels(board["panels"]):
        if panel.get("targets"):
            assert panel["datasource"]["uid"] in accepted, f"{name}: {panel['title']}"


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_bucket_and_ranker_variables_come_from_label_values(name: str) -> None:
    variables = declared_variables(BOARDS[name])
    for wanted in ("bucket", "ranker"):
        variable = variables[wanted]
        assert variable["type"] == "query"
        assert LABEL_VALUES.match(variable["definition"]), variable["definition"]
        assert variable["query"]["query"] == variable["definition"]


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_deploys_are_annotations(name: str) -> None:
    (annotation,) = [a for a in BOARDS[name]["annotations"]["list"] if not a.get("builtIn")]
    assert series_names(substitute(annotation["expr"], _values(BOARDS[name], None))) == {
        "search_relevance_deploy_timestamp_seconds"}
    assert annotation["useValueForTime"] is True  # the value is the event time (in ms after * 1000)


def test_overview_leads_with_dcg_and_its_interval_and_says_why() -> None:
    board = next(b for b in BOARDS.values() if b["uid"] == "srm-overview")
    panels = list(all_panels(board["panels"]))
    names = [series_names(q.expr) for q in QUERIES if q.dashboard == "srm-overview" and q.source == "panel"]
    used = set().union(*names)
    for wanted in ("search_relevance_dcg", "search_relevance_dcg_ci_lower", "search_relevance_dcg_ci_upper",
                   "search_relevance_ndcg", "search_relevance_pnr", "search_relevance_sessions_scored",
                   "search_relevance_label_coverage", "search_relevance_sessions_expired"):
        assert wanted in used
    (note,) = [p for p in panels if p["type"] == "text"]
    assert "only poor documents" in note["options"]["content"] and "≈ 1" in note["options"]["content"]
    first_chart = next(p for p in panels if p["type"] == "timeseries")
    assert "DCG@k" in first_chart["title"] and "NDCG" not in first_chart["title"]


def test_canary_and_pipeline_show_what_the_issue_asks() -> None:
    def used(uid: str) -> set[str | None]:
        return set().union(*(series_names(q.expr) for q in QUERIES if q.dashboard == uid and q.source == "panel"))

    assert {"search_relevance_canary_estimate", "search_relevance_canary_lower", "search_relevance_canary_upper",
            "search_relevance_canary_verdict", "search_relevance_canary_evidence",
            "search_relevance_canary_overall_verdict", "search_relevance_canary_sample_ratio_mismatch",
            "search_relevance_canary_covariate_imbalance"} <= used("srm-canary")
    assert {"search_relevance_consumer_lag", "search_relevance_events_total", "search_relevance_join_lag_seconds",
            "search_relevance_dead_letters_total", "search_relevance_redis_memory_bytes",
            "process_start_time_seconds"} <= used("srm-pipeline")


def test_dashboard_links_in_the_alert_rules_name_real_dashboards_and_variables() -> None:
    """Alerts link to a dashboard with its variables set (``/d/<uid>?var-<name>=...``)."""
    variables = {board["uid"]: set(declared_variables(board)) for board in BOARDS.values()}
    texts = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "deploy" / "prometheus" / "rules").glob("*.yml"))]
    links = [m for text in texts for m in re.finditer(r"/d/(?P<uid>[\w-]+)(?:\?(?P<query>\S*))?", text)]
    for link in links:
        assert link["uid"] in variables, f"no dashboard with uid {link['uid']}"
        for name in re.findall(r"var-(\w+)=", link["query"] or ""):
            assert name in variables[link["uid"]], f"{link['uid']} has no variable {name}"


# ---------------------------------------------------------------- every query


def test_every_dashboard_has_queries() -> None:
    assert {q.dashboard for q in QUERIES} == {board["uid"] for board in BOARDS.values()}
    assert len(QUERIES) > 40


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q.id)
def test_query_parses_and_names_known_series(query: PanelQuery) -> None:
    assert "$" not in query.expr and "[[" not in query.expr, f"{query.id}: a variable without a value"
    try:
        names = series_names(query.expr)
    except ValueError as error:
        pytest.fail(f"{query.id}: {query.expr!r} does not parse: {error}")
    assert None not in names, f"{query.id}: a selector without a metric name"
    unknown = names - allowed_series()
    assert not unknown, f"{query.id}: series not in docs/metrics.md nor exported by the worker: {unknown}"


def test_substitution_and_parsing_catch_mistakes() -> None:
    assert substitute('x{a="$bucket", b=~"${ranker}", c="[[window]]"}', DEFAULT_VALUES) == (
        'x{a="head", b=~"ranker-a", c="1h"}')
    assert substitute('x{a="$nope"}', DEFAULT_VALUES) == 'x{a="$nope"}'
    with pytest.raises(ValueError):
        series_names("max by (bucket) (search_relevance_dcg{bucket=\"head\"}")
    assert series_names('rate({__name__="search_relevance_events_total"}[1m])') == {"search_relevance_events_total"}
    assert "search_relevance_dcg_ci_upper" in documented_series(METRICS_DOC.read_text(encoding="utf-8"))
    assert "search_relevance_stat_removed_total" in documented_series(METRICS_DOC.read_text(encoding="utf-8"))


def test_the_check_panels_say_not_checked_rather_than_zero() -> None:
    """A check that did not run has no series (no data is not zero); its panel shows NOT CHECKED, a value
    of its own, for buckets where the pair has an overall verdict."""
    board = next(b for b in BOARDS.values() if b["uid"] == "srm-canary")
    checks = [p for p in all_panels(board["panels"]) if p["title"] in ("Sample ratio check", "Query mix check")]
    assert len(checks) == 2
    for panel in checks:
        (target,) = panel["targets"]
        assert " or (0 * max by (bucket) (search_relevance_canary_overall_verdict{" in target["expr"]
        (mapping,) = panel["fieldConfig"]["defaults"]["mappings"]
        assert mapping["options"]["-1"]["text"] == "NOT CHECKED"
        assert {mapping["options"][v]["text"] for v in ("0", "1")} in ({"OK", "MISMATCH"}, {"BALANCED", "IMBALANCED"})
