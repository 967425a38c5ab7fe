"""Issue 29, item 6: ``monitor replay --partitions 4`` gives the worker's numbers for the same events at the
default budget, a budget that binds in every bucket.

``monitor produce --write-events`` sends 8,000 simulated sessions in half an hour of event time (the first
half of one budget period: head, torso and tail each have more than twice the 1,004 sessions the default
budget, 2,000 an hour paced over the hour, samples in it over 4 partitions) to
fresh topics of 4 partitions and writes what it sends; a flush (one later impression per partition, so
every session closes) is sent and appended to the file. One worker drains the topics with the default
``[stream]`` settings but for ``max_closes_per_step`` (above the stream's size: how many steps follow the
flush depends on the interleaving, see tests/support/worker_e2e.py); ``monitor replay --config`` with the
worker's settings file and ``--partitions 4`` serves the same events' ``/metrics``.

Compared to 1e-9: every gauge and counter both export (windows, canary verdicts and their statistics,
impressions, sampled, scored, top-k judgments, undeclared impressions, the net statistics), but the
worker's own pipeline series and what records how the topics interleaved (join lag; expired, rescored,
corrections, stale labels, judgments requested and received: a label after its session's close counts an
expiry and a re-score, before neither; a grade shared from another partition before an impression is not
requested), each listed below. Replay with one partition samples other sessions.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from monitor.core.stream.config import StreamConfig, stream_toml
from monitor.core.stream.partition import partition_for
from monitor.sim import SimEvent
from tests.support.worker_harness import Group, Samples, Stream, parse_metrics

pytestmark = pytest.mark.integration

CONFIG = StreamConfig(max_closes_per_step=1_000_000)  # the default budget: 2,000 sessions per bucket an hour
SESSIONS = 8000
PARTITIONS = 4
WORKER_ONLY = {"search_relevance_events_total", "search_relevance_consumer_lag",
               "search_relevance_waiting_sessions", "search_relevance_redis_memory_bytes",
               "search_relevance_redis_retries_total", "search_relevance_rollup_timestamp_seconds",
               "search_relevance_rollup_age_seconds", "search_relevance_rollup_duration_seconds",
               "search_relevance_rollup_exporter", "search_relevance_rollups_computed_total",
               "search_relevance_label_waits_total", "search_relevance_processing_retries_total",
               "search_relevance_quiet_closes_total", "search_relevance_worker_cpu_seconds_total"}
"""The worker's pipeline: its consumer, Redis, rollup and CPU (docs/metrics.md), not the stream's numbers."""
INTERLEAVING = {"search_relevance_join_lag_seconds", "search_relevance_expired_total",
                "search_relevance_rescored_total", "search_relevance_corrections_total",
                "search_relevance_stale_labels_total", "search_relevance_judgments_requested_total",
                "search_relevance_judgments_received_total", "search_relevance_shadow_scored_total"}
"""What records how the topics interleaved (docs/metrics.md, "Replay and the worker"); of the statistics
added and taken back (``stat_added_total``, ``stat_removed_total``) the net is compared, join lag aside."""


def replay_metrics(events: Path, settings: Path, partitions: int) -> tuple[Samples, dict[str, object]]:
    """``monitor replay --partitions`` of ``events`` with the worker's ``settings``: its /metrics once the
    replay is over, and its JSON summary."""
    process = subprocess.Popen([sys.executable, "-m", "monitor", "replay", str(events), "--json", "--config",
                                str(settings), "--partitions", str(partitions), "--port", "0", "--hold", "600"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        url = None
        for line in process.stderr:
            if line.startswith("serving "):
                url = line.split()[1]
                break
        assert url is not None, process.stderr.read()
        with urllib.request.urlopen(url, timeout=30) as response:
            text = response.read().decode()
    finally:
        process.send_signal(signal.SIGINT)  # ends the hold
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    return parse_metrics(text), json.loads(out)


def undeclared_flush(ts: float) -> list[SimEvent]:
    """One impression per partition at ``ts``, past every deadline of the stream: each partition's sessions
    close, as later traffic would close them. Of an undeclared variant, so it is only counted (no session of
    its own waits for labels: replay closes what waits at the end of its file, the worker does not)."""
    out: list[SimEvent] = []
    n = 0
    while len(out) < PARTITIONS:
        sid = f"flush-{n}"
        n += 1
        if partition_for(sid.encode(), PARTITIONS) != len(out):
            continue
        value = json.dumps({"type": "impression", "session_id": sid, "query": "flush", "query_bucket": "head",
                            "ranker": "flush", "variant": "flush", "ts": ts,
                            "results": [{"doc_id": "flush-doc", "position": 1}]}).encode()
        out.append(SimEvent("impressions", sid.encode(), value, ts))
    return out


def compared(samples: Samples) -> Samples:
    """The series compared: every ``search_relevance_`` gauge and counter but :data:`WORKER_ONLY` and
    :data:`INTERLEAVING`, the statistics added and taken back as their net (when not 0)."""
    out: Samples = {}
    for (name, labels), value in samples.items():
        if not name.startswith("search_relevance_") or name in WORKER_ONLY | INTERLEAVING:
            continue
        if name in {"search_relevance_stat_added_total", "search_relevance_stat_removed_total"}:
            if dict(labels)["stat"] != "join_lag":
                sign = 1.0 if name.endswith("added_total") else -1.0
                out[("net", labels)] = out.get(("net", labels), 0.0) + sign * value
        else:
            out[(name, labels)] = value
    return {key: value for key, value in out.items() if key[0] != "net" or abs(value) > 1e-9}


def by_bucket(samples: Samples, name: str) -> dict[str, float]:
    """``name`` summed per bucket, the flush's sessions (in a later period) left out."""
    out: dict[str, float] = {}
    for (metric, labels), value in samples.items():
        if metric == name and dict(labels)["ranker"] != "flush":
            bucket = dict(labels)["bucket"]
            out[bucket] = out.get(bucket, 0.0) + value
    return out


