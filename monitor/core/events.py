"""Event schemas (version 1): impression sessions, annotations and deploys, parsed once into typed values.

The types, the error every invalid event raises (:class:`EventError`: field, reason, code), which the
edges turn into a dead-letter record (stream) or a ``file:line`` message (offline), and the encoding of
the annotations the stream itself publishes. Decoding and validation: :mod:`monitor.core.decoding` (the
stream's fast path) and :mod:`monitor.core.event_checks` (field by field, the errors' reference). Shapes
and examples: ``docs/events.md``."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from monitor.core.errors import MonitorError
from monitor.core.grades import Grade

SCHEMA_VERSIONS = (1,)
BUCKETS = ("head", "torso", "tail")
SCOPES = ("session", "query", "shared")
QUERY_KEY_PATTERN = re.compile("[0-9a-f]{24}")
DEPLOY_KINDS = ("deploy", "canary_start", "canary_share", "canary_end", "rollback")
SHARE_KINDS = ("canary_start", "canary_share")
"""The deploy kinds that take a ``share`` (required on ``canary_share``, optional on ``canary_start``)."""
#: a result's optional text fields, what annotators are shown (docs/events.md)
TEXT_FIELDS = ("title", "snippet", "url")


class EventError(MonitorError):
    """An invalid event: ``field`` names where (dotted path), ``reason`` says why, ``code`` is one of
    :data:`REASON_CODES` (a bounded set, fit for a metric label). The code is given where the error is
    raised, never read from the reason's words: a reason may quote a value of the event."""

    def __init__(self, field: str, reason: str, code: str) -> None:
        if code not in REASON_CODES:
            raise ValueError(f"unknown reason code {code!r}; known: {', '.join(REASON_CODES)}")
        self.field, self.reason, self.code = field, reason, code
        super().__init__(f"{field}: {reason}" if field else reason)


SETTING_CODES = ("undeclared_variant", "undeclared_ranker")
"""Codes of valid events the settings refuse (monitor.core.stream.admission.undeclared_error)."""
REASON_CODES = ("ts_out_of_range", "invalid_utf8", "invalid_json", "unknown_schema", "unknown_type",
                "wrong_topic", "processing_error", "unknown_grade", "oversized", "too_many_items",
                "non_finite", "bad_position", "duplicate_document", "missing_field", "wrong_type",
                "invalid_value", "duplicate_ranker", *SETTING_CODES)
"""The reason codes of dead letters: the ``reason`` label of ``search_relevance_dead_letters_total``."""


@dataclass(frozen=True)
class Limits:
    max_results: int = 200
    max_grades: int = 1000
    max_id_chars: int = 256
    max_query_chars: int = 1024
    max_shadow_lists: int = 4
    """An impression's ``shadow`` lists at most (each within ``max_results``)."""
    max_text_chars: int = 2048
    """A result's optional ``title``, ``snippet`` and ``url``, each at most (what annotators are shown)."""


DecodedId = Annotated[str, msgspec.Meta(min_length=1, max_length=Limits.max_id_chars)]
"""A result's ``doc_id`` as the decoder (:mod:`monitor.core.decoding`) builds it: msgspec refuses an empty
one, or one longer than the default ``max_id_chars``, in C while it decodes (the reference decoder then
decides: the error, or an id that other limits allow). Making a ``Result`` in code checks nothing."""


class Result(msgspec.Struct, frozen=True, gc=False):
    """One shown document. The events are msgspec structs (frozen): the decoder builds an impression's
    results directly, and one costs a fraction of a frozen dataclass to make."""

    doc_id: DecodedId
    position: int
    score: float | None = None
    title: str | None = None
    snippet: str | None = None
    url: str | None = None
    """``title``, ``snippet``, ``url``: optional, what annotators are shown of the document (an annotation
    request carries them for the documents it asks about; the stream itself never reads them)."""


