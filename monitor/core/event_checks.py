"""Event validation, field by field: what makes an event invalid, with its field, reason and code.

:func:`parse_event` validates a decoded JSON value (the offline JSONL reader uses it) and
:func:`decode_checked` raw bytes; their :class:`~monitor.core.events.EventError` (field, reason, code) are
the contract of every dead letter and ``FILE:LINE`` message. The stream decodes with
:func:`monitor.core.decoding.decode_event`, a schema-driven fast path that gives the same event for every
valid message and hands everything else to :func:`decode_checked`, so the errors are always these.
"""

from __future__ import annotations

import json
import math
import sys
from datetime import datetime
from typing import Any

from monitor.core.errors import GradeError
from monitor.core.events import (
    BUCKETS,
    DEFAULT_LIMITS,
    DEPLOY_KINDS,
    QUERY_KEY_PATTERN,
    SCHEMA_VERSIONS,
    SCOPES,
    SHARE_KINDS,
    TEXT_FIELDS,
    Annotation,
    Deploy,
    Event,
    EventError,
    Impression,
    Label,
    Limits,
    Result,
    ShadowList,
)
from monitor.core.grades import Grade, Scale


def _missing_or(value: object, expected: str) -> tuple[str, str]:
    """The reason and code of a value that is absent (``None``) or of the wrong type."""
    return ("missing", "missing_field") if value is None else (expected, "wrong_type")




def _show(value: object) -> str:
    """``repr`` of a bad value, cut to 64 characters (an integer of a thousand digits is valid JSON)."""
    text = repr(value)
    return text if len(text) <= 64 else f"{text[:61]}..."


def _finite(value: int | float) -> float | None:
    """``value`` as a finite float, or None (NaN, ±inf, or an integer too large for a float)."""
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _text(obj: dict[str, Any], key: str, limit: int, required: bool = True) -> str | None:
    value = obj.get(key)
    if value is None:
        if required:
            raise EventError(key, "missing", "missing_field")
        return None
    if not isinstance(value, str):
        raise EventError(key, f"expected a string, got {type(value).__name__}", "wrong_type")
    if not value.strip():
        raise EventError(key, "empty", "invalid_value")
    if len(value) > limit:
        raise EventError(key, f"longer than {limit} characters ({len(value)})", "oversized")
    return value


def shown_text(value: object, limit: int) -> str | None:
    """A result's optional text (``title``, ``snippet``, ``url``) as kept: a string that is not blank, cut
    to ``limit`` characters; anything else is dropped (None), never refused: results carried other fields
    before these were read, and an event valid then is valid now.

    >>> shown_text("Earbuds", 4), shown_text("  ", 4), shown_text(7, 4)
    ('Earb', None, None)
    """
    if not isinstance(value, str) or not value.strip():
        return None
    return value[:limit]


def _timestamp(obj: dict[str, Any], key: str, required: bool) -> float | None:
    value = obj.get(key)
    if value is None:
        if required:
            raise EventError(key, "missing", "missing_field")
        return None
    if isinstance(value, bool):
        raise EventError(key, "expected epoch seconds or an ISO-8601 time, got a boolean", "wrong_type")
    if isinstance(value, (int, float)):
        number = _finite(value)
        if number is None or number < 0:
            raise EventError(key, f"not a valid epoch time: {_show(value)}", "invalid_value")
        return number
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise EventError(key, f"not an ISO-8601 time: {value[:64]!r}", "invalid_value") from None
        if parsed.tzinfo is None:
            raise EventError(key, f"ISO-8601 time without a time zone: {value[:64]!r}", "invalid_value")
        number = parsed.timestamp()
        if number < 0:  # before 1970, as a negative number of epoch seconds is
            raise EventError(key, f"not a valid epoch time: {value[:64]!r} is before 1970", "invalid_value")
        return number
    raise EventError(key, f"expected epoch seconds or an ISO-8601 time, got {type(value).__name__}",
                     "wrong_type")