def test_replay_with_the_workers_partitions_equals_the_worker_at_the_default_budget(
        kafka_bootstrap: str, redis_url: str, tmp_path: Path, group_factory: list[Group]) -> None:
    stream = Stream(kafka_bootstrap, partitions=PARTITIONS)
    group = Group(stream, redis_url, tmp_path, "replayed", stream_toml(CONFIG))
    group_factory.append(group)
    events = tmp_path / "sent.jsonl"
    start = math.floor(time.time() / 3600) * 3600 - 3 * 3600  # an hour's start: the stream in one period
    produced = group.cli("produce", "--sessions", str(SESSIONS), "--duration", "1800", "--seed", "29",
                         "--start", str(start), "--write-events", str(events), timeout=600)
    assert produced.returncode == 0, produced.stderr
    assert f"(and to {events})" in produced.stderr
    lines = events.read_bytes().splitlines()
    sessions = {json.loads(line)["session_id"] for line in lines if b'"impression"' in line}
    assert len(sessions) == SESSIONS and all(s.startswith(f"s29-{start * 1000}-") for s in sessions)
    flush = undeclared_flush(start + 1800 + CONFIG.join_window + 1)
    assert stream.send(flush) == len(flush)
    with events.open("ab") as out:
        out.write(b"".join(e.value + b"\n" for e in flush))

    worker = group.start()
    group.drain(timeout=600)
    got = parse_metrics(worker.metrics_text())
    assert group.restarts_seen() == []
    replayed, summary = replay_metrics(events, tmp_path / "replayed.toml", PARTITIONS)

    sampled, impressions = (by_bucket(got, f"search_relevance_{n}_total") for n in ("sampled", "impressions"))
    paced = PARTITIONS * (CONFIG.budget["head"] / PARTITIONS * 0.5 + 1)  # half an hour's allowance: 1,004
    for bucket in ("head", "torso", "tail"):  # the budget binds: paced, about half of 2,000 in half an hour
        assert 950 < sampled[bucket] <= paced < impressions[bucket] - 300, bucket
    want, have = compared(got), compared(replayed)
    assert set(have) == set(want), (sorted({k[0] for k in set(want) - set(have)}),
                                    sorted({k[0] for k in set(have) - set(want)}),
                                    sorted(set(want) ^ set(have))[:6])
    names = {name for name, _ in want}
    assert {"search_relevance_sampled_total", "search_relevance_scored_total", "search_relevance_dcg",
            "search_relevance_pnr", "search_relevance_sessions_expired", "search_relevance_judgments_top_k_total",
            "search_relevance_undeclared_impressions_total", "net"} <= names, sorted(names)
    assert any(name.startswith("search_relevance_canary") for name in names), sorted(names)
    wrong = {key: (value, have[key]) for key, value in want.items()
             if not (have[key] == pytest.approx(value, rel=1e-9, abs=1e-9)
                     or (math.isnan(value) and math.isnan(have[key])))}
    assert not wrong, (len(wrong), sorted({k[0] for k in wrong}), sorted(wrong.items())[:8])
    assert summary["sessions"]["sampled"] == sum(sampled.values())  # type: ignore[index]

    # one partition: the same budget, other sessions (the rule's shares and orders are per partition)
    single, _ = replay_metrics(events, tmp_path / "replayed.toml", 1)
    differ = [key for key, value in compared(single).items()
              if key[0] == "search_relevance_sampled_total" and want.get(key) != value]
    assert differ
