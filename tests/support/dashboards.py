"""The Grafana dashboards as data: their variables' values and every panel's query with the variables
substituted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "grafana"
DASHBOARD_DIR = GRAFANA / "dashboards"
DATASOURCES = GRAFANA / "provisioning" / "datasources" / "prometheus.yml"
#: Grafana's own variables, with the values a live test substitutes (a 15 s scrape interval).
BUILTIN_VALUES = {
    "__rate_interval": "1m", "__interval": "15s", "__interval_ms": "15000", "__range": "1h", "__range_s": "3600",
    "__range_ms": "3600000", "__all": ".*",
}
#: Concrete values for the dashboards' variables: the simulator's rankers (monitor/sim/config.py), the
#: default windows and arms. The canary dashboard's ``ranker`` is the candidate.
DEFAULT_VALUES = {"bucket": "head", "ranker": "ranker-a", "variant": "control", "window": "1h", "kind": "canary",
                  "baseline": "ranker-a"}
DASHBOARD_VALUES = {"srm-canary": {"ranker": "ranker-b", "baseline": "ranker-a"}}
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)(?::\w+)?\]\]")
LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$")


@dataclass(frozen=True)
class PanelQuery:
    """One query of a dashboard: a panel target, an annotation, or a variable's series selector."""

    dashboard: str  # dashboard uid
    source: str  # "panel", "annotation" or "variable"
    panel_id: int | None
    title: str  # panel title, annotation name or variable name
    ref_id: str
    raw: str  # as written, with $variables
    expr: str  # variables replaced by concrete values
    instant: bool

    @property
    def id(self) -> str:
        where = f"panel {self.panel_id}" if self.panel_id is not None else self.source
        return f"{self.dashboard}/{where}/{self.title}/{self.ref_id}"


def dashboards() -> dict[str, dict[str, Any]]:
    """File name → parsed dashboard JSON."""
    return {path.name: json.loads(path.read_text(encoding="utf-8")) for path in sorted(DASHBOARD_DIR.glob("*.json"))}


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def substitute(text: str, values: Mapping[str, str]) -> str:
    """Replace ``$var``, ``${var}``, ``${var:format}`` and ``[[var]]`` with ``values[var]``; a variable
    without a value stays as written (and the query test then fails on it)."""

    def one(match: re.Match[str]) -> str:
        name = next(group for group in match.groups() if group)
        return values.get(name, match.group(0))

    return VARIABLE.sub(one, text)


def _values(board: dict[str, Any], overrides: Mapping[str, str] | None) -> dict[str, str]:
    values = {**BUILTIN_VALUES, **DEFAULT_VALUES, **DASHBOARD_VALUES.get(board["uid"], {})}
    for variable in board["templating"]["list"]:
        if variable["type"] == "constant":
            values[variable["name"]] = variable["query"]
        elif variable["type"] == "datasource":
            values[variable["name"]] = provisioned_datasource()["uid"]
    values.update(overrides or {})
    return values


def panel_queries(values: Mapping[str, str] | None = None) -> list[PanelQuery]:
    """Every PromQL query of every dashboard (panel targets, annotations, variables' series selectors),
    with variables replaced: Grafana's built-ins by :data:`BUILTIN_VALUES`, the dashboards' own by
    :data:`DEFAULT_VALUES` (per dashboard :data:`DASHBOARD_VALUES`), then by ``values``."""
    out: list[PanelQuery] = []
    for board in dashboards().values():
        uid, concrete = board["uid"], _values(board, values)
        for panel in all_panels(board["panels"]):
            for target in panel.get("targets", []):
                out.append(PanelQuery(uid, "panel", panel["id"], panel["title"], target["refId"], target["expr"],
                                      substitute(target["expr"], concrete), bool(target.get("instant"))))
        for annotation in board["annotations"]["list"]:
            if "expr" in annotation:
                out.append(PanelQuery(uid, "annotation", None, annotation["name"], "annotation",
                                      annotation["expr"], substitute(annotation["expr"], concrete), False))
        for variable in board["templating"]["list"]:
            if variable["type"] == "query":
                match = LABEL_VALUES.match(variable["definition"])
                assert match, f"{uid}: variable {variable['name']}: not label_values(selector, label)"
                selector = match["selector"]
                out.append(PanelQuery(uid, "variable", None, variable["name"], match["label"], selector,
                                      substitute(selector, concrete), True))
    return out


def provisioned_datasource() -> dict[str, Any]:
    (source,) = yaml.safe_load(DATASOURCES.read_text(encoding="utf-8"))["datasources"]
    return source
