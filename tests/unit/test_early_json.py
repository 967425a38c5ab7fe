"""A session's early labels as stored in Redis (monitor/store/scripts.py): read back as written, and
JSON that json (and the Lua scripts' cjson) reads alike, whichever encoder wrote it."""

from __future__ import annotations

import json
import math

import pytest

from monitor.store.scripts import early_json, parse_early


@pytest.mark.parametrize(("labels", "stamps"), [
    ({"d1": 3, "d2": 0}, {}),
    ({"d1": 3, "é \\\"x\\u2028": 1}, {"d1": 1700000000.25, "é \\\"x\\u2028": 0.1 + 0.2}),
    ({}, {}),
    ({"d": 2}, {"d": 1e-300}),
])
def test_early_labels_read_back_as_written_and_as_json_reads_them(labels: dict[str, int],
                                                                  stamps: dict[str, float]) -> None:
    stored = early_json(labels, stamps)
    assert parse_early(stored) == (labels, stamps)
    assert json.loads(stored) == ([labels, stamps] if stamps else labels)
    assert parse_early(json.dumps([labels, stamps] if stamps else labels)) == (labels, stamps)  # (older)


def test_a_non_finite_ts_is_written_as_json_writes_it_and_read_back() -> None:
    stored = early_json({"d": 1}, {"d": math.inf})
    assert b"Infinity" in stored
    assert parse_early(stored) == ({"d": 1}, {"d": math.inf})
