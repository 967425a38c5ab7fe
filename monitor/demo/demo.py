"""``monitor demo``: the simulator played through the engine at a compressed pace, with a live view.

Each simulated record is submitted when the wall clock reaches its event time divided by the speed
(``hours × 3600 / duration``); ``fast`` submits without waiting (tests, CI), which changes nothing but the
wall offsets, since the engine samples on event time. Ctrl-C stops the feed between two events and ends
with the summary of what was seen (sessions still waiting for labels stay open: nothing is flushed).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from monitor.alerting import AlertmanagerClient
from monitor.demo.engine import Engine
from monitor.demo.events_file import routable
from monitor.demo.interrupt import stop_on_sigint
from monitor.demo.settings import DemoSettings
from monitor.demo.summary import build_summary, render_summary
from monitor.demo.verdict_rows import AlertNote, Judge
from monitor.demo.view import Header, Screen, alert_line, render
from monitor.sim import SimEvent, Simulation, write_jsonl

TTY_REDRAW = 0.25   # wall seconds between two redraws on a terminal
PLAIN_EVERY = 5.0   # ... between two plain blocks elsewhere


@dataclass(frozen=True)
class DemoOptions:
    settings: DemoSettings = field(default_factory=DemoSettings)
    port: int | None = 9464          # None: no /metrics server
    alertmanager: str | None = None
    as_json: bool = False
    write_events: Path | None = None
    record: Path | None = None
    fast: bool = False


@dataclass
class DemoResult:
    summary: dict[str, Any]
    engine: Engine
    interrupted: bool


def source_of(settings: DemoSettings) -> dict[str, Any]:
    return {"command": "demo", "seed": settings.seed, "regression": settings.regression,
            "bucket": settings.bucket, "sessions": settings.sessions, "hours": settings.hours,
            "duration": settings.duration, "invalid_rate": settings.invalid_rate, "forever": settings.forever,
            "budget": settings.budget, "budget_unit": settings.budget_unit,
            "shadow": settings.shadow}


def traffic(settings: DemoSettings) -> Iterator[SimEvent]:
    """The simulated records, round after round when ``forever``."""
    round_ = 0
    while True:
        yield from Simulation(settings.sim_config(round_)).events()
        round_ += 1
        if not settings.forever:
            return


class Clock:
    """Wall time since the start, and sleeping (injectable for tests)."""

    def __init__(self, now: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._now, self.sleep = now, sleep
        self.start = now()

    def __call__(self) -> float:
        return self._now() - self.start


def write_events(path: Path, played: list[SimEvent]) -> tuple[int, int]:
    """Write the played records that a replay can route; returns (lines written, records left out)."""
    keep = [e for e in played if routable(e.value)]
    return write_jsonl(path, keep, include_invalid=True), len(played) - len(keep)


def run_demo(options: DemoOptions, out: TextIO, err: TextIO, judge: Judge,
             collectors: Callable[[Engine], list[Any]] | None = None,
             alertmanager: AlertmanagerClient | None = None, tty: bool | None = None,
             clock: Clock | None = None, on_ready: Callable[[str | None], None] | None = None) -> DemoResult:
    """Play the simulated traffic through a fresh engine; print the view, alerts and summary; deliver the
    alerts to ``alertmanager`` (started here, stopped at the end after a last delivery attempt)."""
    from monitor.demo.server import MetricsServer

    settings = options.settings
    clock = clock or Clock()
    engine = Engine(judge, settings.stream_config(), source_of(settings))
    screen = Screen(err if options.as_json else out, tty=tty, plain_every=PLAIN_EVERY)
    server = None
    if options.port is not None:
        server = MetricsServer(collectors(engine) if collectors else [], options.port)
    url = server.url if server else None
    if on_ready is not None:
        on_ready(url)
    if alertmanager is not None:
        alertmanager.start()
    origin = settings.sim_config(0).start_ts
    played: list[SimEvent] = []
    last_draw = -math.inf

    def header(wall: float, ts: float | None) -> Header:
        progress = None
        if not settings.forever and ts is not None:
            progress = min(max((ts - origin) / settings.span, 0.0), 1.0)
        return Header("monitor demo", wall, progress, settings.speed, url)

    def draw(wall: float, ts: float | None, force: bool = False) -> None:
        nonlocal last_draw
        if force or wall - last_draw >= (TTY_REDRAW if screen.tty else PLAIN_EVERY):
            last_draw = wall
            screen.draw(render(engine, header(wall, ts)), wall, force=True)

    def alerts(notes: list[AlertNote]) -> None:
        for note in notes:
            if not note.update:
                screen.note(alert_line(note))
        if alertmanager is not None:
            alertmanager.send([note.payload for note in notes if note.payload is not None])

    ts: float | None = None
    try:
        with stop_on_sigint() as stop:
            try:
                for count, event in enumerate(traffic(settings)):
                    ts = event.ts
                    if not options.fast:
                        target = (event.ts - origin) / settings.speed
                        while (now := clock()) < target and not stop.stopped:
                            draw(now, ts)
                            clock.sleep(min(target - now, 0.05))
                    if stop.stopped:
                        break
                    alerts(engine.feed(event.topic, event.key, event.value, clock()))
                    if options.write_events is not None:
                        played.append(event)
                    if count % 256 == 0:
                        draw(clock(), ts)
            except KeyboardInterrupt:  # a second Ctrl-C, or one outside the main thread's handler
                stop.stopped = True
            interrupted = stop.stopped
            alerts(engine.finish(clock(), flush=not interrupted))
    finally:
        if server is not None:
            server.close()
        if alertmanager is not None:
            alertmanager.stop()
    draw(clock(), ts, force=True)
    screen.close()
    extra: dict[str, Any] = {"metrics_url": url}
    if options.write_events is not None:
        lines, left_out = write_events(options.write_events, played)
        extra["events_file"] = str(options.write_events)
        extra["events_written"], extra["events_left_out"] = lines, left_out
    if options.record is not None:
        extra["record"] = str(options.record)
    if alertmanager is not None:
        extra["alertmanager"] = {"url": options.alertmanager, "delivered": alertmanager.delivered,
                                 "failures": alertmanager.failures, "pending": alertmanager.pending}
    summary = build_summary(engine, "demo", clock(), interrupted, **extra)
    if options.record is not None:
        engine.recording.summary = summary
        engine.recording.write(options.record)
    if options.as_json:
        out.write(json.dumps(summary, ensure_ascii=False, indent=2) + "\n")
    else:
        out.write("\n" + render_summary(summary))
    out.flush()
    return DemoResult(summary, engine, interrupted)

