"""Malformed events, each with the rejection a validator must give.

Every kind starts from a valid event of the current session (its impression, a single or batched
annotation of it, or a deploy of its ranker) and breaks one thing: the bytes (truncated or non-JSON text,
invalid UTF-8, ``NaN``/``Infinity`` tokens), a type, a missing field, the positions (negative, duplicate,
missing, a gap), the limits (over 200 results, over 1,000 grades, ids over 256 characters), a grade, the
schema version or the event type. ``expected`` is a substring of the message of the
:class:`~monitor.core.events.EventError` that ``decode_event(raw, SEED_SCALE)`` raises: ``field: reason``,
or just the reason for errors about the whole value.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from monitor.sim.records import encode


@dataclass(frozen=True, slots=True)
class Bases:
    """Valid events of one session to break (never modified: kinds work on copies)."""

    impression: dict[str, Any]
    single: dict[str, Any]
    batch: dict[str, Any]
    deploy: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Malformed:
    kind: str
    topic: str
    key: bytes
    value: bytes
    expected: str


Broken = tuple[bytes, str]  # raw value, expected error substring
Breaker = Callable[[dict[str, Any], np.random.Generator], Broken]


def _pick(items: list[Any], rng: np.random.Generator, start: int = 0) -> int:
    return int(rng.integers(start, len(items))) if len(items) > start else start


def _with_token(obj: dict[str, Any], token: bytes) -> bytes:
    return encode(obj).replace(b'"__TOKEN__"', token)


# impressions ---------------------------------------------------------------------------------------------

def _truncated(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    text = encode(obj).decode("utf-8")
    return text[: int(rng.integers(1, len(text) - 1))].encode("utf-8"), "invalid JSON"


def _plain_text(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    return f"impression {obj['session_id']} {obj['query']}".encode(), "invalid JSON"


def _bad_utf8(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    raw = encode(obj)
    query = obj["query"].encode("utf-8")
    return raw.replace(query, query[:1] + b"\xff\xfe" + query[1:], 1), "not UTF-8"


def _array(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    return encode({"events": [obj]})[len(b'{"events":'):-1], "expected a JSON object, got list"


def _constant_score(token: bytes) -> Breaker:
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        obj["results"][_pick(obj["results"], rng)]["score"] = "__TOKEN__"
        return _with_token(obj, token), f"invalid JSON: {token.decode()} is not a JSON number"
    return breaker


def _set(field: str, value: Any, expected: str) -> Breaker:
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        obj[field] = value
        return encode(obj), expected
    return breaker


def _drop(field: str, expected: str) -> Breaker:
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        del obj[field]
        return encode(obj), expected
    return breaker


def _result_field(field: str, value: Any, reason: str, prefixed: bool = True) -> Breaker:
    """Set one result's field; ``prefixed=False`` where the validator names the field without its path."""
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        j = _pick(obj["results"], rng)
        obj["results"][j][field] = value
        return encode(obj), f"results[{j}].{field}: {reason}" if prefixed else f"{field}: {reason}"
    return breaker


