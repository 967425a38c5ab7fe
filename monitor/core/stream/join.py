"""The join state machine: one pure step per event.

An adapter loads what a step needs (:class:`Loaded`), calls :func:`step`, and commits the returned
:class:`Transition` atomically together with the Kafka offset it came from. The machine is confluent:
the final aggregates depend only on each session's impression and its final labels, not on how
impressions, labels and window closes interleave (a label after the close re-scores the session; an
expired session that reaches the coverage minimum becomes scored). That is what makes "killed at any
moment, restarted, same numbers" and "two workers, same numbers" hold.

Per event:

* impression: bucket (carried, or estimated from the sketch), sampling within the bucket's budget (or
  always, when its query has query-level judgments), then a pending session with an annotation request,
  or a scored one if early labels already cover its top k;
* session annotation: merged into the session (later grade wins); a complete pending session is scored;
  a scored one is re-scored; without a session yet, kept as early labels;
* query annotation: stored for future sessions of the query and fanned out (by the adapter) as session
  annotations to the sessions of that query still in the join;
* after each event, sessions whose deadline passed the partition's watermark (max impression time) are
  closed: scored if their coverage reaches the minimum, else expired.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from monitor.core.events import Annotation, Deploy, Event, Impression, Label
from monitor.core.grades import Scale, TrecScale
from monitor.core.judged import JudgedList
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.history import arm_of
from monitor.core.stream.session import SessionRecord, query_key
from monitor.core.stream.sketch import Cell, cell_field, classify, estimate, sketch_cells
from monitor.core.stream.stats import Stats, expired_stats, negated, session_stats
from monitor.core.stream.windows import slice_index, window_slices

Labels = dict[str, int]


@dataclass(frozen=True)
class AnnotationRequest:
    """Ask annotators to grade a session's top k (published to the requests topic)."""

    session_id: str
    query: str
    bucket: str
    ranker: str
    variant: str
    k: int
    docs: list[str]
    ts: float


@dataclass
class Loaded:
    """The state one step reads; ``due`` are pending sessions with deadline ≤ the new watermark."""

    watermark: float = -math.inf
    record: SessionRecord | None = None
    early_labels: Labels = field(default_factory=dict)
    query_labels: Labels = field(default_factory=dict)
    sketch: list[dict[str, float]] = field(default_factory=list)
    budget_used: dict[str, float] = field(default_factory=dict)  # bucket -> sampled this period
    due: list[SessionRecord] = field(default_factory=list)


@dataclass
class Transition:
    """Everything a step writes; committed atomically with the offset."""

    watermark: float
    records: list[SessionRecord] = field(default_factory=list)
    early_labels: dict[str, Labels] = field(default_factory=dict)
    drop_early_labels: list[str] = field(default_factory=list)
    deadlines: dict[str, float] = field(default_factory=dict)
    drop_deadlines: list[str] = field(default_factory=list)
    deltas: list[tuple[float, str, Stats]] = field(default_factory=list)  # (event ts, group, stats)
    counters: list[tuple[str, str, float]] = field(default_factory=list)  # (group or "", name, delta)
    sketch: list[tuple[int, str]] = field(default_factory=list)           # (slice, cell field) += 1
    budget: tuple[str, int] | None = None                                 # (bucket, period) += 1
    query_labels: tuple[str, Labels] | None = None                        # (query key, labels) merged
    pending_queries: list[tuple[str, str]] = field(default_factory=list)  # (query key, session id)
    requests: list[AnnotationRequest] = field(default_factory=list)
    deploys: list[Deploy] = field(default_factory=list)
    seen: tuple[str, str, float] | None = None                            # (arm, ranker, ts) of an impression


def max_level(scale: Scale) -> float:
    if isinstance(scale, TrecScale):
        return float(scale.max_level if scale.max_level is not None else 4)
    return float(scale.max_level)


def next_watermark(watermark: float, event: Event) -> float:
    return max(watermark, event.ts) if isinstance(event, Impression) else watermark


