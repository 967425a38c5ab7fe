"""How :mod:`monitor.sim.invalid` breaks a valid event: one breaker per kind of damage.

A :data:`Breaker` takes a copy of a valid event (a dict) and a random generator and returns the broken
raw value with the substring of the ``field: reason`` message the validator must give for it. The kinds
table that names each breaker, and the reason codes, are in :mod:`monitor.sim.invalid`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from monitor.sim.records import encode, json_text

Broken = tuple[bytes, str]  # raw value, expected error substring
Breaker = Callable[[dict[str, Any], np.random.Generator], Broken]


def _pick(items: list[Any], rng: np.random.Generator, start: int = 0) -> int:
    return int(rng.integers(start, len(items))) if len(items) > start else start


def _with_token(obj: dict[str, Any], token: bytes) -> bytes:
    return encode(obj).replace(b'"__TOKEN__"', token)


# impressions ---------------------------------------------------------------------------------------------

def truncated(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    text = encode(obj).decode("utf-8")
    return text[: int(rng.integers(1, len(text) - 1))].encode("utf-8"), "invalid JSON"


def plain_text(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    return f"impression {obj['session_id']} {obj['query']}".encode(), "invalid JSON"


def bad_utf8(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    raw = encode(obj)
    query = obj["query"].encode("utf-8")
    return raw.replace(query, query[:1] + b"\xff\xfe" + query[1:], 1), "not UTF-8"


def array(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    return encode({"events": [obj]})[len(b'{"events":'):-1], "expected a JSON object, got list"


def constant_score(token: bytes) -> Breaker:
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        obj["results"][_pick(obj["results"], rng)]["score"] = "__TOKEN__"
        return _with_token(obj, token), f"invalid JSON: {token.decode()} is not a JSON number"
    return breaker


def put(field: str, value: Any, expected: str) -> Breaker:
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        obj[field] = value
        return encode(obj), expected
    return breaker


def drop(field: str, expected: str) -> Breaker:
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        del obj[field]
        return encode(obj), expected
    return breaker


def result_field(field: str, value: Any, reason: str, prefixed: bool = True) -> Breaker:
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


def repeated(field: str, reason: str) -> Breaker:
    """A later result's ``field`` copied from the result before it."""
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        results = _two_results(obj)
        j = _pick(results, rng, start=1)
        results[j][field] = results[j - 1][field]
        return encode(obj), f"results[{j}].{field}: {reason}"
    return breaker


