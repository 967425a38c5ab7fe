"""Issue 29, items 1-5 and 10: replay as strict as the worker. Every line the worker dead-letters is a
dead letter in ``monitor replay`` too, with its reason and its line (never a traceback), the valid
events give the numbers they give alone, the clock rules hold for every event with a ``ts``, a
byte-order mark is read past, and impressions of an undeclared variant are named in the summary."""

from __future__ import annotations

import functools
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from monitor.core.canary import CanaryConfig, comparisons
from monitor.core.events import Deploy
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.routing import route
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.counters import DEAD_LETTER
from monitor.demo import replay_cli
from monitor.demo.dead_letters import DeadLetterLog
from monitor.demo.verdict_rows import NoJudge
from monitor.sim import SimConfig, simulate
from monitor.store.memory import MemoryPipeline

START = 1_763_712_000  # the simulator's start, 2025-11-21T08:00:00Z
DEEP = 10_000


def impression(sid: str, ts: object, **extra: object) -> bytes:
    body = {"type": "impression", "session_id": sid, "query": "q-bad", "ranker": "ranker-a", "ts": ts,
            "results": [{"doc_id": "d-bad", "position": 1}], **extra}
    return json.dumps(body).encode()


@functools.lru_cache(maxsize=1)
def clean_lines() -> tuple[bytes, ...]:
    """A small realistic stream: 150 simulated sessions with their labels and a canary deploy."""
    events = simulate(SimConfig(seed=29, n_sessions=150, duration_s=3600, invalid_rate=0.0)).events
    return tuple(e.value for e in events if e.expected_error is None)


REAL = json.loads(next(line for line in clean_lines() if b'"impression"' in line))
SID, DOC = REAL["session_id"].encode(), REAL["results"][0]["doc_id"].encode()  # the first session, its first document


# each kind of line the worker dead-letters, and the code it gets
BAD: dict[str, tuple[bytes, str]] = {
    "deep_field": (b'{"type":"impression","session_id":"s-deep","x":' + b"[" * DEEP + b"]" * DEEP + b"}",
                   "invalid_json"),
    "lone_surrogate": (impression("\\ud800", START).replace(b"\\\\ud800", b"\\ud800"), "invalid_utf8"),
    "long_position": (impression("s-pos", START).replace(b'"position": 1', b'"position": ' + b"9" * 5000),
                      "invalid_json"),
    "long_ts": (impression("s-ts", 0).replace(b'"ts": 0', b'"ts": ' + b"1" * 4400), "invalid_json"),
    "long_grade": (b'{"type":"annotation","session_id":"' + SID + b'","doc_id":"' + DOC + b'","grade":'
                   + b"2" * 4400 + b"}", "invalid_json"),
    "annotation_1e300": (b'{"type":"annotation","session_id":"' + SID + b'","doc_id":"' + DOC
                         + b'","grade":"\xe9\xab\x98","ts":1e300}', "ts_out_of_range"),
    "deploy_in_1970": (b'{"type":"deploy","kind":"deploy","ranker":"ranker-z","ts":5}', "ts_out_of_range"),
    "ts_zero": (impression("s-zero", 0), "ts_out_of_range"),
    "year_1": (impression("s-year1", "0001-01-01T00:00:00Z"), "invalid_value"),
    "before_1970": (impression("s-1969", "1969-12-31T23:59:59Z"), "invalid_value"),
    "nan": (impression("s-nan", START).replace(b'"position": 1', b'"position": 1, "score": NaN'),
            "invalid_json"),
    "not_utf8": (impression("s-utf8", START).replace(b"q-bad", b"q-\xff"), "invalid_utf8"),
    "missing_results": (b'{"type":"impression","session_id":"s-m","query":"q","ranker":"r","ts":1763712000}',
                        "missing_field"),
}


def replay(lines: list[bytes], tmp: Path, name: str) -> tuple[dict[str, Any], MemoryPipeline, DeadLetterLog]:
    path = tmp / name
    path.write_bytes(b"\n".join(lines) + b"\n")
    log = DeadLetterLog(str(path))
    engine, interrupted, wall = replay_cli.replay(path, NoJudge(), io.StringIO(), progress=False,
                                                  dead_letters=log)  # the verdicts: once, in numbers()
    from monitor.demo.summary import build_summary

    assert not interrupted
    return build_summary(engine, "replay", wall), engine.pipeline, log


NUMBERS = ("sessions", "judgments", "event_time", "points", "groups", "undeclared")