def fan_out_annotation(session_id: str, labels: Labels, scale: Scale) -> Annotation:
    """A query-level judgment restated as a session annotation for one session of the query."""
    grades = tuple(Label(doc, scale.parse(level)) for doc, level in sorted(labels.items()))
    return Annotation(grades, session_id=session_id, from_query=True)


def frequency_cells(query: str, config: StreamConfig) -> list[Cell]:
    return sketch_cells(query, config.sketch_width, config.sketch_depth)


def frequency_slices(ts: float, config: StreamConfig) -> range:
    width = config.frequency_window / config.frequency_slices
    return window_slices(ts, width, config.frequency_slices)


def budget_period(ts: float, config: StreamConfig) -> int:
    return slice_index(ts, config.budget_period)


def _judged(record: SessionRecord, scale: Scale) -> JudgedList:
    grades = {doc: scale.parse(level) for doc, level in record.effective().items()}
    return JudgedList.build(record.docs, record.scores, grades, max_level(scale))


def _score(record: SessionRecord, scale: Scale, now: float, out: Transition) -> None:
    """Move a session to ``scored`` (or re-score it), taking back its previous contribution."""
    new = session_stats(_judged(record, scale), record.k)
    _take_back(record, out)
    if record.status != "scored":
        out.counters.append((record.group, "scored", 1.0))
    record.scored_at = now if record.scored_at is None else record.scored_at
    new["join_lag"] = max(record.scored_at - record.ts, 0.0)
    record.status, record.contribution = "scored", new
    out.deltas.append((record.ts, record.group, new))


def _expire(record: SessionRecord, out: Transition) -> None:
    new = expired_stats(record.coverage())
    _take_back(record, out)
    if record.status != "expired":
        out.counters.append((record.group, "expired", 1.0))
    record.status, record.contribution = "expired", new
    out.deltas.append((record.ts, record.group, new))


def _take_back(record: SessionRecord, out: Transition) -> None:
    if record.contribution is not None:
        out.deltas.append((record.ts, record.group, negated(record.contribution)))
        out.counters.append((record.group, "rescored", 1.0))


def _on_impression(event: Impression, loaded: Loaded, config: StreamConfig, scale: Scale,
                   partitions: int, out: Transition) -> None:
    if loaded.record is not None:
        out.counters.append(("", "duplicate_impressions", 1.0))
        return
    cells = frequency_cells(event.query, config)
    bucket = event.query_bucket or classify(estimate(cells, loaded.sketch) * partitions,
                                            config.head_min_frequency, config.torso_min_frequency)
    current = slice_index(event.ts, config.frequency_window / config.frequency_slices)
    out.sketch = [(current, cell_field(cell)) for cell in cells]
    variant = event.variant or "control"
    group = f"{bucket}|{event.ranker}|{variant}"
    out.seen = (arm_of(variant), event.ranker, event.ts)
    out.counters.append((group, "impressions", 1.0))
    share = config.budget[bucket] / partitions
    sampled = bool(loaded.query_labels) or loaded.budget_used.get(bucket, 0.0) < share
    if not sampled:
        out.drop_early_labels.append(event.session_id)
        return
    if not loaded.query_labels:
        out.budget = (bucket, budget_period(event.ts, config))
    k = config.k[bucket]
    top = event.results[:k]
    scores = [r.score for r in top]
    record = SessionRecord(
        session_id=event.session_id, query_key=query_key(event.query), bucket=bucket, ranker=event.ranker,
        variant=variant, ts=event.ts, k=k, docs=[r.doc_id for r in top],
        scores=None if any(s is None for s in scores) else [float(s or 0.0) for s in scores],
        deadline=event.ts + config.join_window, labels=dict(loaded.early_labels),
        query_labels=dict(loaded.query_labels))
    out.counters.append((group, "sampled", 1.0))
    if loaded.early_labels:
        out.drop_early_labels.append(event.session_id)
    # every sampled session follows its query's judgments, so a later query-level correction reaches it
    out.pending_queries.append((record.query_key, record.session_id))
    if record.complete():
        _score(record, scale, out.watermark, out)
    else:
        out.deadlines[record.session_id] = record.deadline
        out.requests.append(AnnotationRequest(event.session_id, event.query, bucket, event.ranker, variant,
                                              k, record.docs, event.ts))
    out.records.append(record)


