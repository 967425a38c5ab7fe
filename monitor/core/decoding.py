"""Raw event bytes → a typed event: a schema-driven decoder for valid events, the reference for the rest.

Every message the stream reads goes through :func:`decode_event`. Almost all of them are valid, so it
first decodes against the event schemas with msgspec (C: types, required fields, the results of an
impression built straight into :class:`~monitor.core.events.Result` values), then checks what a schema
cannot say (non-blank strings within their limits, positions exactly 1..n, no document twice, the
grade on the scale, a known schema version; an impression's shadow lists: how many, distinct rankers, and
each list's results as the impression's). The fast path only ever *accepts*: on anything it does not
take (a type it does not expect, an ISO-8601 ``ts``, an escaped surrogate without its pair, which
msgspec refuses, a failed check) the message
goes to :func:`monitor.core.event_checks.decode_checked`, the field-by-field reference, which accepts it
(the same event) or raises the :class:`~monitor.core.events.EventError` whose field, reason and code are
the contract of the dead-letter topic. So both paths give the same event for every valid message, and
an invalid one always gets the reference's error (``tests/unit/test_decoding.py`` checks both, against
the simulator's traffic, the bad-input corpus and generated JSON).

Measured on the realistic mix, an impression of 20–40 results decodes in about a fifth of the time the
reference takes (``benchmarks/scaling.py``).
"""

from __future__ import annotations

import math
from itertools import count
from operator import attrgetter, eq

import msgspec
from msgspec import UNSET, UnsetType

from monitor.core import events  # the schemas' constants: events.BUCKETS, events.SCOPES...
from monitor.core.errors import GradeError
from monitor.core.event_checks import decode_checked, shown_text
from monitor.core.events import (
    DEFAULT_LIMITS,
    Annotation,
    Deploy,
    Event,
    Impression,
    Label,
    Limits,
    Result,
    ShadowList,
)
from monitor.core.grades import Scale


class _Shadow(msgspec.Struct, gc=False):
    ranker: str
    results: tuple[Result, ...]  # (built as a tuple: kept as it is when in order)


class _Impression(msgspec.Struct, tag_field="type", tag="impression", gc=False):
    session_id: str
    query: str
    ranker: str
    ts: float | str
    results: tuple[Result, ...]
    variant: str | None = None
    query_bucket: str | None = None
    schema: int = 1
    shadow: list[_Shadow] | None = None


class _Grade(msgspec.Struct, gc=False):
    doc_id: str
    grade: str | int | float


class _Annotation(msgspec.Struct, tag_field="type", tag="annotation", gc=False):
    session_id: str | None = None
    query: str | None = None
    scope: str = "session"
    query_key: str | None = None
    grades: list[_Grade] | UnsetType = UNSET
    doc_id: str | UnsetType = UNSET
    grade: str | int | float | UnsetType = UNSET
    ts: float | str | None = None
    schema: int = 1


class _Deploy(msgspec.Struct, tag_field="type", tag="deploy", gc=False):
    kind: str
    ranker: str
    ts: float | str
    previous: str | None = None
    share: float | None = None
    schema: int = 1


_DECODER = msgspec.json.Decoder(_Impression | _Annotation | _Deploy)
_POSITION = attrgetter("position")
_DOC_ID = attrgetter("doc_id")
_TEXTS = attrgetter(*events.TEXT_FIELDS)
_TITLE, _SNIPPET, _URL = (attrgetter(name) for name in events.TEXT_FIELDS)


class _Refused(Exception):
    """The fast path does not take this message: the reference decides."""


def _text(value: str, limit: int) -> str:
    if not value or len(value) > limit or value.isspace():
        raise _Refused
    return value


def _optional(value: str | None, limit: int) -> str | None:
    return None if value is None else _text(value, limit)


def _ts(value: float | str) -> float:
    if isinstance(value, str) or not (value >= 0.0 and math.isfinite(value)):
        raise _Refused  # an ISO-8601 time is parsed by the reference (rare on the hot path)
    return value


_RANKS = tuple(range(1, Limits.max_results + 1))  # positions 1..n, compared as a slice of it


def _results(results: tuple[Result, ...], limits: Limits, keep: bool = True) -> tuple[Result, ...]:
    n = len(results)
    if not 0 < n <= limits.max_results:
        raise _Refused
    docs = set(map(_DOC_ID, results))  # map, max, any over C callables: no Python call per result
    if len(docs) != n or any(map(str.isspace, docs)) or (  # (msgspec refused "" and > the default limit)
            limits.max_id_chars < Limits.max_id_chars and max(map(len, docs)) > limits.max_id_chars):
        raise _Refused
    # optional text (title, snippet, url): kept as the reference keeps it (never refused: not looked at when
    # the results are not kept); one field over all the results at a time (no tuple per result: a third
    # cheaper, and most traffic carries none)
    if keep and (any(map(_TITLE, results)) or any(map(_SNIPPET, results)) or any(map(_URL, results))):
        results = _texts(results, limits.max_text_chars)
    positions = tuple(map(_POSITION, results))  # (one C pass, then a tuple compare: small ints are shared)
    in_order = positions == _RANKS[:n] if n <= len(_RANKS) else all(map(eq, positions, count(1)))
    if in_order:
        return results
    ordered = sorted(results, key=_POSITION)  # not in order: sorted, they must still be exactly 1..n
    if list(map(_POSITION, ordered)) != list(range(1, n + 1)):
        raise _Refused
    return tuple(ordered)


def _texts(results: tuple[Result, ...], limit: int) -> tuple[Result, ...]:
    """The results with their text kept as :func:`~monitor.core.event_checks.shown_text` keeps it."""
    out = []
    for result in results:
        texts = _TEXTS(result)
        kept = tuple(shown_text(t, limit) for t in texts)
        out.append(result if kept == texts else msgspec.structs.replace(
            result, **dict(zip(events.TEXT_FIELDS, kept, strict=True))))
    return tuple(out)


