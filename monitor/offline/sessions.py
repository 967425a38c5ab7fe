"""JSONL files of stream events (impressions and annotations, schema v1) evaluated offline.

Each impression session is one ranked list, in the order shown (position 1 first); model scores orient
PNR and AUC pairs. A session's labels are the query-level judgments of its query overlaid by the grades
given for that session. Of two grades for one document, the one with the later ``ts`` wins (a correction;
a re-sent old grade does not undo it); on a tie, or without ``ts``, the later line (the stream's rule:
docs/events.md, :func:`monitor.core.stream.held_grades.merge_grades`). The NDCG ideal
pool is the same set of labels. Sessions with no label at all are left out (as trec_eval leaves out
queries without qrels) and counted. Deploy events are accepted and ignored here.

Each line is read as ``monitor replay`` and the worker read it: routed by its top-level fields
(:func:`monitor.core.routing.route`; a line that is not an event at all is an :class:`InputError`,
``FILE:LINE: reason``), decoded by :func:`monitor.core.decoding.decode_event` and checked by the clock
rules (:func:`monitor.core.stream.admission.clock_error`, given a wall clock). An invalid event is the
worker's dead letter: left out and listed (:attr:`SessionFile.dead_letters`, with its file and line), so
the valid events give the same numbers with or without it. A UTF-8 byte-order mark at the start of a file
is skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from monitor.core.decoding import decode_event
from monitor.core.events import DEFAULT_LIMITS, Annotation, EventError, Impression, Limits
from monitor.core.grades import Grade, Scale, TrecScale
from monitor.core.judged import JudgedList
from monitor.core.routing import route
from monitor.core.stream.admission import clock_error
from monitor.core.stream.config import StreamConfig
from monitor.offline.errors import InputError


@dataclass
class SessionFile:
    """Impressions and labels read from one or more JSONL files."""

    impressions: dict[str, Impression] = field(default_factory=dict)
    session_labels: dict[str, dict[str, Grade]] = field(default_factory=dict)
    query_labels: dict[str, dict[str, Grade]] = field(default_factory=dict)
    unlabelled: int = 0
    stamps: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)  # the ts of each grade held
    stale: int = 0  # grades that lost to a held grade with a later ts
    dead_letters: list[DeadLetter] = field(default_factory=list)


@dataclass(frozen=True)
class DeadLetter:
    """An invalid event left out: where it is and the worker's error (code, field, reason)."""

    path: str
    line: int
    error: EventError

    def __str__(self) -> str:
        where = f"{self.error.field}: " if self.error.field else ""
        return f"{self.path}:{self.line}: {self.error.code}: {where}{self.error.reason}"


BOM = b"\xef\xbb\xbf"


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            raw = line.rstrip(b"\r\n")
            if number == 1 and raw.startswith(BOM):
                raw = raw[len(BOM):]
            if raw.strip():
                yield number, raw


def read_sessions(paths: list[Path], scale: Scale, limits: Limits = DEFAULT_LIMITS,
                  now: float | None = None) -> SessionFile:
    """The events of ``paths``; ``now``: the wall clock of the clock rules (None: not checked)."""
    out = SessionFile()
    first_seen: dict[str, str] = {}
    rules = StreamConfig()
    for path in paths:
        for number, raw in _lines(path):
            try:
                route(raw)
            except ValueError as error:
                raise InputError(str(path), number, str(error)) from None
            try:
                event = decode_event(raw, scale, limits)
                late = clock_error(event, now, rules)
                if late is not None:
                    raise late
            except EventError as error:
                out.dead_letters.append(DeadLetter(str(path), number, error))
                continue
            if isinstance(event, Impression):
                where = first_seen.get(event.session_id)
                if where is not None and out.impressions[event.session_id] != event:
                    raise InputError(str(path), number, f"session_id {event.session_id!r} already has a "
                                     f"different impression (at {where})")
                first_seen.setdefault(event.session_id, f"{path}:{number}")
                out.impressions[event.session_id] = event
            elif isinstance(event, Annotation):
                if event.session_id is not None:
                    target = out.session_labels.setdefault(event.session_id, {})
                    held = out.stamps.setdefault(("session", event.session_id), {})
                else:
                    target = out.query_labels.setdefault(event.query or "", {})
                    held = out.stamps.setdefault(("query", event.query or ""), {})
                for label in event.labels:
                    if event.ts is not None and held.get(label.doc_id, float("-inf")) > event.ts:
                        out.stale += 1
                        continue
                    target[label.doc_id] = label.grade
                    if event.ts is not None:
                        held[label.doc_id] = event.ts
    return out


def judged_sessions(data: SessionFile, scale: Scale) -> tuple[list[str], list[JudgedList], float]:
    """The labelled sessions as judged lists, ordered by session id, and the scale's top level."""
    chosen: list[tuple[str, Impression, dict[str, Grade]]] = []
    for session_id in sorted(data.impressions):
        impression = data.impressions[session_id]
        labels = dict(data.query_labels.get(impression.query, {}))
        labels.update(data.session_labels.get(session_id, {}))
        if labels:
            chosen.append((session_id, impression, labels))
        else:
            data.unlabelled += 1
    if isinstance(scale, TrecScale):
        top = max((g.level for _, _, labels in chosen for g in labels.values()), default=0)
        max_level = float(scale.max_level if scale.max_level is not None else max(top, 0))
    else:
        max_level = float(scale.max_level)
    lists = []
    for _, impression, labels in chosen:
        scores = [r.score for r in impression.results]
        known = None if any(s is None for s in scores) else [float(s or 0.0) for s in scores]
        lists.append(JudgedList.build([r.doc_id for r in impression.results], known, labels, max_level))
    return [c[0] for c in chosen], lists, max_level
