"""The live terminal view: rolling DCG@k and PNR per bucket and arm, coverage, canary verdicts, alerts.

:func:`render` is pure (engine state in, lines out). :class:`Screen` draws it: on a terminal it redraws
the block in place (cursor up, clear to the end) and prints alerts above it so they stay on screen; on
anything else (a pipe, a CI log) it writes a short plain block every ``plain_every`` wall seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TextIO

from monitor.core.canary.alerts import check_note
from monitor.core.stream.counters import DEAD_LETTER
from monitor.core.stream.session import split_group
from monitor.core.stream.stats import summarise
from monitor.demo.engine import Engine
from monitor.demo.intervals import pnr_interval
from monitor.demo.recording import iso
from monitor.demo.summary import group_order, group_stats, is_shadow
from monitor.demo.verdict_rows import AlertNote, VerdictRow, overall_rows

VIEW_WINDOW = "1h"


@dataclass(frozen=True)
class Header:
    """What the engine does not know: the command, how far along, where /metrics is."""

    title: str
    wall: float
    progress: float | None = None  # 0..1 of the input, None if unknown (forever)
    speed: float | None = None     # event seconds per wall second
    metrics_url: str | None = None


def _ci(interval: tuple[float, float] | None) -> str:
    return f"[{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "-"


def _pct(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{100.0 * value:+.1f}%"


def render(engine: Engine, header: Header, window: str = VIEW_WINDOW) -> list[str]:
    snap = engine.latest
    when = iso(snap.watermark) or "no impression yet"
    parts = [header.title, f"event time {when}"]
    if header.progress is not None:
        parts.append(f"{100.0 * header.progress:3.0f}%")
    if header.speed:
        parts.append(f"{header.speed:,.0f}× real time")
    parts.append(f"wall {header.wall:5.1f} s")
    lines = ["  ".join(parts)]
    if header.metrics_url:
        lines.append(f"/metrics: {header.metrics_url}")
    if window not in snap.config.windows:
        window = next(iter(snap.config.windows))
    longest = max(snap.config.windows, key=lambda w: snap.config.windows[w])
    lines.append(f"{'rolling ' + window:<28} {'DCG@k':>6} {'[95% CI]':<14} {'PNR':>6} {'[95% CI]':<14} "
                 f"{'sessions':>8}  {'labelled (' + longest + ')':>14}")
    groups = sorted((g for (w, g) in snap.windows if w == window), key=group_order)
    for group in groups:
        bucket, ranker, variant = split_group(group)
        stats = group_stats(group, snap.windows[(window, group)])
        s = summarise(stats)
        dcg = "-" if s.dcg is None else f"{s.dcg:6.3f}"
        pnr = "-" if s.pnr is None or is_shadow(group) else ("inf" if math.isinf(s.pnr) else f"{s.pnr:6.2f}")
        # Coverage counts closed sessions, which a window shorter than the join window barely holds.
        closed = summarise(group_stats(group, snap.windows.get((longest, group), {}))).coverage
        coverage = "-" if closed is None or is_shadow(group) else f"{100.0 * closed:5.1f}%"
        name = f"{bucket} @{snap.config.k.get(bucket, '?')} {variant} {ranker}"
        lines.append(f"{name:<28} {dcg:>6} {_ci(s.dcg_ci):<14} {pnr:>6} {_ci(pnr_interval(stats)):<14} "
                     f"{s.sessions:>8,}  {coverage:>14}")
    if not groups:
        lines.append("  (no session scored in the window yet)")
    if engine.verdicts:
        lines.append("canary vs control (since the canary started): relative change "
                     "[95% confidence sequence] verdict; the pair's overall verdict")
        if any(v.kind == "shadow" for v in engine.verdicts):
            lines.append("shadow: a candidate's lists against the lists served to the same sessions "
                         "(paired; no user sees the candidate)")
        lines += verdict_lines(engine.verdicts)
    else:
        lines.append("canary: no canary deploy seen yet")
    firing = sorted(engine.firing.values(), key=lambda n: n.key)
    lines.append("alerts: " + (", ".join(f"{n.name} {n.labels.get('bucket', '')} {n.labels.get('metric', '')}"
                                         .rstrip() for n in firing) if firing else "none firing"))
    dead = sum(v for counter, v in snap.counters.items() if not counter.group and counter.name == DEAD_LETTER)
    lines.append(f"events {engine.events:,}   dead letters {dead:,.0f}")
    return lines


def verdict_lines(verdicts: list[VerdictRow]) -> list[str]:
    """One line per compared pair (per bucket in the demo): each metric's change, interval and verdict
    (``*``: not trusted), the overall verdict, and the checks that flagged something."""
    pairs = overall_rows(verdicts)
    several = len(pairs) > len({o.bucket for o in pairs})  # name the pair when a bucket has more than one
    out = []
    for o in sorted(pairs, key=lambda o: group_order(f"{o.bucket}||")):
        pair = (o.bucket, o.kind, o.baseline, o.candidate)
        cells = [f"{v.metric} {_pct(v.estimate):>6} [{_pct(v.lower)}, {_pct(v.upper)}] "
                 f"{v.verdict.upper()}{'' if v.trusted else '*'}" for v in verdicts
                 if (v.bucket, v.kind, v.baseline, v.candidate) == pair]
        cells.append(f"overall {o.verdict.upper()}{'' if o.trusted else '*'}")
        name = f"{o.bucket:<6}" + (f" {o.kind} {o.candidate}" if several else "")
        flagged = ", ".join(check_note(check) for check in o.flagged)
        out.append(f"  {name} " + "   ".join(cells) + (f"   [{flagged}]" if flagged else ""))
    if not all(v.trusted for v in verdicts):
        out.append("  * not trusted: the canary's share of impressions is not the declared one (SRM)")
    return out


def alert_line(note: AlertNote) -> str:
    summary = note.annotations.get("summary", "")
    where = " ".join(f"{k}={note.labels[k]}" for k in ("bucket", "metric", "kind") if k in note.labels)
    return (f"ALERT {note.status.upper()} {note.name} {where} at {iso(note.ts)} (event time), "
            f"+{note.wall:.1f} s wall" + (f": {summary}" if summary else ""))


class Screen:
    """Draws the view on ``stream``: in place on a terminal, as periodic plain blocks otherwise."""

    def __init__(self, stream: TextIO, tty: bool | None = None, plain_every: float = 5.0) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.plain_every = plain_every
        self._drawn = 0
        self._last_plain: float | None = None

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0

    def draw(self, lines: list[str], wall: float, force: bool = False) -> None:
        if self.tty:
            self._clear()
            self.stream.write("\n".join(lines) + "\n")
            self._drawn = len(lines)
        elif force or self._last_plain is None or wall - self._last_plain >= self.plain_every:
            self._last_plain = wall
            self.stream.write("\n".join(lines) + "\n\n")
        self.stream.flush()

    def note(self, line: str) -> None:
        """A line that stays (an alert): above the live block on a terminal."""
        if self.tty:
            self._clear()
        self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Leave the last drawn block on screen and move below it."""
        self._drawn = 0
        self.stream.flush()