def numbers(summary: dict[str, Any], pipeline: MemoryPipeline) -> dict[str, Any]:
    """Every number of the summary and every gauge and counter but the dead letters, and the canary's
    verdicts at the end (judged once: at each sample point they would cost seconds per replay)."""
    snapshot = pipeline.snapshot()
    counters = {f"{c.name}|{c.group}|{c.label}": v for c, v in snapshot.counters.items()
                if v and c.name != DEAD_LETTER}
    deploys = [d for d in pipeline.deploys if isinstance(d, Deploy)]
    verdicts = [repr(c) for c in comparisons(pipeline.history(), deploys, CanaryConfig())]
    return {**{k: summary[k] for k in NUMBERS}, "verdicts": verdicts, "counters": counters,
            "windows": {"|".join(k): dict(v) for k, v in snapshot.windows.items()},
            "totals": {k: dict(v) for k, v in snapshot.totals().items()}}


@functools.lru_cache(maxsize=1)
def clean_numbers() -> str:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        summary, pipeline, log = replay(list(clean_lines()), Path(tmp), "clean.jsonl")
    assert log.count == 0 and summary["sessions"]["scored"] > 50 and summary["judgments"]["received"] > 100
    assert any("canary" in verdict for verdict in numbers(summary, pipeline)["verdicts"])
    return json.dumps(numbers(summary, pipeline), sort_keys=True)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])  # no shrinking: each example is a replay
@given(corruptions=st.lists(st.tuples(st.sampled_from(sorted(BAD)), st.floats(0.0, 1.0)), min_size=1,
                            max_size=5),
       bom=st.booleans())
def test_corrupted_lines_are_dead_letters_and_every_number_is_unchanged(
        tmp_path: Path, corruptions: list[tuple[str, float]], bom: bool) -> None:
    """Bad lines inserted anywhere in a realistic stream (a byte-order mark before it, or not): each is
    the worker's dead letter with its code and its line, and the valid events' numbers are those of the
    clean stream, every summary number, gauge and counter."""
    lines = list(clean_lines())
    for kind, where in corruptions:
        lines.insert(round(where * len(lines)), BAD[kind][0])
    expected = [(number, BAD[kind][1]) for number, line in enumerate(lines, start=1)
                for kind, (bad, _) in BAD.items() if line == bad]
    if bom:
        lines[0] = b"\xef\xbb\xbf" + lines[0]
    summary, pipeline, log = replay(lines, tmp_path, "dirty.jsonl")
    assert json.dumps(numbers(summary, pipeline), sort_keys=True) == clean_numbers()
    assert log.count == len(corruptions) == len(expected)
    assert sum(summary["dead_letters"].values()) == len(corruptions)
    found = [(int(line.split(":")[1]), line.split(": ")[1]) for line in log.first]
    assert found == expected[:len(found)]


def test_every_bad_kind_through_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``monitor replay --dead-letters FILE``: exit 0, each bad line's FILE:LINE in the summary (the first
    five) and all of them in the file, with the worker's header names and the line itself."""
    good = list(clean_lines())[:200]
    lines = [good[0], *(bad for bad, _ in BAD.values()), *good[1:]]
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    letters = tmp_path / "dead.jsonl"
    assert replay_cli.main([str(path), "--dead-letters", str(letters)]) == 0
    out = capsys.readouterr().out
    assert "Traceback" not in out
    codes = [code for _, code in BAD.values()]
    written = [json.loads(line) for line in letters.read_text().splitlines()]
    assert [(d["source.line"], d["error.code"]) for d in written] == list(enumerate(codes, start=2))
    assert all(d["source.file"] == str(path) for d in written)
    assert written[0]["value"] == BAD["deep_field"][0].decode() and "value_base64" in written[-2]
    assert f"  {path}:2: invalid_json: invalid JSON: nested too deeply" in out
    assert f"  {path}:3: invalid_utf8: session_id: not UTF-8 (unpaired surrogate \\ud800" in out
    assert f"  {path}:4: invalid_json: invalid JSON: a number of more than 4,300 digits" in out
    assert f"  {path}:7: " not in out and f"every one with its line in {letters}" in out