def _shadow(lists: list[_Shadow] | None, ranker: str, limits: Limits, keep: bool
            ) -> tuple[ShadowList, ...]:
    if not lists:
        return ()
    if len(lists) > limits.max_shadow_lists:
        raise _Refused
    rankers = {ranker, *(_text(s.ranker, limits.max_id_chars) for s in lists)}
    if len(rankers) != len(lists) + 1:  # a shadow ranker is the impression's or another list's
        raise _Refused
    out = []
    for s in lists:
        results = _results(s.results, limits, keep)  # (checked, kept or not)
        out.append(ShadowList(s.ranker, results if keep else ()))
    return tuple(out)


def _impression(obj: _Impression, limits: Limits, keep: bool) -> Impression:
    if obj.query_bucket is not None and obj.query_bucket not in events.BUCKETS:
        raise _Refused
    ranker = _text(obj.ranker, limits.max_id_chars)
    results = _results(obj.results, limits, keep)
    return Impression(_text(obj.session_id, limits.max_id_chars), _text(obj.query, limits.max_query_chars),
                      ranker, _ts(obj.ts), results if keep else (),
                      _optional(obj.variant, limits.max_id_chars), obj.query_bucket,
                      _shadow(obj.shadow, ranker, limits, keep))


def _labels(obj: _Annotation, scale: Scale, limits: Limits) -> tuple[Label, ...]:
    if obj.grades is not UNSET:
        if obj.doc_id is not UNSET or obj.grade is not UNSET or not obj.grades \
                or len(obj.grades) > limits.max_grades:
            raise _Refused
        return tuple(Label(_text(g.doc_id, limits.max_id_chars), scale.parse(g.grade)) for g in obj.grades)
    if obj.doc_id is UNSET or obj.grade is UNSET:
        raise _Refused
    return (Label(_text(obj.doc_id, limits.max_id_chars), scale.parse(obj.grade)),)


def _annotation(obj: _Annotation, scale: Scale, limits: Limits) -> Annotation:
    session = _optional(obj.session_id, limits.max_id_chars)
    query = _optional(obj.query, limits.max_query_chars)
    scope = obj.scope
    if (session is None) == (query is None) or scope not in events.SCOPES:
        raise _Refused
    if scope != "session" and session is None:
        raise _Refused
    key = None
    if scope == "shared":
        if obj.query_key is None:
            raise _Refused
        key = _text(obj.query_key, limits.max_id_chars)
        if not events.QUERY_KEY_PATTERN.fullmatch(key):
            raise _Refused
    return Annotation(_labels(obj, scale, limits), session, query, None if obj.ts is None else _ts(obj.ts),
                      from_query=scope == "query", query_key=key)


def _deploy(obj: _Deploy, limits: Limits) -> Deploy:
    if obj.kind not in events.DEPLOY_KINDS:
        raise _Refused
    share = obj.share
    if share is None:
        if obj.kind == "canary_share":  # required there
            raise _Refused
    elif obj.kind not in events.SHARE_KINDS or not 0.0 < share < 1.0:  # NaN and ±inf fail too
        raise _Refused
    return Deploy(obj.kind, _text(obj.ranker, limits.max_id_chars), _ts(obj.ts),
                  _optional(obj.previous, limits.max_id_chars), share)


def fast_decode(raw: bytes, scale: Scale, limits: Limits = DEFAULT_LIMITS, results: bool = True
                ) -> Event | None:
    """The event, if the fast path takes ``raw``; None when the reference must decide (never wrong: what
    this returns, :func:`~monitor.core.event_checks.decode_checked` returns too; with ``results`` False,
    that event :func:`without_results`)."""
    if not raw:
        return None
    if not raw.isascii():
        try:
            raw.decode("utf-8")  # what Python refuses, msgspec must not accept
        except UnicodeDecodeError:
            return None
    try:
        obj = _DECODER.decode(raw)
        if obj.schema not in events.SCHEMA_VERSIONS:
            return None
        if isinstance(obj, _Impression):
            return _impression(obj, limits, results)
        if isinstance(obj, _Annotation):
            return _annotation(obj, scale, limits)
        return _deploy(obj, limits)
    except (msgspec.DecodeError, RecursionError, _Refused, GradeError, OverflowError):
        return None


def decode_event(raw: bytes, scale: Scale, limits: Limits = DEFAULT_LIMITS, results: bool = True) -> Event:
    """Decode and validate UTF-8 JSON bytes (None, a Kafka tombstone, is refused like empty bytes): the
    fast path, else the reference (:func:`~monitor.core.event_checks.decode_checked`), which raises the
    :class:`~monitor.core.events.EventError` of an invalid event.

    ``results=False``: an impression's results (and its shadow lists') are checked as always, and then not
    kept (:func:`without_results`). The Redis writer decodes so: most impressions are only counted, and
    their ~90 objects each (results, ids, scores) are then freed while they are still in the cache, not
    at the end of a batch of thousands; the few that the full step takes are decoded again."""
    event = fast_decode(raw, scale, limits, results)
    if event is not None:
        return event
    event = decode_checked(raw, scale, limits)
    return event if results else without_results(event)


def without_results(event: Event) -> Event:
    """``event``, an impression without its results and its shadow lists' (their rankers kept): what the
    counting of an impression reads (session, query, ranker, variant, bucket, ts, shadow rankers)."""
    if not isinstance(event, Impression) or not event.results:
        return event
    shadow = tuple(ShadowList(s.ranker, ()) for s in event.shadow)
    return msgspec.structs.replace(event, results=(), shadow=shadow)
