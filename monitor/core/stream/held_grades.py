"""Grades as the join holds them: a session's labels with the ``ts`` of each, a query's shared grades per
grading session, how a new grade merges into each (the latest ``ts`` wins; the earliest grading session's
grade is what the query's other sessions take), and the annotations that carry a query's grades to its
sessions (fan-outs and shared refreshes)."""

from __future__ import annotations

import math

from monitor.core.events import Annotation, Label
from monitor.core.grades import Scale

Labels = dict[str, int]
Stamps = dict[str, float]  # document → the ``ts`` of the grade held (only grades that came with one)
# a query's shared grades: document → grading session → (that session's impression time, grade level)
SharedGrades = dict[str, dict[str, tuple[float, int]]]
SHARED_KEEP = 2  # grading sessions kept per document: the two earliest (enough for every session's view)


def _rank(origin: str, entry: tuple[float, int]) -> tuple[float, str]:
    return entry[0], origin


def shared_grades(entries: SharedGrades, exclude: str) -> Labels:
    """The grades a session of the query takes from other sessions: per document, the grade of the
    session with the earliest impression (ties: the smallest session id) among those that graded it,
    ``exclude`` (the session itself, whose own grade wins anyway) left out. Each grading session's entry
    is its current own grade (a correction replaces it), so the result depends on the sessions' final
    grades, not on their arrival order; a later session's different grade does not replace the first one
    for the others (a query-level judgment does).

    >>> shared_grades({"d1": {"s1": (10.0, 3), "s2": (20.0, 1)}, "d2": {"s3": (5.0, 2)}}, exclude="s3")
    {'d1': 3}
    """
    out: Labels = {}
    for doc, origins in entries.items():
        best: tuple[float, str, int] | None = None
        for origin, (ts, level) in origins.items():  # at most SHARED_KEEP: a plain scan
            if origin != exclude and (best is None or (ts, origin) < best[:2]):
                best = (ts, origin, level)
        if best is not None:
            out[doc] = best[2]
    return out


def changed_shared(now: SharedGrades, before: SharedGrades, exclude: str) -> Labels:
    """The grades of :func:`shared_grades` over ``now`` (for the session ``exclude``) that differ from
    those over ``before``, a document's view being new or another grade: what a session that holds
    ``before`` must be told. Only the documents whose entries changed are looked at (a view is a function
    of its document's entries alone), so a query's large hash with a few new grades costs those few.

    >>> before = {"d1": {"s1": (10.0, 3)}, "d2": {"s1": (10.0, 1)}}
    >>> now = {**before, "d2": {"s0": (5.0, 2), "s1": (10.0, 1)}, "d3": {"s2": (1.0, 0)}}
    >>> changed_shared(now, before, "s9")
    {'d2': 2, 'd3': 0}
    """
    moved = {doc: origins for doc, origins in now.items() if before.get(doc) != origins}
    if not moved:
        return {}
    view = shared_grades(moved, exclude)
    seen = shared_grades({doc: before[doc] for doc in moved if doc in before}, exclude)
    return {doc: level for doc, level in view.items() if seen.get(doc) != level}


def merge_shared(origins: dict[str, tuple[float, int]], origin: str, ts: float, level: int
                 ) -> tuple[dict[str, tuple[float, int]], bool]:
    """One grading session's grade of a document merged into the document's entries: the
    :data:`SHARED_KEEP` earliest grading sessions are kept (no view ever needs a later one), and whether
    ``origin`` is now the earliest (its grade is what the query's other sessions take, so they must be
    told). The same rule runs in Redis (``SHARED_MERGE`` in :mod:`monitor.store.scripts`).

    >>> merge_shared({"s1": (10.0, 3)}, "s0", 5.0, 1)
    ({'s0': (5.0, 1), 's1': (10.0, 3)}, True)
    >>> merge_shared({"s0": (5.0, 1), "s1": (10.0, 3)}, "s2", 7.0, 2)
    ({'s0': (5.0, 1), 's2': (7.0, 2)}, False)
    """
    merged = {**origins, origin: (ts, level)}
    kept = sorted(merged.items(), key=lambda item: _rank(*item))[:SHARED_KEEP]
    return dict(kept), kept[0][0] == origin


def merge_grades(held: Labels, stamps: Stamps, labels: Labels, ts: float | None
                 ) -> tuple[Labels, Stamps, Labels, int]:
    """Grades of one annotation (all with the annotation's ``ts``, or none) merged into a store's grades
    (a session's own, its early labels, its query's judgments): returns the merged grades, their stamps,
    the grades that won and how many lost. A grade with ``ts`` replaces the held one unless the held
    one's ``ts`` is later (a tie: the later delivered wins); a grade without ``ts`` replaces the held one
    and the held ``ts`` stays, so an older grade re-sent with its ``ts`` still loses. So for grades that
    carry ``ts``, the result does not depend on their delivery order. New mappings; inputs unchanged.

    >>> merge_grades({"d1": 1}, {"d1": 20.0}, {"d1": 3, "d2": 2}, 10.0)
    ({'d1': 1, 'd2': 2}, {'d1': 20.0, 'd2': 10.0}, {'d2': 2}, 1)
    >>> merge_grades({"d1": 1}, {"d1": 20.0}, {"d1": 3}, None)
    ({'d1': 3}, {'d1': 20.0}, {'d1': 3}, 0)
    """
    merged, new_stamps, won, stale = dict(held), dict(stamps), {}, 0
    for doc, level in labels.items():
        if ts is not None and stamps.get(doc, -math.inf) > ts:
            stale += 1
            continue
        merged[doc] = won[doc] = level
        if ts is not None:
            new_stamps[doc] = ts
    return merged, new_stamps, won, stale


def fan_out_annotation(session_id: str, labels: Labels, scale: Scale, ts: float | None = None) -> Annotation:
    """A query-level judgment restated as a session annotation for one session of the query (``ts``: the
    judgment's, so the session applies the latest-``ts`` rule to its query grades too)."""
    grades = tuple(Label(doc, scale.parse(level)) for doc, level in sorted(labels.items()))
    return Annotation(grades, session_id=session_id, ts=ts, from_query=True)


def fan_outs(session_id: str, labels: Labels, stamps: Stamps, scale: Scale) -> list[Annotation]:
    """Query judgments with their own ``ts`` each (a re-read of the query's store) as fan-out
    annotations: one per ``ts`` (grades without one together, first)."""
    by_ts: dict[float | None, Labels] = {}
    for doc, level in labels.items():
        by_ts.setdefault(stamps.get(doc), {})[doc] = level
    return [fan_out_annotation(session_id, by_ts[ts], scale, ts)
            for ts in sorted(by_ts, key=lambda t: -math.inf if t is None else t)]


def shared_refresh(session_id: str, key: str, labels: Labels, scale: Scale) -> Annotation:
    """Tell one session of a query that the query's shared grades changed (``labels``: what changed, for
    the record; the session reads the query's shared grades from the state when it processes this)."""
    grades = tuple(Label(doc, scale.parse(level)) for doc, level in sorted(labels.items()))
    return Annotation(grades, session_id=session_id, query_key=key)