@pytest.mark.parametrize(("line", "reason"), [
    (b"[" * 100_000, "not a JSON event (nested too deeply)"),
    (b'{"type":"impression","session_id":', "not a JSON event (Expecting value at column 35)"),
    (b'{"type":"impression"} {"x":1}', "not a JSON event (Extra data"),
    (b'{"type":"click","x":' + b"[" * DEEP + b"]" * DEEP + b"}", "unknown event type 'click'"),
    (b'{"session_id":"\\ud800"}', "unknown event type None"),
    (b"1" * 5000, "not a JSON event (a number of too many digits)"),
])
def test_a_line_that_is_not_an_event_stops_the_replay_with_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], line: bytes, reason: str) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join([clean_lines()[0], line]) + b"\n")
    assert replay_cli.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert f"monitor replay: error: {path}:2: {reason}" in err and "Traceback" not in err


@pytest.mark.parametrize("kind", sorted(BAD))
def test_route_takes_every_bad_kind_to_its_topic(kind: str) -> None:
    topic, _ = route(BAD[kind][0])
    assert topic == ("annotations" if b'"annotation"' in BAD[kind][0] else
                     "deploys" if b'"deploy"' in BAD[kind][0] else "impressions")


def test_route_reads_keys_as_the_producer_set_them() -> None:
    assert route(b'{"type":"annotation","query":"q","session_id":null}') == ("annotations", b"q")
    assert route(b'{"type":"impression","session_id":"\\ud800"}') == ("impressions", "\ud800".encode(
        "utf-8", "surrogatepass"))
    assert route(b'{"type":"deploy","type":"annotation","session_id":"s"}') == ("annotations", b"s")  # last
    assert route(b'  {"ranker":"r","type":"deploy","x":{"a":"}\\""}}  ') == ("deploys", b"r")


def test_one_annotation_dated_1e300_pins_no_grade() -> None:
    """A later real correction still wins: the 1e300 annotation is a dead letter ts_out_of_range."""
    def run(extra: list[bytes]) -> MemoryPipeline:
        pipeline = MemoryPipeline(StreamConfig(), FOUR_LEVEL_SCALE, clock=lambda: START + 86400.0)
        for value in [impression("s-1", START), *extra,
                      b'{"type":"annotation","session_id":"s-1","doc_id":"d-bad","grade":"\xe6\x97\xa0",'
                      b'"ts":1763712100}']:
            pipeline.submit("annotations" if b'"annotation"' in value else "impressions", b"s-1", value)
        pipeline.advance(math.inf)
        return pipeline

    pinned = b'{"type":"annotation","session_id":"s-1","doc_id":"d-bad","grade":"\xe9\xab\x98","ts":1e300}'
    clean, dirty = run([]), run([pinned])
    assert dirty.counter("dead_letter", label="ts_out_of_range") == 1
    assert dirty.snapshot().totals() == clean.snapshot().totals()
    (_, stats), = clean.snapshot().totals().items()
    assert stats["dcg"] == 0.0  # the correction to 无 won


@pytest.mark.parametrize("first", [b"0", b'"0001-01-01T00:00:00Z"', b'"1969-12-31T23:59:59Z"', b"946684799"])
def test_a_first_line_with_an_ancient_time_is_a_dead_letter_and_the_start_is_the_earliest_event(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], first: bytes) -> None:
    lines = [impression("s-old", 0).replace(b'"ts": 0', b'"ts": ' + first),
             impression("s-b", START + 600), impression("s-a", START)]  # not in time order
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert replay_cli.main([str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert sum(summary["dead_letters"].values()) == 1
    assert summary["dead_letter_lines"][0].startswith(f"{path}:1: ")
    assert summary["event_time"]["start"] == "2025-11-21T08:00:00Z" and summary["event_time"]["hours"] == 0.167


def test_a_byte_order_mark_is_read_past(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + impression("s-a", START) + b"\n")
    assert replay_cli.main([str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["dead_letters"] == {} and summary["sessions"]["impressions"] == 1


def test_undeclared_variants_are_named_in_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = [impression("s-a", START), impression("s-b", START, variant="exp-7"),
             impression("s-c", START, variant="exp-7"), impression("s-d", START, variant="beta")]
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert replay_cli.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert ("2 impressions of undeclared variant 'exp-7': never sampled, in no group (counted as other); "
            "declared: control, canary ([stream] variants; docs/events.md)") in out
    assert "1 impression of undeclared variant 'beta'" in out
    assert replay_cli.main([str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["undeclared"]
    assert [(r["reason"], r["value"], r["impressions"]) for r in rows] == [("variant", "exp-7", 2),
                                                                           ("variant", "beta", 1)]


def test_a_replay_without_undeclared_impressions_says_nothing_of_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(impression("s-a", START) + b"\n")
    assert replay_cli.main([str(path)]) == 0
    assert "undeclared" not in capsys.readouterr().out
