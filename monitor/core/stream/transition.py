"""What one step of the join reads (:class:`Loaded`) and writes (:class:`Transition`, with the
:class:`Delta` s it adds to the aggregates and the :class:`AnnotationRequest` s it publishes, with the
text of their documents, :func:`shown_documents`): the contract between
:func:`monitor.core.stream.join.step` and the stores that load and commit it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from dataclasses import field as dataclass_field

from msgspec import Struct, field

from monitor.core.events import TEXT_FIELDS, Deploy, Impression
from monitor.core.stream.counters import Counter
from monitor.core.stream.held_grades import Labels, SharedGrades, Stamps
from monitor.core.stream.session import SessionRecord
from monitor.core.stream.stats import Stats


@dataclass(frozen=True)
class AnnotationRequest:
    """Ask annotators to grade the documents of a session's top k that have no grade yet (published to
    the requests topic). ``judged``: how many of its top k were already graded (by early session labels or
    by the query's judgments), so ``judged + len(docs)`` is the number of documents it showed in its top
    ``k``."""

    session_id: str
    query: str
    bucket: str
    ranker: str
    variant: str
    k: int
    docs: list[str]
    judged: int
    ts: float
    documents: dict[str, dict[str, str]] = dataclass_field(default_factory=dict)
    """What the impression's results said of the documents asked about (``title``, ``snippet``, ``url``,
    those given), for annotators; only documents with some text are in it."""


#: the most characters of text an annotation request carries (a document past it goes without: the
#: request stays far below Kafka's default 1 MB message size, whatever the results)
MAX_REQUEST_TEXT = 100_000


def shown_documents(event: Impression, wanted: set[str]) -> dict[str, dict[str, str]]:
    """The text the impression's results (served, then shadow) give of the ``wanted`` documents, for an
    annotation request: doc_id → its ``title``, ``snippet``, ``url`` (those given); the first result of a
    document with any text wins, in list order, up to :data:`MAX_REQUEST_TEXT` characters in all."""
    out: dict[str, dict[str, str]] = {}
    total = 0
    for results in (event.results, *(s.results for s in event.shadow)):
        for result in results:
            if result.doc_id in wanted and result.doc_id not in out:
                values = (result.title, result.snippet, result.url)
                text = {name: v for name, v in zip(TEXT_FIELDS, values, strict=True) if v is not None}
                size = sum(map(len, text.values()))
                if text and total + size <= MAX_REQUEST_TEXT:
                    out[result.doc_id] = text
                    total += size
    return out


class Delta(Struct):
    """One session's change to its group's aggregates, at the event time ``ts`` of its impression:
    ``stats`` added or, with ``take_back``, a contribution added before and now taken back (the session is
    scored or expired again). Folded by :meth:`monitor.core.stream.effects.Aggregates.add`."""

    ts: float
    group: str  # bucket|ranker|variant (or, in ``query_deltas``, group|query key)
    stats: Stats
    take_back: bool = False


class Loaded(Struct):
    """The state one step reads; ``due`` are pending sessions with deadline ≤ the new watermark. (It and
    :class:`Transition` are msgspec structs: one of each per message, made at a fraction of a dataclass's
    cost.)"""

    watermark: float = -math.inf
    record: SessionRecord | None = None
    early_labels: Labels = field(default_factory=dict)
    early_stamps: Stamps = field(default_factory=dict)
    query_labels: Labels = field(default_factory=dict)
    query_stamps: Stamps = field(default_factory=dict)
    shared: SharedGrades = field(default_factory=dict)  # the query's shared grades (impressions, refreshes)
    sketch: list[dict[str, float]] = field(default_factory=list)
    budget_used: dict[str, float] = field(default_factory=dict)  # bucket -> spent this period (budget_unit)
    due: list[SessionRecord] = field(default_factory=list)


class Transition(Struct):
    """Everything a step writes; committed atomically with the offset."""

    watermark: float
    records: list[SessionRecord] = field(default_factory=list)
    early_labels: dict[str, Labels] = field(default_factory=dict)
    early_stamps: dict[str, Stamps] = field(default_factory=dict)  # with each early_labels entry
    drop_early_labels: list[str] = field(default_factory=list)
    deadlines: dict[str, float] = field(default_factory=dict)
    drop_deadlines: list[str] = field(default_factory=list)
    deltas: list[Delta] = field(default_factory=list)        # sessions' contributions added or taken back
    query_deltas: list[Delta] = field(default_factory=list)  # group|query key: n, x, xx of a scored DCG
    counters: list[tuple[Counter, float]] = field(default_factory=list)   # (counter, delta)
    sketch: list[tuple[int, str]] = field(default_factory=list)           # (slice, cell field) += 1
    budget: tuple[str, int, float] | None = None                          # (bucket, period, amount) += amount
    query_labels: tuple[str, Labels] | None = None                        # (query key, labels) merged
    query_ts: float | None = None                                         # the query annotation's ts
    shared: tuple[str, str, float, Labels] | None = None  # (query key, session, its ts, own grades changed)
    pending_queries: list[tuple[str, str]] = field(default_factory=list)  # (query key, session id)
    requests: list[AnnotationRequest] = field(default_factory=list)
    deploys: list[Deploy] = field(default_factory=list)
    seen: tuple[str, str, float] | None = None                            # (arm, ranker, ts) of an impression
    # (arm ``shadow``, candidate, session ts) of each paired contribution added: where the canary's
    # reader finds a shadow candidate's first epoch (``first_epoch``)
    sightings: list[tuple[str, str, float]] = field(default_factory=list)
    # (ts, group) of an impression counted (declared, not a duplicate): its epoch's ``impressions`` += 1
    impression: tuple[float, str] | None = None
    # its session was sampled: the epoch's ``sampled`` += 1 too (with the epoch's ``sessions`` and
    # ``expired``, what tells the canary which epochs still have sessions waiting for grades)
    sampled: bool = False
