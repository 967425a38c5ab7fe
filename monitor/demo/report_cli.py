"""``monitor report RUN --out DIR``: an HTML page with PNG plots of a run recorded with --record.

RUN is the file that ``monitor demo --record`` or ``monitor replay --record`` wrote. DIR receives
index.html and the figures beside it: DCG@k and PNR per bucket over event time (control and canary, 95%
bands, deploy and alert markers), the canary comparison with its confidence sequence, label coverage.
The figures need matplotlib: pip install 'search-relevance-monitor[report]'.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from monitor.demo.recording import RecordingError, read_recording
from monitor.extras import missing_extra


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="monitor report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a run file written with --record")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for index.html and the PNG figures (created if needed)")
    parser.add_argument("--window", default="1h",
                        help="rolling window of the metric plots (default 1h; one the run recorded)")
    return parser


def _fail(message: str) -> int:
    sys.stderr.write(f"monitor report: error: {message}\n")
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if missing := missing_extra("matplotlib", "report", "monitor report"):
        return _fail(missing)
    try:
        recording = read_recording(args.run)
    except RecordingError as error:
        return _fail(str(error))
    if args.window not in recording.windows:
        return _fail(f"--window {args.window!r}: the run recorded {', '.join(recording.windows) or 'none'}")
    if not recording.points:
        return _fail(f"{args.run}: the run has no recorded point (no impression was seen)")
    from monitor.core.canary import CanaryConfig
    from monitor.demo.plots import write_figures
    from monitor.demo.report import render_html

    try:
        args.out.mkdir(parents=True, exist_ok=True)
        figures = write_figures(recording, args.out, args.window, CanaryConfig().min_relative_drop)
        page = args.out / "index.html"
        page.write_text(render_html(recording, figures, str(args.run), args.window), encoding="utf-8")
    except OSError as error:
        return _fail(f"cannot write to {args.out}: {error.strerror or error}")
    sys.stdout.write(f"{page}\n" + "".join(f"{path}\n" for path in figures.values()))
    return 0
