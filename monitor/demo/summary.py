"""The summary a demo or replay ends with: as a JSON-ready dict (``--json``) and as text.

Per group (bucket, ranker, variant) it gives the cumulative numbers since the start (every session scored
or expired, after corrections): mean DCG@k with its 95% interval, PNR (ties-positive convention), label
coverage; a shadow candidate's group (``bucket|candidate|shadow``) gives its own lists' numbers over the
sessions it was paired on (:func:`group_stats`). Then the canary verdicts, each pair's overall verdict
with its checks, the alerts that fired or resolved (event time and wall offset), the session counters and
the dead letters by reason code (a replay: the first few with their file and line), and the impressions
of an undeclared variant or ranker, by value (never sampled, in no group)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from monitor.core.stream.counters import DEAD_LETTER
from monitor.core.stream.session import split_group
from monitor.core.stream.shadow import SHADOW
from monitor.core.stream.stats import Stats, summarise
from monitor.demo.engine import Engine
from monitor.demo.intervals import pnr_interval
from monitor.demo.recording import finite, iso
from monitor.demo.verdict_rows import overall_rows

COUNTERS = ("impressions", "sampled", "scored", "expired", "rescored", "corrections")
JUDGMENTS = ("requested", "received", "top_k")
BUCKET_ORDER = {"head": 0, "torso": 1, "tail": 2}


def group_order(group: str) -> tuple[int, bool, str]:
    bucket, ranker, variant = split_group(group)
    return BUCKET_ORDER.get(bucket, 9), variant != "control", ranker


_CANDIDATE_FIELDS = {"sessions": "pair_n", "dcg": "pair_y", "dcg_sq": "pair_yy"}


def is_shadow(group: str) -> bool:
    return split_group(group)[2] == SHADOW


def group_stats(group: str, stats: Mapping[str, float]) -> Mapping[str, float]:
    """A group's sums as :func:`summarise` reads them: a shadow group's paired sums (docs/events.md) become
    the candidate's own DCG@k over its paired sessions (its PNR is left out: the paired sums count pairs
    without the grade-tied ones, the groups' PNR counts those as positive; no coverage); other groups'
    are unchanged.

    >>> group_stats("tail|ranker-c|shadow", {"pair_n": 2.0, "pair_x": 5.0, "pair_y": 4.0})["dcg"]
    4.0
    """
    if not is_shadow(group):
        return stats
    return Stats({name: stats.get(paired, 0.0) for name, paired in _CANDIDATE_FIELDS.items()})


def group_rows(engine: Engine) -> list[dict[str, Any]]:
    rows = []
    for group, totals in sorted(engine.latest.totals().items(), key=lambda item: group_order(item[0])):
        bucket, ranker, variant = split_group(group)
        stats = group_stats(group, totals)
        s = summarise(stats)
        row = {"bucket": bucket, "ranker": ranker, "variant": variant,
               "k": engine.latest.config.k.get(bucket), "sessions": s.sessions, "expired": s.expired,
               "dcg": s.dcg, "dcg_ci": list(s.dcg_ci) if s.dcg_ci else None, "ndcg": s.ndcg,
               "pnr": s.pnr, "pnr_ci": list(ci) if (ci := pnr_interval(stats)) else None,
               "coverage": s.coverage}
        if is_shadow(group):
            row.update(ndcg=None, pnr=None, pnr_ci=None, coverage=None)
        rows.append(row)
    return rows


def build_summary(engine: Engine, command: str, wall: float, interrupted: bool = False,
                  **extra: Any) -> dict[str, Any]:
    """The summary of what ``engine`` has seen (JSON-ready: non-finite numbers become None)."""
    snap = engine.latest
    counters = {name: 0 for name in COUNTERS}
    judgments = {name: 0 for name in JUDGMENTS}
    dead: dict[str, int] = {}
    for counter, value in snap.counters.items():
        name = counter.name
        if counter.group and name in counters:
            counters[name] += round(value)
        elif counter.group and name.startswith("judgments_") and name[10:] in judgments:
            judgments[name[10:]] += round(value)
        elif not counter.group and name == DEAD_LETTER:
            dead[counter.label] = round(value)
    points = engine.recording.points
    earliest = engine.pipeline.earliest  # the earliest impression: a stream need not be in time order
    first = earliest if math.isfinite(earliest) else engine.first_watermark
    summary: dict[str, Any] = {
        "command": command, "source": engine.recording.source, "interrupted": interrupted,
        "wall_seconds": round(wall, 3), "events": engine.events,
        "event_time": {"start": iso(first), "end": iso(snap.watermark),
                       "hours": round((snap.watermark - first) / 3600.0, 3)
                       if first is not None and math.isfinite(snap.watermark) else 0.0},
        "points": len(points), "sessions": counters, "judgments": judgments,
        "budget": {"per_bucket": dict(snap.config.budget), "unit": snap.config.budget_unit,
                   "period": snap.config.budget_period},
        "dead_letters": dict(sorted(dead.items(), key=lambda item: (-item[1], item[0]))),
        "undeclared": undeclared_rows(engine),
        "groups": group_rows(engine),
        "verdicts": [row.to_json() for row in engine.verdicts],
        "overall": [row.to_json() for row in overall_rows(engine.verdicts)],
        "alerts": list(engine.recording.alerts),
        "firing": sorted(note.name + "{" + ",".join(note.key) + "}" for note in engine.firing.values()),
        **extra,
    }
    result: dict[str, Any] = finite(summary)
    return result


def undeclared_rows(engine: Engine) -> list[dict[str, Any]]:
    """The impressions of an undeclared variant or ranker, by value, most first (the first
    ``MAX_UNDECLARED`` values seen; the counter ``undeclared{reason}`` counts them all)."""
    config = engine.pipeline.config
    declared = {"variant": ", ".join(config.variants), "ranker": config.ranker_pattern or ""}
    seen = sorted(engine.pipeline.undeclared_seen.items(), key=lambda item: (-item[1], item[0]))
    return [{"reason": reason, "value": value, "impressions": n, "declared": declared[reason],
             "handling": config.undeclared} for (reason, value), n in seen]


def undeclared_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per undeclared variant or ranker: how many impressions, what became of them, what the
    settings declare."""
    lines = []
    for row in rows:
        what = ("never sampled, in no group (counted as other)" if row["handling"] == "other"
                else "dead letters undeclared_" + row["reason"])
        setting = "[stream] variants" if row["reason"] == "variant" else "[stream] ranker_pattern"
        n, plural = row["impressions"], "" if row["impressions"] == 1 else "s"
        lines.append(f"{n:,} impression{plural} of undeclared {row['reason']} {row['value']!r}: "
                     f"{what}; declared: {row['declared']} ({setting}; docs/events.md)")
    return lines


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _adjusted(share: float | None) -> str:
    """How much of a verdict's sessions were adjusted for query difficulty (docs/canary.md)."""
    return "-" if share is None else f"{share:.0%} of sessions"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100.0 * value:+.1f}%"