def _on_session_labels(event: Annotation, loaded: Loaded, scale: Scale, config: StreamConfig,
                       out: Transition) -> None:
    session_id = event.session_id or ""
    labels = {label.doc_id: label.grade.level for label in event.labels}
    record = loaded.record
    if record is None:
        if event.from_query:  # the impression, when it comes, reads the query's judgments itself
            out.counters.append(("", "query_labels_before_session", float(len(labels))))
            return
        out.early_labels[session_id] = {**loaded.early_labels, **labels}
        out.counters.append(("", "early_labels", float(len(labels))))
        return
    before = record.effective()
    stored = record.query_labels if event.from_query else record.labels
    merged = {**stored, **labels}
    if merged == stored:
        out.counters.append((record.group, "unchanged_labels", float(len(labels))))
        return
    if event.from_query:
        record.query_labels = merged
    else:
        record.labels = merged
    after = record.effective()
    if after == before:  # a query's grade under the session's own: kept, changes nothing now
        out.counters.append((record.group, "unchanged_labels", float(len(labels))))
        out.records.append(record)
        return
    corrected = sum(1 for d in labels if d in before and after[d] != before[d])
    if corrected:
        out.counters.append((record.group, "corrections", float(corrected)))
    if record.status == "scored" or (record.status == "pending" and record.complete()):
        _score(record, scale, out.watermark, out)
        out.drop_deadlines.append(session_id)
    elif record.status == "expired":
        if record.coverage() >= config.min_coverage:
            _score(record, scale, out.watermark, out)
        else:
            _expire(record, out)
    out.records.append(record)


def _close_due(loaded: Loaded, config: StreamConfig, scale: Scale, out: Transition,
               horizon: float | None = None) -> None:
    touched = {r.session_id for r in out.records}
    limit = out.watermark if horizon is None else horizon
    for record in loaded.due[:config.max_closes_per_step]:
        if record.session_id in touched or record.status != "pending" or record.deadline > limit:
            continue
        if record.coverage() >= config.min_coverage:
            _score(record, scale, out.watermark, out)
        else:
            _expire(record, out)
        out.drop_deadlines.append(record.session_id)
        out.records.append(record)


def step(event: Event, loaded: Loaded, config: StreamConfig, scale: Scale, partitions: int = 1) -> Transition:
    """The transition one event causes, given the state it reads."""
    if partitions < 1:
        raise ValueError(f"partitions must be ≥ 1, got {partitions}")
    out = Transition(watermark=next_watermark(loaded.watermark, event))
    if isinstance(event, Impression):
        _on_impression(event, loaded, config, scale, partitions, out)
    elif isinstance(event, Annotation):
        if event.session_id is not None:
            _on_session_labels(event, loaded, scale, config, out)
        else:
            labels = {label.doc_id: label.grade.level for label in event.labels}
            out.query_labels = (query_key(event.query or ""), labels)
            out.counters.append(("", "query_labels", float(len(labels))))
    else:
        out.deploys.append(event)
        out.counters.append(("", "deploys", 1.0))
    _close_due(loaded, config, scale, out)
    return out


def close_step(loaded: Loaded, watermark: float, config: StreamConfig, scale: Scale) -> Transition:
    """Close sessions due by ``watermark`` without an event: an idle partition whose watermark an adapter
    advanced, or the end of a replay (``watermark=inf`` closes everything, leaving the watermark as is)."""
    out = Transition(watermark=max(loaded.watermark, watermark) if math.isfinite(watermark)
                     else loaded.watermark)
    _close_due(loaded, config, scale, out, horizon=watermark)
    return out
