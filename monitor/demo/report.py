"""The HTML page of ``monitor report``: the run's alerts, verdicts and tables around its figures.

One ``index.html`` with the PNGs beside it (relative links, so the folder can be moved, zipped or served
as it is); no scripts, no external styles or fonts.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from monitor.demo.recording import Recording

CAPTIONS = {
    "dcg": ("Mean DCG@k over event time",
            "Rolling mean DCG@k per bucket, control and canary, with 95% confidence bands. Dotted lines: "
            "deploys and the canary start; dashed red lines: alerts firing for that bucket."),
    "pnr": ("PNR over event time",
            "Rolling PNR (positive over negative pairs, summed over sessions), with 95% delta-method bands."),
    "canary": ("Canary comparison",
               "Relative change of the canary against control per bucket and metric, with its always-valid "
               "95% confidence sequence (valid at every look); the strip along the bottom is the verdict "
               "at each point: green pass, grey inconclusive, red regression."),
    "coverage": ("Labels",
                 "Label coverage of the top k over closed sessions (scored or expired), and sessions "
                 "scored, per bucket and arm."),
}

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1320px;
       padding: 0 1rem; color: #222; line-height: 1.45; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
.meta { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: .6rem 0; font-size: .92rem; }
th, td { padding: .25rem .7rem; border-bottom: 1px solid #e4e4e4; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.regression, .firing { color: #b33c00; font-weight: 600; } .pass, .resolved { color: #00795a; }
.inconclusive { color: #666; }
figure { margin: 1.2rem 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: .92rem; }
"""


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value))


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100.0 * value:+.1f}%"


def _num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[tuple[str, str]]]) -> str:
    """Rows of (text, css class) cells; the text is escaped here."""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    cells = ("".join(f'<td class="{c}">{_e(t)}</td>' for t, c in row) for row in rows)
    body = "".join(f"<tr>{row}</tr>" for row in cells)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _describe(source: Mapping[str, Any]) -> str:
    if source.get("command") == "demo":
        regression = float(source.get("regression") or 0.0)
        change = (f"a {100 * regression:g}% canary regression in {source.get('bucket')}" if regression
                  else "a healthy canary")
        return (f"monitor demo, seed {source.get('seed')}: {source.get('sessions'):,} simulated sessions "
                f"over {source.get('hours')} h of event time, {change}")
    if source.get("command") == "replay":
        return f"monitor replay of {source.get('file')}"
    return str(source.get("command", "a run"))


def _alerts(recording: Recording) -> str:
    if not recording.alerts:
        return "<p>No alert fired.</p>"
    rows = []
    for a in recording.alerts:
        status = str(a.get("status"))
        rows.append([(status, status), (str(a.get("alertname")), ""), (str(a.get("bucket")), ""),
                     (str(a.get("metric")), ""), (str(a.get("time") or a.get("ts")), ""),
                     (f"+{float(a.get('wall', 0.0)):.1f} s", "num"),
                     (str((a.get("annotations") or {}).get("summary", "")), "")])
    return _table(["status", "alert", "bucket", "metric", "event time", "wall", "summary"], rows)


def _verdicts(summary: Mapping[str, Any]) -> str:
    verdicts = summary.get("verdicts") or []
    if not verdicts:
        return "<p>No canary comparison (no canary traffic with a control to compare against).</p>"
    rows = [[(str(v["bucket"]), ""), (str(v["metric"]), ""), (f"{v['candidate']} vs {v['baseline']}", ""),
             (str(v["verdict"]), str(v["verdict"])), (_pct(v.get("estimate")), "num"),
             (f"[{_pct(v.get('lower'))}, {_pct(v.get('upper'))}]", "num"),
             (f"{v['n_baseline']:,} / {v['n_candidate']:,}", "num"), (str(v.get("reason", "")), "")]
            for v in verdicts]
    return _table(["bucket", "metric", "comparison", "verdict", "change", "95% confidence sequence",
                   "sessions control / canary", "why"], rows)


def _groups(summary: Mapping[str, Any]) -> str:
    rows = []
    for g in summary.get("groups") or []:
        ci = g.get("dcg_ci")
        rows.append([(str(g["bucket"]), ""), (str(g["variant"]), ""), (str(g["ranker"]), ""),
                     (f"{g['sessions']:,}", "num"), (f"{g['expired']:,}", "num"), (_num(g.get("dcg")), "num"),
                     (f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "–", "num"), (_num(g.get("pnr"), 2), "num"),
                     (_num(g.get("coverage"), 3), "num")])
    return _table(["bucket", "variant", "ranker", "scored", "expired", "mean DCG@k", "95% CI", "PNR",
                   "label coverage"], rows)


def _pipeline(summary: Mapping[str, Any]) -> str:
    counts = summary.get("sessions") or {}
    dead = summary.get("dead_letters") or {}
    rows = [[(name.replace("_", " "), ""), (f"{int(value):,}", "num")] for name, value in counts.items()]
    out = _table(["sessions", "count"], rows)
    if dead:
        out += _table(["dead letters by reason", "count"],
                      [[(str(k), ""), (f"{int(v):,}", "num")] for k, v in dead.items()])
    else:
        out += "<p>No dead letters.</p>"
    return out


def render_html(recording: Recording, figures: Mapping[str, Path], run_file: str, window: str) -> str:
    """The page; ``figures`` maps a figure name to its PNG (linked by file name, beside the page)."""
    summary: Mapping[str, Any] = recording.summary or {}
    span = summary.get("event_time") or {}
    meta = _describe(recording.source)
    if span:
        meta += (f"; {span.get('start')} → {span.get('end')} ({span.get('hours')} h of event time), "
                 f"{summary.get('events', 0):,} events in {summary.get('wall_seconds', 0):.1f} s wall")
    if summary.get("interrupted"):
        meta += " (interrupted)"
    parts = [f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
             f"<title>Search relevance run report</title><style>{STYLE}</style></head><body>",
             "<h1>Search relevance run report</h1>", f'<p class="meta">{_e(meta)}</p>',
             "<h2>Alerts</h2>", _alerts(recording),
             "<h2>Canary verdicts at the end of the run</h2>", _verdicts(summary)]
    for name in ("dcg", "pnr", "canary", "coverage"):
        if name not in figures:
            continue
        title, caption = CAPTIONS[name]
        if name in ("dcg", "pnr"):
            caption += f" Window: rolling {window}."
        parts.append(f"<h2>{_e(title)}</h2><figure><img src=\"{_e(figures[name].name)}\" alt=\"{_e(title)}\">"
                     f"<figcaption>{_e(caption)}</figcaption></figure>")
    parts += ["<h2>Per group, cumulative over the run</h2>", _groups(summary),
              "<h2>Pipeline</h2>", _pipeline(summary),
              f'<p class="meta">Made by <code>monitor report</code> from {_e(run_file)}.</p></body></html>']
    return "\n".join(parts) + "\n"