def overall_lines(pairs: list[dict[str, Any]]) -> list[str]:
    """Each pair's overall verdict (regression if a metric regressed, pass only if both passed), its
    checks (``SRM −9.6%``, ``imbalance −4.8%`` when flagged; ``ratio ok``, ``balance ok``; ``-``: none
    ran), then the details of the flagged ones."""
    lines = [f"{'overall per pair':<25} {'verdict':<13} {'checks':<27} why"]
    for o in pairs:
        verdict = o["verdict"] + ("" if o["trusted"] else "*")
        checks = ", ".join(c["note"] for c in o["checks"]) or "-"
        lines.append(f"{o['bucket']:<6} {o['kind']:<6} {o['candidate'][:11]:<11} {verdict:<13} {checks:<27} "
                     f"{o['reason']}")
    lines += [f"  {o['bucket']} {o['candidate']}: {c['name'].replace('_', ' ')}: {c['detail']}"
              for o in pairs for c in o["checks"] if c["flagged"]]
    if not all(o["trusted"] for o in pairs):
        lines.append("  * not trusted: the canary's share of impressions is not the declared one")
    return lines


def render_summary(summary: dict[str, Any]) -> str:
    """The summary as text for a terminal."""
    c, span = summary["sessions"], summary["event_time"]
    state = "interrupted" if summary["interrupted"] else "finished"
    lines = [f"== {summary['command']} {state}: {summary['events']:,} events, {span['hours']:.2f} h of event "
             f"time ({span['start']} → {span['end']}) in {summary['wall_seconds']:.1f} s wall",
             f"sessions: {c['impressions']:,} impressions, {c['sampled']:,} sampled, {c['scored']:,} scored, "
             f"{c['expired']:,} expired, {c['rescored']:,} re-scored, {c['corrections']:,} corrections"]
    if "judgments" in summary:
        j, budget = summary["judgments"], summary["budget"]
        amounts = sorted(set(budget["per_bucket"].values()))
        per = f"{amounts[0]:,.0f}" if len(amounts) == 1 else "/".join(
            f"{budget['per_bucket'][b]:,.0f}" for b in BUCKET_ORDER)
        period = "hour" if budget["period"] == 3600 else f"{budget['period']:g} s"
        saved = (f" ({1 - j['requested'] / j['top_k']:.0%} of the sampled sessions' {j['top_k']:,} top-k "
                 "documents already graded)") if j.get("top_k") else ""
        lines.append(f"judgments: {j['requested']:,} requested{saved}, {j['received']:,} received "
                     f"(budget {per} {budget['unit']} per bucket per {period})")
    dead = summary["dead_letters"]
    lines.append(f"dead letters: {sum(dead.values()):,}"
                 + (" (" + ", ".join(f"{k} {v}" for k, v in dead.items()) + ")" if dead else ""))
    first = summary.get("dead_letter_lines") or []
    lines += [f"  {line}" for line in first]
    if dead and first:
        where, more = summary.get("dead_letters_file"), sum(dead.values()) - len(first)
        lines.append(f"  every one with its line in {where}" if where else
                     (f"  … {more:,} more: " if more > 0 else "  ") + "--dead-letters FILE writes each one")
    lines += undeclared_lines(summary.get("undeclared", []))
    lines.append("")
    lines.append(f"{'cumulative per group':<24} {'scored':>8} {'expired':>8}  {'DCG@k':<5}  {'[95% CI]':<18} "
                 f"{'PNR':>5}  {'[95% CI]':<13} {'labelled':>8}")
    for g in summary["groups"]:
        ci, pci = g["dcg_ci"], g["pnr_ci"]
        interval = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-"
        pnr_interval_ = f"[{pci[0]:.2f}, {pci[1]:.2f}]" if pci else "-"
        pnr = ("inf" if g["pnr"] is None and g["sessions"] and g["variant"] != SHADOW
               else _num(g["pnr"], 2))
        coverage = "-" if g["coverage"] is None else f"{100 * g['coverage']:.1f}%"
        name = f"{g['bucket']} {g['variant']} {g['ranker']}"
        lines.append(f"{name:<24} {g['sessions']:>8,} {g['expired']:>8,}  {_num(g['dcg'])}  {interval:<18} "
                     f"{pnr:>5}  {pnr_interval_:<13} {coverage:>8}")
    lines.append("")
    if summary["verdicts"]:
        lines.append(f"{'canary verdicts':<25} {'verdict':<13} {'effect':>7}  {'95% conf. sequence':<19} "
                     "sessions control/canary".ljust(94) + "adjusted for query difficulty")
        for v in summary["verdicts"]:
            interval = f"[{_pct(v['lower'])}, {_pct(v['upper'])}]"
            name = f"~{v['candidate']}" if v.get("kind") == "shadow" else v["candidate"]
            lines.append(f"{v['bucket']:<6} {v['metric']:<4} {name[:13]:<13} {v['verdict']:<13} "
                         f"{_pct(v['estimate']):>7}  {interval:<19} "
                         f"{v['n_baseline']:,}/{v['n_candidate']:,}".ljust(94) + _adjusted(v.get("adjusted")))
        if any(v.get("kind") == "shadow" for v in summary["verdicts"]):
            lines.append("~: a shadow candidate, its lists against the lists served to the same sessions "
                         "(paired; sessions: the same on both sides)")
        lines.append("")
        lines += overall_lines(summary.get("overall", []))
    else:
        lines.append("canary verdicts: none (no canary deploy seen)")
    lines.append("")
    if summary["alerts"]:
        lines.append("alerts:")
        for a in summary["alerts"]:
            labels = a.get("labels") or {"bucket": a["bucket"], "metric": a["metric"]}
            where = " ".join(f"{k}={labels[k]}" for k in ("bucket", "metric", "kind") if labels.get(k))
            lines.append(f"  {a['status'].upper():<8} {a['alertname']} {where} at {a['time']} (event time), "
                         f"+{a['wall']:.1f} s (wall)")
    else:
        lines.append("alerts: none fired")
    for key in ("metrics_url", "record", "events_file"):
        if summary.get(key):
            lines.append(f"{key.replace('_', ' ')}: {summary[key]}")
    return "\n".join(lines) + "\n"