def _two_results(obj: dict[str, Any]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = obj["results"]
    if len(results) < 2:
        results.append({"doc_id": results[0]["doc_id"] + "-extra", "position": 2, "score": 0.0})
    return results


def _duplicate_position(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    results = _two_results(obj)
    j = _pick(results, rng, start=1)
    results[j]["position"] = results[j - 1]["position"]
    return encode(obj), f"results[{j}].position: duplicate position"


def _missing_position(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    j = _pick(obj["results"], rng)
    del obj["results"][j]["position"]
    return encode(obj), f"results[{j}].position: missing"


def _gap_in_positions(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    results = obj["results"]
    for item in results[_pick(results, rng):]:
        item["position"] += 1
    return encode(obj), f"results: positions must be 1..{len(results)}; missing"


def _duplicate_doc(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    results = _two_results(obj)
    j = _pick(results, rng, start=1)
    results[j]["doc_id"] = results[j - 1]["doc_id"]
    return encode(obj), f"results[{j}].doc_id: document shown twice in one session"


def _too_many_results(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    n = int(rng.integers(201, 260))
    base = obj["results"][0]["doc_id"]
    obj["results"] = [{"doc_id": f"{base}-{i}", "position": i, "score": 0.5} for i in range(1, n + 1)]
    return encode(obj), f"results: {n} results, more than the limit of 200"


def _long_id(n: int) -> str:
    return "x" * n


# annotations ---------------------------------------------------------------------------------------------

def _batch_grade(value: Any, reason: str) -> Breaker:
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        j = _pick(obj["grades"], rng)
        obj["grades"][j]["grade"] = value
        return encode(obj), f"grades[{j}].grade: {reason}"
    return breaker


def _batch_long_doc(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    j = _pick(obj["grades"], rng)
    obj["grades"][j]["doc_id"] = _long_id(300)
    return encode(obj), f"grades[{j}].doc_id: longer than 256 characters"


def _too_many_grades(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    n = int(rng.integers(1001, 1100))
    obj["grades"] = [{"doc_id": f"d-x-{i}", "grade": "低"} for i in range(n)]
    return encode(obj), f"grades: {n} grades, more than the limit of 1000"


def _both_targets(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    obj["query"] = "蓝牙耳机"
    return encode(obj), "session_id: an annotation needs exactly one of session_id and query"


def _single_and_batch(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    obj["grades"] = [{"doc_id": obj["doc_id"], "grade": obj["grade"]}]
    return encode(obj), "grades: give either doc_id and grade, or grades, not both"


_MISSING_TARGET = "session_id: an annotation needs exactly one of session_id and query"

KINDS: dict[str, tuple[str, Breaker]] = {
    # raw bytes
    "truncated_json": ("impression", _truncated),
    "plain_text": ("impression", _plain_text),
    "invalid_utf8": ("impression", _bad_utf8),
    "json_array": ("impression", _array),
    "nan_score": ("impression", _constant_score(b"NaN")),
    "infinity_score": ("impression", _constant_score(b"Infinity")),
    "negative_infinity_score": ("impression", _constant_score(b"-Infinity")),
    # envelope
    "unknown_schema": ("impression", _set("schema", 2, "schema: unknown schema version 2")),
    "string_schema": ("single", _set("schema", "1", "schema: unknown schema version '1'")),
    "unknown_type": ("impression", _set("type", "click", "type: unknown event type 'click'")),
    "missing_type": ("single", _drop("type", "type: unknown event type None")),
    # impression fields
    "session_id_number": ("impression", _set("session_id", 1842, "session_id: expected a string, got int")),
    "query_list": ("impression", _set("query", ["蓝牙耳机"], "query: expected a string, got list")),
    "missing_query": ("impression", _drop("query", "query: missing")),
    "missing_session_id": ("impression", _drop("session_id", "session_id: missing")),
    "empty_ranker": ("impression", _set("ranker", "  ", "ranker: empty")),
    "oversized_session_id": ("impression", _set("session_id", _long_id(257),
                                                "session_id: longer than 256 characters (257)")),
    "unknown_bucket": ("impression", _set("query_bucket", "mid", "query_bucket: 'mid' is not one of")),
    "missing_ts": ("impression", _drop("ts", "ts: missing")),
    "negative_ts": ("impression", _set("ts", -5.0, "ts: not a valid epoch time: -5.0")),
    "naive_ts": ("impression", _set("ts", "2025-11-21T08:00:00", "ts: ISO-8601 time without a time zone")),
    "garbled_ts": ("impression", _set("ts", "yesterday", "ts: not an ISO-8601 time")),
    "boolean_ts": ("impression", _set("ts", True, "ts: expected epoch seconds or an ISO-8601 time, "
                                                  "got a boolean")),
    "missing_results": ("impression", _drop("results", "results: missing")),
    "results_string": ("impression", _set("results", "d-1,d-2", "results: expected a list")),
    "empty_results": ("impression", _set("results", [], "results: empty list")),
    "too_many_results": ("impression", _too_many_results),
    "negative_position": ("impression", _result_field("position", -1, "must be ≥ 1, got -1")),
    "zero_position": ("impression", _result_field("position", 0, "must be ≥ 1, got 0")),
    "float_position": ("impression", _result_field("position", 1.5, "expected an integer")),
    "duplicate_position": ("impression", _duplicate_position),
    "missing_position": ("impression", _missing_position),
    "gap_in_positions": ("impression", _gap_in_positions),
    "duplicate_doc": ("impression", _duplicate_doc),
    "oversized_doc_id": ("impression", _result_field("doc_id", _long_id(300), "longer than 256 characters",
                                                         prefixed=False)),
    "doc_id_number": ("impression", _result_field("doc_id", 17, "expected a string, got int",
                                                  prefixed=False)),
    "string_score": ("impression", _result_field("score", "0.93", "expected a number")),
    "boolean_score": ("impression", _result_field("score", False, "expected a number")),
    # annotations
    "unknown_grade_name": ("single", _set("grade", "很好", "grade: unknown grade '很好'")),
    "unknown_grade_level": ("single", _set("grade", 7, "grade: unknown grade 7")),
    "fractional_grade": ("single", _set("grade", 2.5, "grade: unknown grade 2.5")),
    "boolean_grade": ("single", _set("grade", True, "grade: expected a grade name or number")),
    "missing_grade": ("single", _drop("grade", "grade: missing")),
    "missing_doc_id": ("single", _drop("doc_id", "doc_id: missing")),
    "no_target": ("single", _drop("session_id", _MISSING_TARGET)),
    "both_targets": ("single", _both_targets),
    "single_and_batch": ("single", _single_and_batch),
    "unknown_grade_in_batch": ("batch", _batch_grade("perfect", "unknown grade 'perfect'")),
    "oversized_grade_doc_id": ("batch", _batch_long_doc),
    "empty_batch": ("batch", _set("grades", [], "grades: expected a non-empty list")),
    "too_many_grades": ("batch", _too_many_grades),
    # deploys
    "unknown_deploy_kind": ("deploy", _set("kind", "launch", "kind: 'launch' is not one of")),
    "missing_ranker": ("deploy", _drop("ranker", "ranker: missing")),
    "deploy_missing_ts": ("deploy", _drop("ts", "ts: missing")),
}

_TOPICS = {"impression": "impressions", "single": "annotations", "batch": "annotations", "deploy": "deploys"}


def malformed(kind: str, bases: Bases, rng: np.random.Generator) -> Malformed:
    """Break a copy of the base event that ``kind`` starts from."""
    base_name, breaker = KINDS[kind]
    base: dict[str, Any] = getattr(bases, base_name)
    key = str(base.get("ranker") if base_name == "deploy" else base.get("session_id", "")).encode("utf-8")
    value, expected = breaker(copy.deepcopy(base), rng)
    return Malformed(kind, _TOPICS[base_name], key, value, expected)