def _share(obj: dict[str, Any], kind: str) -> float | None:
    """A deploy's ``share`` (absent or null: None): required on ``canary_share``, optional on
    ``canary_start``, refused on the other kinds; a number strictly between 0 and 1."""
    value = obj.get("share")
    if value is None:
        if kind == "canary_share":
            raise EventError("share", "missing", "missing_field")
        return None
    if kind not in SHARE_KINDS:
        raise EventError("share", f"a {kind} event takes no share (only {' and '.join(SHARE_KINDS)} do)",
                         "invalid_value")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EventError("share", f"expected a number, got {type(value).__name__}", "wrong_type")
    number = _finite(value)
    if number is None or not 0.0 < number < 1.0:
        raise EventError("share", f"must be a number strictly between 0 and 1, got {_show(value)}",
                         "invalid_value")
    return number


def _item_text(item: object, where: str, key: str, limits: Limits) -> str:
    """The required text field ``key`` of the list item ``item`` at path ``where`` (an object)."""
    if not isinstance(item, dict):
        raise EventError(where, "expected an object", "wrong_type")
    try:
        text = _text(item, key, limits.max_id_chars)
    except EventError as error:
        raise EventError(f"{where}.{error.field}", error.reason, error.code) from None
    assert text is not None
    return text


def _results(value: object, limits: Limits, name: str = "results") -> tuple[Result, ...]:
    """A list of results (an impression's ``results``, or a shadow list's: ``name`` is its path)."""
    if not isinstance(value, list):
        raise EventError(name, *_missing_or(value, "expected a list"))
    if not value:
        raise EventError(name, "empty list", "invalid_value")
    if len(value) > limits.max_results:
        raise EventError(name, f"{len(value)} results, more than the limit of {limits.max_results}",
                         "too_many_items")
    out: list[Result] = []
    positions: set[int] = set()
    docs: set[str] = set()
    for i, item in enumerate(value):
        where = f"{name}[{i}]"
        doc = _item_text(item, where, "doc_id", limits)
        position = item.get("position")
        if isinstance(position, bool) or not isinstance(position, int):
            raise EventError(f"{where}.position", *_missing_or(position, "expected an integer"))
        if position < 1:
            raise EventError(f"{where}.position", f"position must be ≥ 1, got {_show(position)}",
                             "bad_position")
        if position in positions:
            raise EventError(f"{where}.position", f"duplicate position {position}", "bad_position")
        if doc in docs:
            raise EventError(f"{where}.doc_id", "document shown twice in one session", "duplicate_document")
        score = item.get("score")
        if score is not None:
            if isinstance(score, bool) or not isinstance(score, (int, float)):
                raise EventError(f"{where}.score", "expected a number", "wrong_type")
            number = _finite(score)
            if number is None:
                raise EventError(f"{where}.score", f"not a finite number: {_show(score)}", "non_finite")
            score = number
        texts = [shown_text(item.get(key), limits.max_text_chars) for key in TEXT_FIELDS]
        positions.add(position)
        docs.add(doc)
        out.append(Result(doc, position, score, *texts))
    if max(positions) != len(out):
        missing = sorted(set(range(1, len(out) + 1)) - positions)[:5]
        raise EventError(name, f"positions must be 1..{len(out)}; missing {missing}", "bad_position")
    return tuple(sorted(out, key=lambda r: r.position))


