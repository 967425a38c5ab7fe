"""The report's figures (matplotlib, Agg backend: no display needed), each written as a PNG.

* ``dcg.png`` and ``pnr.png``: the rolling metric per bucket over event time, control and canary with
  their 95% bands, deploy and canary-start markers, alert markers;
* ``canary.png``: canary vs control per bucket and metric, the relative change with its always-valid 95%
  confidence sequence, the verdict as a coloured strip along the bottom;
* ``coverage.png``: label coverage of the top k and sessions scored, per bucket and arm.

Colours are the Okabe–Ito palette (distinguishable with the common colour-vision deficiencies).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from monitor.demo.recording import Recording
from monitor.demo.series import ArmSeries, VerdictSeries, arm_series, bucket_order, verdict_series

ARM_COLOURS = {"control": "#0072B2", "canary": "#E69F00"}
OTHER_COLOURS = ("#56B4E9", "#CC79A7", "#F0E442", "#000000")
VERDICT_COLOURS = {"pass": "#009E73", "regression": "#D55E00", "inconclusive": "#BBBBBB"}
DEPLOY_COLOURS = {"deploy": "#555555", "canary_start": "#CC79A7", "canary_share": "#CC79A7",
                  "canary_end": "#CC79A7", "rollback": "#D55E00"}
METRIC_TITLES = {"dcg": "DCG@k", "pnr": "PNR"}
DPI = 110


def _times(ts: Sequence[float]) -> list[datetime]:
    return [datetime.fromtimestamp(t, UTC) for t in ts]


def _at(ts: float) -> float:
    """An event time as a matplotlib date number (for vertical lines and spans)."""
    return float(mdates.date2num(datetime.fromtimestamp(ts, UTC)))  # type: ignore[no-untyped-call]


def _colour(variant: str, index: int) -> str:
    return ARM_COLOURS.get(variant, OTHER_COLOURS[index % len(OTHER_COLOURS)])


def _time_axis(ax: Axes, recording: Recording, label: bool = True) -> None:
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=UTC))  # type: ignore[no-untyped-call]
    ax.grid(True, color="#DDDDDD", linewidth=0.6)
    ax.set_axisbelow(True)
    day = datetime.fromtimestamp(recording.points[0].ts, UTC).strftime("%Y-%m-%d") if recording.points else ""
    if label:
        ax.set_xlabel(f"event time (UTC{', ' + day if day else ''})")


def _markers(ax: Axes, recording: Recording, bucket: str | None = None, metric: str | None = None,
             text: bool = False, alert_text: bool = True) -> None:
    """Deploys as dotted vertical lines; alerts of this bucket (and metric) as red dashed ones."""
    for d in recording.deploys:
        colour = DEPLOY_COLOURS.get(str(d.get("kind")), "#555555")
        when = _at(float(d["ts"]))
        ax.axvline(when, color=colour, linestyle=":", linewidth=1.4)
        if text:
            ax.annotate(f"{d.get('kind')} {d.get('ranker')}", (when, 1.0),
                        xycoords=("data", "axes fraction"), xytext=(3, -3), textcoords="offset points",
                        va="top", fontsize=8, color=colour)
    for a in recording.alerts:
        if bucket is not None and a.get("bucket") != bucket:
            continue
        if metric is not None and a.get("metric") != metric:
            continue
        firing = a.get("status") == "firing"
        when = _at(float(a["ts"]))
        colour = VERDICT_COLOURS["regression" if firing else "pass"]
        ax.axvline(when, color=colour, linestyle="--", linewidth=1.2)
        if alert_text:
            title = METRIC_TITLES.get(str(a.get("metric")), str(a.get("metric")))
            ax.annotate(f"alert: {title} {'fires' if firing else 'resolves'}", (when, 1.0),
                        xycoords=("data", "axes fraction"), xytext=(3, -14 if text else -3),
                        textcoords="offset points", va="top", fontsize=8, color=colour)


def _legend_handles(fig: Figure, recording: Recording, extra: list[Any]) -> None:
    from matplotlib.lines import Line2D

    handles = list(extra)
    kinds = sorted({str(d.get("kind")) for d in recording.deploys})
    handles += [Line2D([], [], color=DEPLOY_COLOURS.get(k, "#555555"), linestyle=":",
                       label=k.replace("_", " ")) for k in kinds]
    if recording.alerts:
        handles.append(Line2D([], [], color=VERDICT_COLOURS["regression"], linestyle="--",
                              label="alert fires"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), frameon=False, fontsize=9)


def _no_data(ax: Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} in this run", ha="center", va="center", transform=ax.transAxes,
            fontsize=11, color="#777777")


def _buckets(arms: dict[tuple[str, str], ArmSeries]) -> list[str]:
    return sorted({b for b, _ in arms}, key=bucket_order) or ["head", "torso", "tail"]


def metric_figure(recording: Recording, window: str, metric: str) -> Figure:
    """Rolling DCG@k or PNR per bucket (one panel each), arms with their 95% bands, and markers."""
    arms = arm_series(recording, window)
    buckets = _buckets(arms)
    fig, axes = plt.subplots(len(buckets), 1, figsize=(11, 2.9 * len(buckets) + 1.2), sharex=True,
                             squeeze=False)
    handles: dict[str, Any] = {}
    for ax, bucket in zip(axes[:, 0], buckets, strict=True):
        shown = [(key, s) for key, s in arms.items() if key[0] == bucket]
        for i, ((_, variant), s) in enumerate(shown):
            x, colour = _times(s.ts), _colour(variant, i)
            value, lower, upper = ((s.dcg, s.dcg_lower, s.dcg_upper) if metric == "dcg"
                                   else (s.pnr, s.pnr_lower, s.pnr_upper))
            (line,) = ax.plot(x, value, color=colour, linewidth=1.8, label=s.label)
            ax.fill_between(x, lower, upper, color=colour, alpha=0.2, linewidth=0)
            handles.setdefault(s.label, line)
        if not shown:
            _no_data(ax, f"{bucket} sessions")
        k = recording.k.get(bucket)
        unit = f"mean DCG@{k}" if metric == "dcg" else "PNR (pos./neg. pairs)"
        ax.set_ylabel(unit)
        ax.set_title(f"{bucket} queries" + (f" (k = {k})" if k else ""), loc="left", fontsize=10)
        _time_axis(ax, recording, label=bucket == buckets[-1])
        _markers(ax, recording, bucket, metric, text=bucket == buckets[0])
    what = "mean DCG@k per session" if metric == "dcg" else "PNR (summed positive / negative pairs)"
    fig.suptitle(f"Rolling {window} {what} by query bucket, control vs canary (bands: 95% CI)", fontsize=13)
    _legend_handles(fig, recording, list(handles.values()))
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    return fig


def _verdict_strip(ax: Axes, s: VerdictSeries) -> None:
    """The verdict over time as coloured spans along the bottom of the panel."""
    if not s.ts:
        return
    times = [_at(t) for t in s.ts]
    start = 0
    for i in range(1, len(times) + 1):
        if i == len(times) or s.verdict[i] != s.verdict[start]:
            end = times[i] if i < len(times) else times[-1]
            colour = VERDICT_COLOURS.get(s.verdict[start], "#BBBBBB")
            ax.axvspan(times[start], end, ymin=0.0, ymax=0.05, color=colour, linewidth=0)
            start = i


def canary_figure(recording: Recording, min_drop: float = 0.02) -> Figure:
    """Canary vs control per bucket (rows) and metric (columns): relative change, its 95% confidence
    sequence, the verdict strip, the smallest drop of interest and the alert markers."""
    from matplotlib.patches import Patch

    series = {k: v for k, v in verdict_series(recording).items() if k[2] == "canary"}
    buckets = sorted({k[0] for k in series}, key=bucket_order) or ["head", "torso", "tail"]
    metrics = ["dcg", "pnr"]
    fig, axes = plt.subplots(len(buckets), len(metrics), figsize=(12, 2.7 * len(buckets) + 1.4), sharex=True,
                             squeeze=False)
    for row, bucket in enumerate(buckets):
        for col, metric in enumerate(metrics):
            ax = axes[row, col]
            found = [s for k, s in series.items() if k[0] == bucket and k[1] == metric]
            for i, s in enumerate(found):
                x = _times(s.ts)
                colour = ARM_COLOURS["canary"] if i == 0 else OTHER_COLOURS[i % len(OTHER_COLOURS)]
                ax.plot(x, [100 * v for v in s.estimate], color=colour, linewidth=1.8, label=s.label)
                ax.fill_between(x, [100 * v for v in s.lower], [100 * v for v in s.upper], color=colour,
                                alpha=0.2, linewidth=0)
                _verdict_strip(ax, s)
            if not found:
                _no_data(ax, "canary comparison")
            ax.axhline(0.0, color="#777777", linewidth=0.9)
            ax.axhline(-100 * min_drop, color="#000000", linewidth=0.9, linestyle=(0, (4, 3)))
            ax.set_title(f"{bucket}: {METRIC_TITLES[metric]}" + (f", {found[0].label}" if found else ""),
                         loc="left", fontsize=10)
            ax.set_ylabel("canary vs control (%)")
            _time_axis(ax, recording, label=row == len(buckets) - 1)
            _markers(ax, recording, bucket, metric)
            _clip(ax, found)
    fig.suptitle("Canary vs control: relative change with its always-valid 95% confidence sequence",
                 fontsize=13)
    from matplotlib.lines import Line2D

    extra: list[Any] = [Line2D([], [], color=ARM_COLOURS["canary"], linewidth=1.8, label="relative change"),
                        Line2D([], [], color="#000000", linestyle=(0, (4, 3)),
                               label=f"smallest drop of interest (−{100 * min_drop:g}%)")]
    extra += [Patch(color=c, label=f"verdict: {v}") for v, c in VERDICT_COLOURS.items()]
    _legend_handles(fig, recording, extra)
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    return fig


def _clip(ax: Axes, found: list[VerdictSeries]) -> None:
    """Keep the y range readable: the first, very wide sequences (few sessions) would flatten the rest, so
    the range fits the bands of the last three quarters of the comparison (never below −100%)."""
    values: list[float] = []
    for s in found:
        skip = len(s.ts) // 4
        values += [100 * v for v in s.lower[skip:] + s.upper[skip:] + s.estimate if math.isfinite(v)]
    if not values:
        return
    low, high = min(min(values), -5.0), max(max(values), 5.0)
    pad = 0.15 * (high - low)
    ax.set_ylim(max(low - pad, -100.0), high + pad)


def coverage_figure(recording: Recording, window: str) -> Figure:
    """Label coverage of the top k and sessions scored in the window, per bucket and arm.

    Coverage counts closed sessions only (scored, or expired at the end of the join window), so a window
    shorter than the join window holds few expired sessions: the longest recorded window shows it best.
    """
    if recording.windows:
        window = max(recording.windows, key=lambda w: float(recording.windows[w]))
    arms = arm_series(recording, window)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7.5), sharex=True)
    styles = {"control": "-", "canary": "--"}
    bucket_colours = {"head": "#0072B2", "torso": "#009E73", "tail": "#D55E00"}
    for i, ((bucket, variant), s) in enumerate(arms.items()):
        x = _times(s.ts)
        colour = bucket_colours.get(bucket, OTHER_COLOURS[i % len(OTHER_COLOURS)])
        label = f"{bucket} {variant}"
        top.plot(x, [100 * v for v in s.coverage], color=colour, linestyle=styles.get(variant, ":"),
                 linewidth=1.6, label=label)
        bottom.plot(x, s.sessions, color=colour, linestyle=styles.get(variant, ":"), linewidth=1.6,
                    label=label)
    if not arms:
        _no_data(top, "sessions")
    top.set_ylabel("labelled share of the top k (%)")
    lowest = min((100 * v for s in arms.values() for v in s.coverage if math.isfinite(v)), default=0.0)
    top.set_ylim(max(0.0, min(80.0, lowest - 5.0)), 101)
    top.set_title(f"Label coverage of the top k (rolling {window}, over sessions scored or expired)",
                  loc="left", fontsize=10)
    bottom.set_ylabel("sessions scored")
    bottom.set_title(f"Sessions scored in the rolling {window} window", loc="left", fontsize=10)
    for ax in (top, bottom):
        _time_axis(ax, recording, label=ax is bottom)
        _markers(ax, recording, alert_text=False)
    top.legend(loc="lower right", ncol=3, fontsize=9, frameon=True)
    fig.suptitle("Labels: coverage and volume per bucket (solid: control, dashed: canary)", fontsize=13)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig


def write_figures(recording: Recording, out: Path, window: str, min_drop: float = 0.02) -> dict[str, Path]:
    """Draw every figure into ``out``; returns name → PNG path."""
    figures: dict[str, Callable[[], Figure]] = {"dcg": lambda: metric_figure(recording, window, "dcg"),
               "pnr": lambda: metric_figure(recording, window, "pnr"),
               "canary": lambda: canary_figure(recording, min_drop),
               "coverage": lambda: coverage_figure(recording, window)}
    paths: dict[str, Path] = {}
    for name, draw in figures.items():
        fig = draw()
        path = out / f"{name}.png"
        fig.savefig(path, dpi=DPI, facecolor="white")
        plt.close(fig)
        paths[name] = path
    return paths
