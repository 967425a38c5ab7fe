"""``monitor replay FILE``: a JSONL file of stream events through the demo's engine, ending with its summary.

Each line is one event value as a producer sends it (what ``monitor demo --write-events`` and
``monitor.sim.write_jsonl`` write; the topic follows from the event's "type", see docs/demo.md). A line
that is not a routable event stops the replay with FILE:LINE and the reason (exit status 2); an invalid
event payload becomes a dead letter counted by reason, as in the worker. Sessions still waiting for labels
at the end of the file are closed (scored if covered enough, else expired).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from monitor.core.stream.config import StreamConfig
from monitor.demo.canary import AlertNote, Judge
from monitor.demo.cli import add_budget_options
from monitor.demo.engine import Engine
from monitor.demo.events_file import LineError, read_events
from monitor.demo.interrupt import stop_on_sigint
from monitor.demo.settings import stream_config
from monitor.demo.summary import build_summary, render_summary
from monitor.demo.view import alert_line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="monitor replay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", type=Path, help="JSONL file of events, one event value per line")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--record", type=Path, metavar="FILE",
                        help="write the run's time series (input of monitor report)")
    add_budget_options(parser)
    return parser


class ProgressBar:
    """Bytes read of the file, on ``stream`` when it is a terminal."""

    def __init__(self, total: int, stream: TextIO, enabled: bool | None = None) -> None:
        self.total, self.stream = max(total, 1), stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self.started = time.monotonic()
        self._last = -1.0

    def update(self, done: int, events: int, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self._last < 0.1):
            return
        self._last = now
        width, share = 30, min(done / self.total, 1.0)
        filled = round(width * share)
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {100 * share:5.1f}%  "
                          f"{events:,} events  {now - self.started:6.1f} s")
        self.stream.flush()

    def clear(self) -> None:
        if self.enabled:
            self.stream.write(f"\r{' ' * 78}\r")
            self.stream.flush()


def replay(path: Path, judge: Judge, err: TextIO, progress: bool | None = None,
           config: StreamConfig | None = None) -> tuple[Engine, bool, float]:
    """Feed the file through a fresh engine (``config``: the stream's settings, by default the demo's);
    returns it, whether Ctrl-C stopped it, and the wall seconds. Raises :class:`LineError` at the first
    line that is not a routable event."""
    config = config or stream_config()
    engine = Engine(judge, config, {"command": "replay", "file": str(path), "budget": dict(config.budget),
                                    "budget_unit": config.budget_unit})
    try:
        size = path.stat().st_size
    except OSError as error:
        raise LineError(str(path), 0, f"cannot read: {error.strerror or error}") from error
    bar = ProgressBar(size, err, progress)
    started = time.monotonic()

    def alerts(notes: list[AlertNote]) -> None:
        for note in notes:
            if not note.update:
                bar.clear()
                err.write(alert_line(note) + "\n")

    try:
        with stop_on_sigint() as stop:
            try:
                for line in read_events(path):
                    alerts(engine.feed(line.topic, line.key, line.value, time.monotonic() - started))
                    bar.update(line.end, engine.events)
                    if stop.stopped:
                        break
                bar.update(size, engine.events, force=True)
            except KeyboardInterrupt:
                stop.stopped = True
            interrupted = stop.stopped
            alerts(engine.finish(time.monotonic() - started, flush=not interrupted))
    finally:
        bar.clear()
    return engine, interrupted, time.monotonic() - started


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from monitor.demo.canary import make_judge

    if args.record is not None and not args.record.resolve().parent.is_dir():
        sys.stderr.write(f"monitor replay: error: --record: the folder of {args.record} does not exist\n")
        return 2
    try:
        config = stream_config(args.budget, args.budget_unit)
    except ValueError as error:
        sys.stderr.write(f"monitor replay: error: --budget: {error}\n")
        return 2
    try:
        engine, interrupted, wall = replay(args.file, make_judge(), sys.stderr, config=config)
    except LineError as error:
        sys.stderr.write(f"monitor replay: error: {error}\n")
        return 2
    extra = {"record": str(args.record)} if args.record else {}
    summary = build_summary(engine, "replay", wall, interrupted, events_file=str(args.file), **extra)
    if args.record is not None:
        engine.recording.summary = summary
        try:
            engine.recording.write(args.record)
        except OSError as error:
            sys.stderr.write(f"monitor replay: error: cannot write {args.record}: {error.strerror}\n")
            return 1
    if args.json:
        sys.stdout.write(json.dumps(summary, ensure_ascii=False, indent=2) + "\n")
    else:
        sys.stdout.write(render_summary(summary))
    return 0
