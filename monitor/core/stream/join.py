"""The join state machine: one pure step per event.

An adapter loads what a step needs (:class:`Loaded`), calls :func:`step`, and commits the returned
:class:`Transition` atomically together with the Kafka offset it came from. The machine is confluent:
the final aggregates depend only on each session's impression and its final labels, not on how
impressions, labels and window closes interleave (a label after the close re-scores the session; an
expired session that reaches the coverage minimum becomes scored). That is what makes "killed at any
moment, restarted, same numbers" and "two workers, same numbers" hold.

Per event:

* impression: bucket (carried, or estimated from the sketch), sampling within the bucket's budget (in
  sessions, or in judgments: see :func:`~monitor.core.stream.sampling.sampled`), then a pending session
  with an annotation request for the top-k documents not judged yet, or a scored one if early or
  query-level labels already cover its top k; with shadow lists, the session keeps their top k, its
  request asks for the ungraded documents of the union of the served and shadow top k, it is complete
  (scored before its close) only once that union is graded, so the served and the shadow lists are scored
  together from the same grades, and each scoring of the served list adds the paired contributions of the
  shadow lists that reach the coverage minimum (:mod:`~monitor.core.stream.shadow`); the epoch of a
  sampled session counts it (``sampled``), so the canary knows which epochs still have open sessions; an
  impression of a variant or ranker the settings do not declare (:func:`undeclared`) is only counted,
  under ``other``, never sampled (or, by configuration, a dead letter before the step:
  :func:`~monitor.core.stream.admission.undeclared_error`);
* session annotation: merged into the session (:func:`merge_grades`: the grade with the latest ``ts``
  wins, ties and grades without ``ts`` by delivery; a grade that loses is counted ``stale_labels`` and
  changes nothing; the first grade of a requested document counts as a judgment received); a complete
  pending session is scored; a scored one is re-scored; without a session yet, kept as early labels
  (with their ``ts``, under the same rule);
* query annotation: merged into the query's judgments by the adapter (:func:`merge_grades` again), which
  fans out the grades that won (with their ``ts``) as session annotations to the sessions of that query
  still in the join;
* shared grades (``StreamConfig.share_session_grades``, on by default): a sampled session's own grades
  are also its query's, written to the query's shared grades (per document and grading session); a new
  session of the query starts with them, and a change of what they take (:func:`shared_grades`: the first
  grading session's grade, independent of arrival order) reaches the query's sessions still in the join
  as a ``scope: "shared"`` refresh, on which a session takes the query's shared grades again from the
  state;
* after each event, sessions whose deadline passed the partition's watermark (max impression time) are
  closed: scored if their coverage reaches the minimum, else expired.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from monitor.core.events import Annotation, Event, Impression
from monitor.core.grades import Scale, TrecScale
from monitor.core.judged import JudgedList
from monitor.core.stream.admission import ranker_regex, undeclared
from monitor.core.stream.config import OTHER, StreamConfig
from monitor.core.stream.counters import Counter
from monitor.core.stream.counters import undeclared as undeclared_counter
from monitor.core.stream.held_grades import Labels, merge_grades, shared_grades
from monitor.core.stream.lean import counted_impression
from monitor.core.stream.sampling import budget_period, sampled
from monitor.core.stream.session import SessionRecord, query_key
from monitor.core.stream.shadow import keep_shadow, score_paired, take_back_paired
from monitor.core.stream.sketch import Cell, classify, estimate, sketch_cells
from monitor.core.stream.stats import Stats, expired_stats, session_stats
from monitor.core.stream.transition import AnnotationRequest, Delta, Loaded, Transition, shown_documents
from monitor.core.stream.windows import window_slices


def max_level(scale: Scale) -> float:
    if isinstance(scale, TrecScale):
        return float(scale.max_level if scale.max_level is not None else 4)
    return float(scale.max_level)


def next_watermark(watermark: float, event: Event) -> float:
    return max(watermark, event.ts) if isinstance(event, Impression) else watermark


def frequency_cells(query: str, config: StreamConfig) -> tuple[Cell, ...]:
    return sketch_cells(query, config.sketch_width, config.sketch_depth)


def frequency_slices(ts: float, config: StreamConfig) -> range:
    width = config.frequency_window / config.frequency_slices
    return window_slices(ts, width, config.frequency_slices)


def _judged(record: SessionRecord, scale: Scale) -> JudgedList:
    return _list(record, record.docs, record.scores, scale)


def _list(record: SessionRecord, docs: list[str], scores: list[float] | None, scale: Scale) -> JudgedList:
    """A list of the session (its served top k, or a shadow list's) joined with the session's grades (all of
    them: the ideal of nDCG is every graded document of the query; each distinct level parsed once)."""
    levels = record.effective()
    table = {level: scale.parse(level) for level in set(levels.values())}
    grades = {doc: table[level] for doc, level in levels.items()}
    return JudgedList.build(docs, scores, grades, max_level(scale))


def _score(record: SessionRecord, scale: Scale, config: StreamConfig, now: float, out: Transition) -> None:
    """Move a session to ``scored`` (or re-score it), taking back its previous contribution; then its
    shadow lists' paired contributions (:func:`~monitor.core.stream.shadow.score_paired`)."""
    new = session_stats(_judged(record, scale), record.k)
    _take_back(record, out)
    if record.status != "scored":
        out.counters.append((Counter("scored", record.group), 1.0))
    record.scored_at = now if record.scored_at is None else record.scored_at
    new["join_lag"] = max(record.scored_at - record.ts, 0.0)
    record.status, record.contribution = "scored", new
    out.deltas.append(Delta(record.ts, record.group, new))
    _query_delta(record, new, False, out)
    if record.shadow_docs:
        score_paired(record, new, lambda docs, scores: _list(record, docs, scores, scale),
                     config.min_coverage, out)


def _expire(record: SessionRecord, out: Transition) -> None:
    new = expired_stats(record.coverage())
    _take_back(record, out)
    if record.status != "expired":
        out.counters.append((Counter("expired", record.group), 1.0))
    record.status, record.contribution = "expired", new
    out.deltas.append(Delta(record.ts, record.group, new))
    take_back_paired(record, out)  # a pair needs the served list scored


def _take_back(record: SessionRecord, out: Transition) -> None:
    """Take back the session's previous contribution, explicitly (``Delta.take_back``)."""
    if record.contribution is not None:
        old = Stats(record.contribution)
        out.deltas.append(Delta(record.ts, record.group, old, take_back=True))
        out.counters.append((Counter("rescored", record.group), 1.0))
        _query_delta(record, old, True, out)


def _query_delta(record: SessionRecord, contribution: Mapping[str, float], take_back: bool,
                 out: Transition) -> None:
    """A scored session's DCG in its query's history (``History.queries``: the canary's adjustment for
    query difficulty), added or taken back; an expired session has none."""
    if contribution.get("sessions", 0.0) > 0:
        dcg = Stats({"n": 1.0, "x": contribution["dcg"], "xx": contribution["dcg_sq"]})
        out.query_deltas.append(Delta(record.ts, f"{record.group}|{record.query_key}", dcg, take_back))


def _on_undeclared(event: Impression, reason: str, loaded: Loaded, config: StreamConfig, partitions: int,
                   out: Transition) -> None:
    """An impression of an undeclared variant or ranker (``undeclared = "other"``): counted in the
    impressions of its group with the undeclared part(s) as ``other`` (a bounded set of label values)
    and in ``undeclared`` with the label ``<reason>``; nothing else. It is not sampled (no budget, no
    request, no session state), does not count in the query-frequency sketch (so it moves no query
    between buckets, which would change how real traffic is sampled) and is not seen by the canary
    history."""
    bucket = event.query_bucket or classify(estimate(frequency_cells(event.query, config), loaded.sketch)
                                            * partitions, config.head_min_frequency,
                                            config.torso_min_frequency)
    pattern = config.ranker_pattern
    ranker = event.ranker if pattern is None or ranker_regex(pattern).fullmatch(event.ranker) else OTHER
    variant = event.variant or "control"
    if config.variants and variant not in config.variants:
        variant = OTHER
    out.counters.append((Counter("impressions", f"{bucket}|{ranker}|{variant}"), 1.0))
    out.counters.append((undeclared_counter(reason), 1.0))
    if loaded.early_labels:  # its labels, if any came first, wait for nothing now
        out.drop_early_labels.append(event.session_id)


def _on_impression(event: Impression, loaded: Loaded, config: StreamConfig, scale: Scale,
                   partitions: int, out: Transition) -> None:
    if loaded.record is not None:
        out.counters.append((Counter("duplicate_impressions"), 1.0))
        return
    found = undeclared(event, config)
    if found is not None:
        _on_undeclared(event, found[0], loaded, config, partitions, out)
        return
    counted = counted_impression(event, loaded.sketch, config, partitions)
    bucket, variant, group = counted.bucket, counted.variant, counted.group
    out.sketch = [(counted.slice, name) for name in counted.fields]
    out.seen = counted.seen
    out.impression = (event.ts, group)
    out.counters.append((Counter("impressions", group), 1.0))
    if not sampled(bucket, event.ts, loaded, config, partitions):
        if loaded.early_labels:  # (only these: most impressions have none, and a drop is a write)
            out.drop_early_labels.append(event.session_id)
        return
    k = config.k[bucket]
    top = event.results[:k]
    scores = [r.score for r in top]
    record = SessionRecord(
        session_id=event.session_id, query_key=query_key(event.query), bucket=bucket, ranker=event.ranker,
        variant=variant, ts=event.ts, k=k, docs=[r.doc_id for r in top],
        scores=None if any(s is None for s in scores) else [float(s or 0.0) for s in scores],
        deadline=event.ts + config.join_window, labels=dict(loaded.early_labels),
        query_labels=dict(loaded.query_labels), label_ts=dict(loaded.early_stamps),
        query_label_ts=dict(loaded.query_stamps))
    keep_shadow(record, event, k)
    if config.share_session_grades:
        record.shared = shared_grades(loaded.shared, record.session_id)
        if record.labels:  # its early labels are its query's grades too
            out.shared = (record.query_key, record.session_id, record.ts, dict(record.labels))
    missing = record.missing_union()  # the union of the served and shadow top k: each document once
    union = record.union()
    if missing:
        wanted = set(missing)
        record.requested = sum(1 << i for i, doc in enumerate(union) if doc in wanted)
        out.counters.append((Counter("judgments_requested", group), float(len(missing))))
    if config.budget_unit == "sessions":
        out.budget = (bucket, budget_period(event.ts, config), 1.0)
    elif missing:  # its cost: the documents asked for
        out.budget = (bucket, budget_period(event.ts, config), float(len(missing)))
    out.counters.append((Counter("sampled", group), 1.0))
    out.sampled = True
    out.counters.append((Counter("judgments_top_k", group), float(len(union))))  # what asking all costs
    if loaded.early_labels:
        out.drop_early_labels.append(event.session_id)
    # every sampled session follows its query's judgments, so a later query-level correction reaches it
    out.pending_queries.append((record.query_key, record.session_id))
    if record.complete():  # its top k (with shadow lists: their union) fully judged already: scored at once
        _score(record, scale, config, out.watermark, out)
    else:
        out.deadlines[record.session_id] = record.deadline
    if missing:
        out.requests.append(AnnotationRequest(
            session_id=event.session_id, query=event.query, bucket=bucket, ranker=event.ranker,
            variant=variant, k=k, docs=missing, judged=len(union) - len(missing), ts=event.ts,
            documents=shown_documents(event, wanted)))
    out.records.append(record)


def _on_shared_refresh(event: Annotation, loaded: Loaded, scale: Scale, config: StreamConfig,
                       out: Transition) -> None:
    record = loaded.record
    if record is None:  # gone from the join (or never sampled): nothing to refresh
        out.counters.append((Counter("shared_before_session"), 1.0))
        return
    shared = shared_grades(loaded.shared, record.session_id) if config.share_session_grades else {}
    if shared == record.shared:
        out.counters.append((Counter("unchanged_labels", record.group), float(len(event.labels))))
        return
    before = record.effective()
    touched = set(shared) | set(record.shared)
    record.shared = shared
    _relabelled(record, before, touched, scale, config, out)


def _on_session_labels(event: Annotation, loaded: Loaded, scale: Scale, config: StreamConfig,
                       out: Transition) -> None:
    if event.from_shared:
        _on_shared_refresh(event, loaded, scale, config, out)
        return
    session_id = event.session_id or ""
    labels = {label.doc_id: label.grade.level for label in event.labels}
    record = loaded.record
    if record is None:
        if event.from_query:  # the impression, when it comes, reads the query's judgments itself
            out.counters.append((Counter("query_labels_before_session"), float(len(labels))))
            return
        merged, stamps, won, stale = merge_grades(loaded.early_labels, loaded.early_stamps, labels, event.ts)
        if stale:
            out.counters.append((Counter("stale_labels"), float(stale)))
        out.early_labels[session_id] = merged
        out.early_stamps[session_id] = stamps
        out.counters.append((Counter("early_labels"), float(len(won))))
        return
    before = record.effective()
    stored = record.query_labels if event.from_query else record.labels
    held = record.query_label_ts if event.from_query else record.label_ts
    merged, stamps, won, stale = merge_grades(stored, held, labels, event.ts)
    if stale:
        out.counters.append((Counter("stale_labels", record.group), float(stale)))
    if not event.from_query and record.requested:
        asked = record.requested_docs()
        received = sum(1 for d in won if d in asked and d not in stored)
        if received:
            out.counters.append((Counter("judgments_received", record.group), float(received)))
    if event.from_query:
        record.query_label_ts = stamps
    else:
        record.label_ts = stamps
    if merged == stored:
        if won:
            out.counters.append((Counter("unchanged_labels", record.group), float(len(won))))
        if stamps != held:  # the same grade, a later ts: kept, so an older one re-sent still loses
            out.records.append(record)
        return
    if event.from_query:
        record.query_labels = merged
    else:
        record.labels = merged
        if config.share_session_grades:
            changed = {d: g for d, g in won.items() if stored.get(d) != g}
            out.shared = (record.query_key, session_id, record.ts, changed)
    _relabelled(record, before, set(won), scale, config, out)


def _relabelled(record: SessionRecord, before: Labels, touched: set[str], scale: Scale, config: StreamConfig,
                out: Transition) -> None:
    """After a session's grades changed (``touched``: the documents that may have): count corrections,
    re-score or close it as its status asks."""
    session_id = record.session_id
    after = record.effective()
    if after == before:  # a grade under one that wins (own over query's over shared): changes nothing now
        out.counters.append((Counter("unchanged_labels", record.group), float(len(touched))))
        out.records.append(record)
        return
    corrected = sum(1 for d in touched if d in before and after.get(d) != before[d])
    if corrected:
        out.counters.append((Counter("corrections", record.group), float(corrected)))
    if record.status == "scored" or (record.status == "pending" and record.complete()):
        _score(record, scale, config, out.watermark, out)
        out.drop_deadlines.append(session_id)
    elif record.status == "expired":
        if record.coverage() >= config.min_coverage:
            _score(record, scale, config, out.watermark, out)
        else:
            _expire(record, out)
    out.records.append(record)


def _close_due(loaded: Loaded, config: StreamConfig, scale: Scale, out: Transition,
               horizon: float | None = None) -> None:
    touched = {r.session_id for r in out.records}
    limit = out.watermark if horizon is None else horizon
    # the event time the sessions close at (their join lag): a quiet partition's, its horizon
    now = max(out.watermark, limit) if math.isfinite(limit) else out.watermark
    for record in loaded.due[:config.max_closes_per_step]:
        if record.session_id in touched or record.status != "pending" or record.deadline > limit:
            continue
        if record.coverage() >= config.min_coverage:
            _score(record, scale, config, now, out)
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
            out.query_ts = event.ts
            out.counters.append((Counter("query_labels"), float(len(labels))))
    else:
        out.deploys.append(event)
        out.counters.append((Counter("deploys"), 1.0))
    _close_due(loaded, config, scale, out)
    return out


def close_step(loaded: Loaded, watermark: float, config: StreamConfig, scale: Scale,
               move: bool = True) -> Transition:
    """Close sessions due by ``watermark`` without an event: the end of a replay (``watermark=inf``
    closes everything, leaving the watermark as is), or a quiet partition (``move=False``: its sessions
    close by the event time the others reached, see :func:`quiet_horizon`, while its own watermark stays
    what its impressions made it, so the dead-letter rule for old impressions is unchanged)."""
    moved = move and math.isfinite(watermark)
    out = Transition(watermark=max(loaded.watermark, watermark) if moved else loaded.watermark)
    _close_due(loaded, config, scale, out, horizon=watermark)
    return out


def quiet_horizon(own: float, stream: float, config: StreamConfig, wall_elapsed: float = 0.0) -> float | None:
    """The event time a quiet partition's sessions close by, or None when it is not quiet.

    ``own``: the partition's watermark (its latest impression); ``stream``: the highest watermark of all
    partitions. A partition more than ``idle_after`` behind the stream closes what is due by
    ``stream - idle_after``: a partition whose traffic stopped (night, a small deployment, a producer
    gone) no longer holds its sessions back for ever. ``wall_elapsed`` (the worker only: wall-clock
    seconds since the partition's last impression, once that reaches ``idle_timeout``) lets event time
    run on with the wall clock when the whole stream is quiet (the end of a backfill):
    ``own + wall_elapsed``. The closes are those a later impression would have made; a label that comes
    after re-scores the session as usual, so the final numbers do not depend on when this runs.

    >>> cfg = StreamConfig(idle_after=900.0)
    >>> quiet_horizon(1000.0, 5000.0, cfg), quiet_horizon(4500.0, 5000.0, cfg)
    (4100.0, None)
    >>> quiet_horizon(1000.0, 1000.0, cfg, wall_elapsed=3600.0)
    4600.0
    """
    if not math.isfinite(own):
        return None
    horizon = max(stream - config.idle_after, own + wall_elapsed)
    return horizon if horizon > own else None
