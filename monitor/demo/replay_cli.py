"""``monitor replay FILE``: a JSONL file of stream events through the demo's engine, ending with its summary.

Each line is one event value as a producer sends it (what ``monitor demo --write-events`` and
``monitor.sim.write_jsonl`` write; the topic follows from the event's "type", see docs/demo.md). A line
that is not an event at all (not one JSON object, no known "type") stops the replay with FILE:LINE and
the reason (exit status 2); an invalid event becomes the worker's dead letter, counted by reason, and the
summary names the first few as FILE:LINE: code: reason (``--dead-letters FILE`` writes every one, as
JSON lines with the file and line). Sessions still waiting for labels
at the end of the file are closed (scored if covered enough, else expired).

``--config FILE`` reads the worker's TOML settings file (docs/worker.md): its ``[stream]`` settings (k,
windows, budget, …), grade scale, canary settings and ranker cap (environment variables are not read).
``--partitions N`` routes each event to one of N in-process partitions by its key (``session_id``, else
``query``, else ``ranker``) with Kafka's partitioner, as the worker's topics do; each partition keeps its
own join state, sketch and share of the budget (default 1). The events in the order they were produced
(``monitor produce --write-events``), replayed with the worker's settings and N its topics' partition
count, give the worker's numbers, with a budget that binds too (in sessions, the default; docs/worker.md):
every gauge, and every counter but those that record how the topics interleaved (docs/metrics.md). With
another N, once the budget binds, other sessions are sampled.

``--port`` serves ``/metrics`` on 127.0.0.1 during the replay and, after the summary, until Ctrl-C (or
for ``--hold`` seconds).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from monitor.core.grades import FOUR_LEVEL_SCALE, Scale
from monitor.core.stream.config import StreamConfig
from monitor.demo.cli import add_budget_options
from monitor.demo.dead_letters import DeadLetterLog
from monitor.demo.engine import Engine
from monitor.demo.events_file import LineError, read_events
from monitor.demo.interrupt import stop_on_sigint
from monitor.demo.settings import stream_config
from monitor.demo.summary import build_summary, render_summary
from monitor.demo.verdict_rows import AlertNote, Judge
from monitor.demo.view import alert_line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="monitor replay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", type=Path, help="JSONL file of events, one event value per line")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--record", type=Path, metavar="FILE",
                        help="write the run's time series (input of monitor report)")
    add_budget_options(parser)
    parser.add_argument("--dead-letters", type=Path, metavar="FILE",
                        help="write every dead letter to FILE as a JSON line: the worker's error and source "
                             "fields, the file and line, and the line itself")
    parser.add_argument("--partitions", type=_partitions, default=1, metavar="N",
                        help="in-process partitions, events routed by key as Kafka does: the worker's "
                             "topics' partition count gives the worker's numbers (default 1)")
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="the worker's TOML settings file: [stream] settings, scale, canary settings "
                             "(instead of --budget/--budget-unit)")
    parser.add_argument("--port", type=int, metavar="PORT",
                        help="serve /metrics on 127.0.0.1 at this port (0 picks a free one) during the "
                             "replay and after it, until Ctrl-C")
    parser.add_argument("--hold", type=float, metavar="SECONDS",
                        help="with --port: keep serving this long after the summary (default: until Ctrl-C)")
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


def _partitions(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"a whole number from 1 to 10000, got {text!r}")
    return value


def replay(path: Path, judge: Judge, err: TextIO, progress: bool | None = None,
           config: StreamConfig | None = None, scale: Scale = FOUR_LEVEL_SCALE,
           on_engine: Callable[[Engine], None] | None = None, dead_letters: DeadLetterLog | None = None,
           partitions: int = 1) -> tuple[Engine, bool, float]:
    """Feed the file through a fresh engine of ``partitions`` partitions (``config``: the stream's settings,
    by default the demo's; ``on_engine`` sees it before the first event); returns it, whether Ctrl-C
    stopped it, and the wall seconds; ``dead_letters`` gets each dead letter with its line. Raises
    :class:`LineError` at the first line that is not a routable event."""
    config = config or stream_config()
    engine = Engine(judge, config, {"command": "replay", "file": str(path), "budget": dict(config.budget),
                                    "budget_unit": config.budget_unit, "partitions": partitions},
                    scale=scale, partitions=partitions)
    if on_engine is not None:
        on_engine(engine)
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
                pipeline = engine.pipeline
                for line in read_events(path):
                    before = pipeline.dead_lettered
                    alerts(engine.feed(line.topic, line.key, line.value, time.monotonic() - started))
                    if dead_letters is not None and pipeline.dead_lettered > before:
                        dead_letters.add(line.number, pipeline.dead_letters[-1])
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


def _settings(args: argparse.Namespace) -> tuple[StreamConfig, Judge, Scale, tuple[int, int]]:
    """The stream's settings, the canary judge, the grade scale and the label caps of this replay: the
    worker's settings file with ``--config``, else the demo's with ``--budget``/``--budget-unit``."""
    from monitor.demo.verdict_rows import CanaryJudge, make_judge

    if args.config is None:
        return stream_config(args.budget, args.budget_unit), make_judge(), FOUR_LEVEL_SCALE, (10, 5)
    if args.budget is not None or args.budget_unit != "sessions":
        raise ValueError("--config: give the budget in the settings file's [stream] table, not with --budget")
    from monitor.worker.settings import SettingsError, load_settings

    try:
        settings = load_settings({}, args.config)
    except SettingsError as error:
        raise ValueError(f"--config: {error}") from None
    judge = CanaryJudge(settings.canary(), settings.alerts())
    return settings.stream, judge, settings.grade_scale(), (settings.max_rankers, settings.max_variants)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from monitor.demo.server import MetricsServer
    from monitor.demo.verdict_rows import collectors

    if args.record is not None and not args.record.resolve().parent.is_dir():
        sys.stderr.write(f"monitor replay: error: --record: the folder of {args.record} does not exist\n")
        return 2
    if args.hold is not None and (args.port is None or not args.hold >= 0):
        sys.stderr.write("monitor replay: error: --hold: needs --port and a number of seconds ≥ 0\n")
        return 2
    try:
        config, judge, scale, caps = _settings(args)
    except ValueError as error:
        message = str(error) if str(error).startswith("--") else f"--budget: {error}"
        sys.stderr.write(f"monitor replay: error: {message}\n")
        return 2
    servers: list[MetricsServer] = []

    def serve(engine: Engine) -> None:
        if args.port is not None:
            servers.append(MetricsServer(collectors(engine, *caps), args.port))
            sys.stderr.write(f"metrics url: {servers[0].url}\n")
            sys.stderr.flush()

    try:
        out = args.dead_letters.open("w", encoding="utf-8") if args.dead_letters is not None else None
    except OSError as error:
        sys.stderr.write(f"monitor replay: error: --dead-letters: cannot write {args.dead_letters}: "
                         f"{error.strerror or error}\n")
        return 2
    log = DeadLetterLog(str(args.file), out)
    try:
        try:
            engine, interrupted, wall = replay(args.file, judge, sys.stderr, config=config, scale=scale,
                                               on_engine=serve, dead_letters=log, partitions=args.partitions)
        except LineError as error:
            sys.stderr.write(f"monitor replay: error: {error}\n")
            return 2
        except OSError as error:  # the port is taken
            sys.stderr.write(f"monitor replay: error: --port {args.port}: {error.strerror or error}\n")
            return 1
        finally:
            if out is not None:
                out.close()
        extra: dict[str, object] = {"record": str(args.record)} if args.record else {}
        extra["dead_letter_lines"] = log.first
        if args.dead_letters is not None:
            extra["dead_letters_file"] = str(args.dead_letters)
        if servers:
            extra["metrics_url"] = servers[0].url
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
        sys.stdout.flush()
        if servers and not interrupted:
            hold = "until Ctrl-C" if args.hold is None else f"for {args.hold:g} s"
            sys.stderr.write(f"serving {servers[0].url} {hold}\n")
            sys.stderr.flush()
            _hold(args.hold)
        return 0
    finally:
        for server in servers:
            server.close()


def _hold(seconds: float | None) -> None:
    """Wait ``seconds`` (None: until Ctrl-C), returning early on Ctrl-C."""
    deadline = None if seconds is None else time.monotonic() + seconds
    with stop_on_sigint() as stop:
        try:
            while not stop.stopped and (deadline is None or time.monotonic() < deadline):
                time.sleep(0.1 if deadline is None else max(0.0, min(0.1, deadline - time.monotonic())))
        except KeyboardInterrupt:
            pass