def missing_position(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    j = _pick(obj["results"], rng)
    del obj["results"][j]["position"]
    return encode(obj), f"results[{j}].position: missing"


def gap_in_positions(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    results = obj["results"]
    for item in results[_pick(results, rng):]:
        item["position"] += 1
    return encode(obj), f"results: positions must be 1..{len(results)}; missing"


def too_many_results(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    n = int(rng.integers(201, 260))
    base = obj["results"][0]["doc_id"]
    obj["results"] = [{"doc_id": f"{base}-{i}", "position": i, "score": 0.5} for i in range(1, n + 1)]
    return encode(obj), f"results: {n} results, more than the limit of 200"


def long_id(n: int) -> str:
    return "x" * n


def number(field: str, token: bytes, expected: str) -> Breaker:
    """A top-level field set to a JSON number no float holds (``1e999``, a 400-digit integer)."""
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        obj[field] = "__TOKEN__"
        return _with_token(obj, token), expected
    return breaker


def score_token(token: bytes, shown: str) -> Breaker:
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        j = _pick(obj["results"], rng)
        obj["results"][j]["score"] = "__TOKEN__"
        return _with_token(obj, token), f"results[{j}].score: not a finite number: {shown}"
    return breaker


HUGE_INTEGER = b"1" + b"0" * 400


def unpaired_surrogate(field: str, escape: str) -> Breaker:
    """A ``\\udXXX`` escape that is not half of a pair appended to a top-level string: valid JSON whose
    string no UTF-8 encoder takes."""
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        text = obj[field]
        obj[field] = "__TOKEN__"
        token = (json_text(text)[:-1] + escape + '"').encode("utf-8")
        return _with_token(obj, token), f"{field}: not UTF-8 (unpaired surrogate {escape}"
    return breaker


def surrogate_doc_id(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    j = _pick(obj["results"], rng)
    doc = obj["results"][j]["doc_id"]
    obj["results"][j]["doc_id"] = "__TOKEN__"
    token = (json_text(doc)[:-1] + '\\udc00"').encode("utf-8")
    return _with_token(obj, token), f"results[{j}].doc_id: not UTF-8 (unpaired surrogate \\udc00"


def utf16(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    return encode(obj).decode("utf-8").encode("utf-16"), "not UTF-8"


def overlong(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    """The query's first character replaced by ``/`` in a two-byte (overlong) encoding, never valid UTF-8."""
    raw, query = encode(obj), obj["query"].encode("utf-8")
    return raw.replace(query, b"\xc0\xaf" + query, 1), "not UTF-8"


def bom(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    return b"\xef\xbb\xbf" + encode(obj), "invalid JSON: Unexpected UTF-8 BOM"


def raw(value: bytes, expected: str) -> Breaker:
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        return value, expected
    return breaker


def concatenated(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    return encode(obj) * 2, "invalid JSON: Extra data"


def trailing_brace(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    return encode(obj) + b"}", "invalid JSON: Extra data"


def deeply_nested(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    depth = int(rng.integers(2_000, 20_000))
    obj["extra"] = "__TOKEN__"
    return _with_token(obj, b"[" * depth + b"]" * depth), "invalid JSON: nested too deeply"


def long_text(field: str, limit: int, low: int, high: int, char: str = "x") -> Breaker:
    """A string field ``low..high`` characters long (``char`` repeated), over its ``limit``."""
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        obj[field] = char * int(rng.integers(low, high))
        return encode(obj), f"{field}: longer than {limit} characters ({len(obj[field])})"
    return breaker


def future_schema(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    version = int(rng.integers(3, 1000))
    obj["schema"] = version
    return encode(obj), f"schema: unknown schema version {version}"


def result_item_string(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    j = _pick(obj["results"], rng)
    obj["results"][j] = obj["results"][j]["doc_id"]
    return encode(obj), f"results[{j}]: expected an object"


def grade_item_string(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    j = _pick(obj["grades"], rng)
    obj["grades"][j] = obj["grades"][j]["grade"]
    return encode(obj), f"grades[{j}]: expected an object"


def grades_object(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    obj["grades"] = {item["doc_id"]: item["grade"] for item in obj["grades"]}
    return encode(obj), "grades: expected a non-empty list"


def huge_position(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    j = _pick(obj["results"], rng)
    obj["results"][j]["position"] = 10**30
    return encode(obj), f"results: positions must be 1..{len(obj['results'])}; missing"


def far_too_many_results(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    n = int(rng.integers(1_000, 3_000))
    base = obj["results"][0]["doc_id"]
    obj["results"] = [{"doc_id": f"{base}-{i}", "position": i} for i in range(1, n + 1)]
    return encode(obj), f"results: {n} results, more than the limit of 200"


# annotations ---------------------------------------------------------------------------------------------

def batch_grade(value: Any, reason: str) -> Breaker:
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        j = _pick(obj["grades"], rng)
        obj["grades"][j]["grade"] = value
        return encode(obj), f"grades[{j}].grade: {reason}"
    return breaker


def batch_long_doc(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    j = _pick(obj["grades"], rng)
    obj["grades"][j]["doc_id"] = long_id(300)
    return encode(obj), f"grades[{j}].doc_id: longer than 256 characters"


def too_many_grades(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    n = int(rng.integers(1001, 1100))
    obj["grades"] = [{"doc_id": f"d-x-{i}", "grade": "低"} for i in range(n)]
    return encode(obj), f"grades: {n} grades, more than the limit of 1000"


def both_targets(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    obj["query"] = "蓝牙耳机"
    return encode(obj), "session_id: an annotation needs exactly one of session_id and query"


def single_and_batch(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    obj["grades"] = [{"doc_id": obj["doc_id"], "grade": obj["grade"]}]
    return encode(obj), "grades: give either doc_id and grade, or grades, not both"


# shadow lists (an impression's ``shadow``: docs/events.md) -------------------------------------------------

def _shadow_list(obj: dict[str, Any], i: int) -> dict[str, Any]:
    """A valid shadow list of the impression ``obj``: its documents rotated by one place (positions in
    order, as the breakers of results expect), under another ranker."""
    results = copy.deepcopy(obj["results"])
    docs = [r["doc_id"] for r in results]
    for result, doc in zip(results, docs[1:] + docs[:1], strict=True):
        result["doc_id"] = doc
    return {"ranker": f"{obj['ranker']}-shadow-{i}", "results": results}


def in_shadow(breaker: Breaker, lists: int = 1) -> Breaker:
    """``lists`` valid shadow lists, the last one broken by ``breaker`` (a breaker of an impression's
    ranker or results, applied to the list): the error is the breaker's, under ``shadow[<last>].``."""
    def shadow_breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        shadow = [_shadow_list(obj, i) for i in range(lists)]
        _, expected = breaker(shadow[-1], rng)
        obj["shadow"] = shadow
        return encode(obj), f"shadow[{lists - 1}].{expected}"
    return shadow_breaker


def too_many_shadow_lists(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    n = int(rng.integers(5, 9))
    obj["shadow"] = [_shadow_list(obj, i) for i in range(n)]
    return encode(obj), f"shadow: {n} shadow lists, more than the limit of 4"


def shadow_of_own_ranker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    obj["shadow"] = [_shadow_list(obj, 0), {**_shadow_list(obj, 1), "ranker": obj["ranker"]}]
    return encode(obj), f"shadow[1].ranker: {obj['ranker']!r} is the impression's own ranker"


def repeated_shadow_ranker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    obj["shadow"] = [_shadow_list(obj, 0), _shadow_list(obj, 0)]
    return encode(obj), f"shadow[1].ranker: {obj['shadow'][0]['ranker']!r} is an earlier shadow list's"
