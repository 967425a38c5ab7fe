"""A run's time series: what ``--record FILE`` writes and ``monitor report`` reads.

One JSON document::

    {"format": "search-relevance-monitor/run", "version": 1,
     "source": {"command": "demo", "seed": 1, ...},          # what produced the run
     "k": {"head": 40, "torso": 20, "tail": 20}, "windows": {"15m": 900.0, "1h": 3600.0, "24h": 86400.0},
     "points": [{"ts": 1763712120.4, "wall": 0.11,            # watermark (event time, Unix s), wall offset
                 "windows": {"1h": {"tail|ranker-a|control": {"sessions": 12.0, "dcg": 30.1, ...}}},
                 "verdicts": [{"bucket": "tail", "metric": "dcg", "verdict": "inconclusive", ...}]}],
     "deploys": [{"kind": "canary_start", "ranker": "ranker-b", "previous": "ranker-a", "share": 0.5,
                  "ts": ...}],                                # "share" only when declared
     "alerts": [{"status": "firing", "alertname": ..., "ts": ..., "wall": ..., ...}],
     "summary": {...}}                                        # the run's summary (``--json``)

Points are taken on an event-time grid (every ``SAMPLE_EVERY`` seconds of watermark), so the same
stream gives the same points whether it was played paced, fast or from a file; only ``wall`` differs.
Window statistics are the raw mergeable sums (:mod:`monitor.core.stream.stats`), so a reader derives
means, intervals, PNR and coverage with the same :func:`~monitor.core.stream.stats.summarise`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from monitor.core.errors import MonitorError
from monitor.core.stream.stats import Stats

FORMAT = "search-relevance-monitor/run"
VERSION = 1


class RecordingError(MonitorError):
    """A run file that cannot be read (names the file and what is wrong)."""


@dataclass
class Point:
    ts: float
    wall: float
    windows: dict[str, dict[str, Stats]]
    verdicts: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"ts": self.ts, "wall": round(self.wall, 3), "windows": self.windows,
                "verdicts": self.verdicts}


@dataclass
class Recording:
    source: dict[str, Any]
    k: dict[str, int]
    windows: dict[str, float]
    points: list[Point] = field(default_factory=list)
    deploys: list[dict[str, Any]] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "source": self.source, "k": self.k,
                "windows": self.windows, "points": [p.to_json() for p in self.points],
                "deploys": self.deploys, "alerts": self.alerts, "summary": self.summary}

    def write(self, path: str | Path) -> None:
        text = json.dumps(finite(self.to_json()), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        Path(path).write_text(text + "\n", encoding="utf-8")


def iso(ts: float | None) -> str | None:
    """Unix seconds as ISO-8601 UTC (``2025-11-21T08:00:00Z``); None stays None."""
    if ts is None or not math.isfinite(ts):
        return None
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (JSON has no NaN or Infinity)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def _need(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise RecordingError(f"{where}: missing {key!r}")
    if not isinstance(obj[key], kind):
        raise RecordingError(f"{where}: {key!r} has the wrong type ({type(obj[key]).__name__})")
    return obj[key]


def read_recording(path: str | Path) -> Recording:
    """Load a run file; a missing, truncated or foreign file raises :class:`RecordingError` naming it."""
    name = str(path)
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise RecordingError(f"{name}: cannot read: {error.strerror or error}") from error
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RecordingError(f"{name}: not a run file (invalid JSON: {error})") from error
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise RecordingError(f"{name}: not a run file (expected \"format\": \"{FORMAT}\"; write one with "
                             "monitor demo --record FILE or monitor replay --record FILE)")
    if obj.get("version") != VERSION:
        raise RecordingError(f"{name}: run file version {obj.get('version')!r}, this monitor reads {VERSION}")
    points = []
    for i, p in enumerate(_need(obj, "points", list, name)):
        where = f"{name}: points[{i}]"
        if not isinstance(p, dict):
            raise RecordingError(f"{where}: expected an object")
        ts, wall = _need(p, "ts", (int, float), where), _need(p, "wall", (int, float), where)
        points.append(Point(float(ts), float(wall), _need(p, "windows", dict, where),
                            list(p.get("verdicts") or [])))
    return Recording(source=_need(obj, "source", dict, name), k=_need(obj, "k", dict, name),
                     windows=_need(obj, "windows", dict, name), points=points,
                     deploys=_need(obj, "deploys", list, name), alerts=_need(obj, "alerts", list, name),
                     summary=obj.get("summary"))