def _shadow(value: object, ranker: str, limits: Limits) -> tuple[ShadowList, ...]:
    """An impression's ``shadow`` lists (absent, null or ``[]``: none): at most ``max_shadow_lists``, each
    an object with a ``ranker`` (as the impression's, distinct from it and from the other lists') and
    ``results`` (checked as the impression's)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise EventError("shadow", f"expected a list, got {type(value).__name__}", "wrong_type")
    if len(value) > limits.max_shadow_lists:
        raise EventError("shadow", f"{len(value)} shadow lists, more than the limit of "
                                   f"{limits.max_shadow_lists}", "too_many_items")
    out: list[ShadowList] = []
    seen = {ranker}
    for i, item in enumerate(value):
        where = f"shadow[{i}]"
        name = _item_text(item, where, "ranker", limits)
        if name in seen:
            whose = "the impression's own ranker" if name == ranker else "an earlier shadow list's ranker"
            raise EventError(f"{where}.ranker", f"{_show(name)} is {whose}", "duplicate_ranker")
        seen.add(name)
        out.append(ShadowList(name, _results(item.get("results"), limits, f"{where}.results")))
    return tuple(out)


def _grade(value: object, scale: Scale, where: str) -> Grade:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise EventError(where, *_missing_or(value, "expected a grade name or number"))
    try:
        return scale.parse(value)
    except GradeError as error:
        raise EventError(where, str(error), "unknown_grade") from None
    except OverflowError:  # an integer too large for a float, on a scale of integer grades
        raise EventError(where, f"unknown grade {_show(value)}: too large", "unknown_grade") from None


def _labels(obj: dict[str, Any], scale: Scale, limits: Limits) -> tuple[Label, ...]:
    if "grades" in obj:
        if "doc_id" in obj or "grade" in obj:
            raise EventError("grades", "give either doc_id and grade, or grades, not both", "invalid_value")
        items = obj["grades"]
        if not isinstance(items, list) or not items:
            raise EventError("grades", "expected a non-empty list", "wrong_type")
        if len(items) > limits.max_grades:
            raise EventError("grades", f"{len(items)} grades, more than the limit of {limits.max_grades}",
                             "too_many_items")
        labels = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise EventError(f"grades[{i}]", "expected an object", "wrong_type")
            try:
                doc = _text(item, "doc_id", limits.max_id_chars)
            except EventError as error:
                raise EventError(f"grades[{i}].{error.field}", error.reason, error.code) from None
            assert doc is not None
            labels.append(Label(doc, _grade(item.get("grade"), scale, f"grades[{i}].grade")))
        return tuple(labels)
    doc = _text(obj, "doc_id", limits.max_id_chars)
    assert doc is not None
    return (Label(doc, _grade(obj.get("grade"), scale, "grade")),)


def parse_event(obj: object, scale: Scale, limits: Limits = DEFAULT_LIMITS) -> Event:
    """Validate a decoded JSON value and return the typed event."""
    if not isinstance(obj, dict):
        raise EventError("", f"expected a JSON object, got {type(obj).__name__}", "wrong_type")
    version = obj.get("schema", 1)
    if isinstance(version, bool) or version not in SCHEMA_VERSIONS:
        raise EventError("schema", f"unknown schema version {version!r}; accepted: {list(SCHEMA_VERSIONS)}",
                         "unknown_schema")
    kind = obj.get("type")
    if kind == "impression":
        bucket = obj.get("query_bucket")
        if bucket is not None and bucket not in BUCKETS:
            raise EventError("query_bucket", f"{bucket!r} is not one of {', '.join(BUCKETS)}",
                             "invalid_value")
        session = _text(obj, "session_id", limits.max_id_chars)
        query = _text(obj, "query", limits.max_query_chars)
        ranker = _text(obj, "ranker", limits.max_id_chars)
        ts = _timestamp(obj, "ts", required=True)
        assert session is not None and query is not None and ranker is not None and ts is not None
        results = _results(obj.get("results"), limits)
        variant = _text(obj, "variant", limits.max_id_chars, required=False)
        return Impression(session, query, ranker, ts, results, variant, bucket,
                          _shadow(obj.get("shadow"), ranker, limits))
    if kind == "annotation":
        session = _text(obj, "session_id", limits.max_id_chars, required=False)
        query = _text(obj, "query", limits.max_query_chars, required=False)
        if (session is None) == (query is None):
            raise EventError("session_id", "an annotation needs exactly one of session_id and query",
                             "invalid_value")
        scope = obj.get("scope", "session")
        if scope not in SCOPES or (scope != "session" and session is None):
            raise EventError("scope", f"{_show(scope)} is not 'session', or 'query' or 'shared' with a "
                                      "session_id", "invalid_value")
        qkey = None
        if scope == "shared":
            qkey = _text(obj, "query_key", limits.max_id_chars)
            assert qkey is not None
            if not QUERY_KEY_PATTERN.fullmatch(qkey):
                raise EventError("query_key", f"{_show(qkey)} is not a query key (24 hex digits)",
                                 "invalid_value")
        return Annotation(_labels(obj, scale, limits), session, query, _timestamp(obj, "ts", required=False),
                          from_query=scope == "query", query_key=qkey)
    if kind == "deploy":
        deploy_kind = obj.get("kind")
        if deploy_kind not in DEPLOY_KINDS:
            raise EventError("kind", f"{deploy_kind!r} is not one of {', '.join(DEPLOY_KINDS)}",
                             "invalid_value")
        ranker = _text(obj, "ranker", limits.max_id_chars)
        ts = _timestamp(obj, "ts", required=True)
        assert ranker is not None and ts is not None
        return Deploy(deploy_kind, ranker, ts, _text(obj, "previous", limits.max_id_chars, required=False),
                      _share(obj, deploy_kind))
    raise EventError("type", f"unknown event type {kind!r}; accepted: impression, annotation, deploy",
                     "unknown_type")


def decode_checked(raw: bytes, scale: Scale, limits: Limits = DEFAULT_LIMITS) -> Event:
    """Decode UTF-8 JSON bytes and validate them (None, a Kafka tombstone, is refused like empty bytes): the
    reference, whose errors (field, reason, code) are the contract; :func:`monitor.core.decoding.decode_event`
    is the fast path that falls back to it."""
    if not raw:
        raise EventError("", "invalid JSON: an empty message (a Kafka tombstone, without a value, is one)",
                         "invalid_json")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise EventError("", f"not UTF-8 ({error.reason} at byte {error.start})", "invalid_utf8") from None
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except EventError:
        raise
    except json.JSONDecodeError as error:
        raise EventError("", f"invalid JSON: {error}", "invalid_json") from None
    except ValueError:  # Python's limit on the digits of an integer (sys.get_int_max_str_digits)
        raise EventError("", f"invalid JSON: a number of more than {sys.get_int_max_str_digits():,} digits",
                         "invalid_json") from None
    except RecursionError:
        raise EventError("", "invalid JSON: nested too deeply", "invalid_json") from None
    if b"\\ud" in raw or b"\\uD" in raw:  # an escaped surrogate: is every one half of a pair?
        _reject_lone_surrogates(obj)
    return parse_event(obj, scale, limits)


def _reject_lone_surrogates(obj: object) -> None:
    """A JSON escape such as ``"\\ud800"`` that is not half of a surrogate pair decodes to a string no
    UTF-8 encoder accepts (RFC 8259 §8.2): refuse the event at the edge instead of failing later on a
    Redis key or a partition hash. Walked without recursion (the value may be nested 900 deep)."""
    stack: list[tuple[str, object]] = [("", obj)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                path = f"{where}.{key}" if where else str(key)
                _check_utf8(where, key)
                stack.append((path, item))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(value))
        elif isinstance(value, str):
            _check_utf8(where, value)


def _check_utf8(where: str, text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(text[error.start])
        raise EventError(where, f"not UTF-8 (unpaired surrogate \\u{code:04x} in a JSON string)",
                         "invalid_utf8") from None


def _reject_constant(name: str) -> float:
    raise EventError("", f"invalid JSON: {name} is not a JSON number", "invalid_json")