class ShadowList(msgspec.Struct, frozen=True, gc=False):
    """A candidate ranker's list for the same request, computed in shadow (never shown): its ranker and
    its results, checked as an impression's ``results`` are (sorted by position, positions 1..n)."""

    ranker: str
    results: tuple[Result, ...]


class Impression(msgspec.Struct, frozen=True, gc=False):
    """A served session. ``shadow``: the lists of other rankers for the same request (at most
    ``Limits.max_shadow_lists``, each ranker distinct from ``ranker`` and the others'); empty if none."""

    session_id: str
    query: str
    ranker: str
    ts: float
    results: tuple[Result, ...]  # sorted by position, positions 1..n
    variant: str | None = None
    query_bucket: str | None = None
    shadow: tuple[ShadowList, ...] = ()


class Label(msgspec.Struct, frozen=True, gc=False):
    doc_id: str
    grade: Grade


class Annotation(msgspec.Struct, frozen=True, gc=False):
    """Grades for a session's shown documents (``session_id``) or for a query (``query``)."""

    labels: tuple[Label, ...]
    session_id: str | None = None
    query: str | None = None
    ts: float | None = None
    from_query: bool = False  # a query's judgment restated for one session (scope "query")
    # scope "shared": the query's shared session grades changed; the session (``session_id``) takes them
    # again from the query's state (``query_key``); the grades carried are informative only
    query_key: str | None = None

    @property
    def from_shared(self) -> bool:
        return self.query_key is not None


class Deploy(msgspec.Struct, frozen=True, gc=False):
    """A deploy event. ``share``: the canary's declared share of the traffic (canary impressions over
    canary and control impressions, strictly between 0 and 1), on ``canary_start`` (optional) and
    ``canary_share`` (required: the share changed, a ramp step, from ``ts`` on); None on other kinds."""

    kind: str
    ranker: str
    ts: float
    previous: str | None = None
    share: float | None = None


Event = Impression | Annotation | Deploy
DEFAULT_LIMITS = Limits()

TOPIC_TYPES = {"impressions": Impression, "annotations": Annotation, "deploys": Deploy}


def expect_topic(event: Event, role: str) -> Event:
    """``event`` if its type belongs on the topic of ``role`` (impressions, annotations or deploys).

    A misrouted event is refused, not processed: its key was chosen for another topic, so it may sit on a
    partition that does not hold its session.

    >>> expect_topic(Deploy("deploy", "r2", 1.0), "impressions")
    Traceback (most recent call last):
    ...
    monitor.core.events.EventError: type: deploy event on the wrong topic (impressions takes impression)
    """
    wanted = TOPIC_TYPES[role]
    if not isinstance(event, wanted):
        raise EventError("type", f"{type(event).__name__.lower()} event on the wrong topic "
                                 f"({role} takes {wanted.__name__.lower()})", "wrong_topic")
    return event


def encode_annotation(annotation: Annotation) -> bytes:
    """The JSON bytes of a session or query annotation in schema 1 (grades as levels on the scale).

    >>> from monitor.core.grades import FOUR_LEVEL_SCALE
    >>> encode_annotation(Annotation((Label("d1", FOUR_LEVEL_SCALE.parse("高")),), session_id="s1")).decode()
    '{"type":"annotation","schema":1,"session_id":"s1","grades":[{"doc_id":"d1","grade":3}]}'
    """
    body: dict[str, Any] = {"type": "annotation", "schema": 1}
    if annotation.session_id is not None:
        body["session_id"] = annotation.session_id
    if annotation.from_query:
        body["scope"] = "query"
    elif annotation.query_key is not None:
        body["scope"] = "shared"
        body["query_key"] = annotation.query_key
    if annotation.query is not None:
        body["query"] = annotation.query
    body["grades"] = [{"doc_id": label.doc_id, "grade": label.grade.level} for label in annotation.labels]
    if annotation.ts is not None:
        body["ts"] = annotation.ts
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
