"""A deploy without a canary, end to end on the real stack, in traffic whose query mix follows the clock.

Kafka, Redis, a real ``monitor worker`` that alerts the real Alertmanager directly
(``MONITOR_ALERTMANAGER_URL``, verdicts checked every second), and ``monitor canary``, as in
``test_canary_e2e.py``. The traffic (``monitor/sim``, ``night_dip``): every bucket's mean DCG@k follows
mean × (1 − 0.08 cos(2π (t − 03:00 UTC) / 24 h)), the same ranker 8% worse at 03:00 than over the day, with
the same volume at every hour. 26.5 hours of the old ranker (from 00:00 UTC), then, at 02:30 UTC on the second
day, a ``deploy`` event and the new ranker serving all traffic for 4 hours (plain impressions, no canary).
A comparison of those night hours with the whole day before sees the new ranker ≈ 7% worse before it does
anything: what a deploy comparison that ignores the clock false-alarms on.

What it must show:

* with no change in the ranker, nothing fires: Alertmanager never holds an alert about the new ranker
  (polled every quarter second while the worker consumes the stream and after), and
  ``monitor canary --candidate <new> --json`` shows no regression, with enough sessions to have judged;
* with a real 10% DCG drop of the new ranker in the tail, the tail alerts
  (``SearchRelevanceDeployRegression``, DCG and PNR: the broken lists invert the order, so tail PNR drops
  ≈ 30%) fire, nothing else does, and they stay firing while the rest of the stream is consumed (every poll
  from the first that shows an alert holds it, active, with the same ``startsAt``: never resolved and
  re-fired), until a rollback (``POST /deploys``) resolves them.

Volume: 0.23 sessions per second (≈ 25,000 sessions, 51,000 messages), 60% tail, every session labelled
in one batch, so the 4 hours after the deploy hold ≈ 2,000 tail sessions; a 10% tail DCG drop is a
regression ≈ 1.5 hours after the deploy (in process, ``MemoryPipeline``, seed 4). Each test uses ranker
names of its own, so concurrent runs against one Alertmanager do not see each other's alerts.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor.core.canary.alerts import ALERTNAMES
from monitor.sim import SimConfig, SimEvent, SimResult, dcg_of_levels, simulate
from monitor.sim.config import DEFAULT_START_TS
from tests.support.canary_e2e import ALERT_INTERVAL, CONFIG_TOML, JOIN_WINDOW
from tests.support.http_helpers import eventually, http_json
from tests.support.worker_harness import Group, Stream, Worker, flush_events, parse_metrics

pytestmark = pytest.mark.integration

HOUR = 3600.0
MIDNIGHT = DEFAULT_START_TS - 8 * HOUR  # 2025-11-21T00:00:00Z
BEFORE_H, AFTER_H = 26.5, 4.0  # the deploy at 02:30 UTC on 2025-11-22, 26.5 h of the old ranker before it
TRAFFIC = SimConfig(seed=4, sessions_per_second=0.23, duration_s=(BEFORE_H + AFTER_H) * HOUR, start_ts=MIDNIGHT,
                    deploy_at=BEFORE_H / (BEFORE_H + AFTER_H), night_dip=0.08, bucket_hint_share=1.0,
                    head_share=0.2, torso_share=0.2, tail_share=0.6, label_share=1.0, batch_share=1.0,
                    correction_prob=0.0, regression_bucket="tail")
BUCKET_METRICS = {(b, m) for b in ("head", "torso", "tail") for m in ("dcg", "pnr")}
TAIL = {("tail", "dcg"), ("tail", "pnr")}


@dataclass
class Watcher:
    """Polls Alertmanager's active alerts about one ranker every ``every`` seconds in a thread; each poll is
    (monotonic time, {(bucket, metric): (alertname, startsAt, state)})."""

    url: str
    ranker: str
    every: float = 0.25
    polls: list[tuple[float, dict[tuple[str, str], tuple[str, str, str]]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def alerts(self) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"filter": f'ranker="{self.ranker}"'})
        return list(http_json(f"{self.url}/api/v2/alerts?{query}"))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                seen = {(a["labels"]["bucket"], a["labels"]["metric"]):
                        (a["labels"]["alertname"], a["startsAt"], a["status"]["state"]) for a in self.alerts()}
                self.polls.append((time.monotonic(), seen))
            except Exception as error:  # a failed poll is reported by the test, not raised here
                self.errors.append(repr(error))
            self._stop.wait(self.every)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def ever_seen(self) -> set[tuple[str, str]]:
        return {key for _, seen in self.polls for key in seen}

    def history_of(self, key: tuple[str, str]) -> str:
        """When alert ``key`` was held, poll by poll (first and last poll, how many, each state seen): what
        a failure needs to tell a transient flash from a verdict that held."""
        held = [(i, at, seen[key]) for i, (at, seen) in enumerate(self.polls) if key in seen]
        if not held:
            return f"{key}: never held"
        start = self.polls[0][0]
        return (f"{key}: held in {len(held)} of {len(self.polls)} polls, from poll {held[0][0]} "
                f"(+{held[0][1] - start:.1f} s) to poll {held[-1][0]} (+{held[-1][1] - start:.1f} s); "
                f"states {sorted({state for _, _, state in held})}")


@dataclass
class Deploy:
    group: Group
    worker: Worker
    watcher: Watcher
    old: str
    new: str
    result: SimResult
    stream: Stream
    flush: list[SimEvent]

    @property
    def deploy_ts(self) -> float:
        ts = self.result.config.deploy_ts
        assert ts is not None
        return ts

    def send(self, events: list[SimEvent]) -> None:
        assert self.stream.send(events) == len(events)

    def verdicts(self) -> tuple[int, list[dict[str, Any]]]:
        """``monitor canary --candidate <new> --json``: exit status and rows."""
        done = self.group.cli("canary", "--candidate", self.new, "--json")
        assert done.returncode in (0, 1, 2), done.stderr
        return done.returncode, json.loads(done.stdout) if done.stdout.strip() else []

    def deploy_series(self) -> dict[tuple[str, str], float]:
        """The exported deploy verdicts of the new ranker, by (bucket, metric)."""
        samples = parse_metrics(self.worker.metrics_text())
        return {(dict(labels)["bucket"], dict(labels)["metric"]): value for (name, labels), value in samples.items()
                if name == "search_relevance_canary_verdict" and dict(labels)["candidate"] == self.new
                and dict(labels)["kind"] == "deploy"}


@pytest.fixture
def run_deploy(kafka_bootstrap: str, redis_url: str, alertmanager_url: str,
               tmp_path: Path) -> Iterator[Any]:
    made: list[Deploy] = []

    def run(regression: float) -> Deploy:
        tag = uuid.uuid4().hex[:10]
        old, new = f"old-{tag}", f"new-{tag}"
        result = simulate(replace(TRAFFIC, regression=regression, control_ranker=old, canary_ranker=new,
                                  id_prefix=f"s{tag}"))
        stream = Stream(kafka_bootstrap)
        flush = flush_events(stream, max(e.ts for e in result.events) + JOIN_WINDOW + 1, prefix=f"flush{tag}")
        group = Group(stream, redis_url, tmp_path, f"deploy-{tag}", CONFIG_TOML, extra_env={
            "MONITOR_ALERTMANAGER_URL": alertmanager_url, "MONITOR_ALERT_INTERVAL": str(ALERT_INTERVAL)})
        watcher = Watcher(alertmanager_url, new)
        stream.send([])  # the topics, before the worker subscribes
        worker = group.start()
        watcher.start()
        made.append(Deploy(group, worker, watcher, old, new, result, stream, flush))
        return made[-1]

    yield run
    for d in made:
        d.watcher.stop()
        assert d.group.restarts_seen() == []
        d.group.stop()


def session_dcg(levels: tuple[int, ...], bucket: str) -> float:
    return dcg_of_levels(np.asarray(levels, dtype=np.int64), 40 if bucket == "head" else 20)


def naive_change(d: Deploy, bucket: str) -> float:
    """The new ranker's mean DCG@k over the sessions after the deploy against the old one's over the day
    before it, from the simulator's truth: the change a comparison that ignores the clock sees."""
    after = [session_dcg(s.levels, bucket) for s in d.result.sessions.values()
             if s.bucket == bucket and s.ts >= d.deploy_ts]
    before = [session_dcg(s.levels, bucket) for s in d.result.sessions.values()
              if s.bucket == bucket and d.deploy_ts - 24 * HOUR <= s.ts < d.deploy_ts]
    return float(np.mean(after) / np.mean(before) - 1.0)


def held_from_first(polls: list[tuple[float, dict[tuple[str, str], tuple[str, str, str]]]], key: tuple[str, str]
                    ) -> set[tuple[str, str, str] | None]:
    """The states (alertname, startsAt, state; None: absent) of alert ``key`` in the polls from the first
    that shows it on: one state if it held throughout."""
    held = [seen.get(key) for _, seen in polls]
    first = next(i for i, state in enumerate(held) if state is not None)
    return set(held[first:])


def describe(rows: list[dict[str, Any]]) -> str:
    """The rows of ``monitor canary --json``, one line each."""
    def pct(x: float | None) -> str:
        return "—" if x is None else f"{x:+.1%}"

    return "\n".join(f"  {r['bucket']:5} {r['metric']} {r['verdict']:12} {pct(r['estimate']):>7} "
                     f"[{pct(r['lower'])}, {pct(r['upper'])}] sessions {r['n_baseline']}/{r['n_candidate']}"
                     for r in rows)


def test_a_night_deploy_without_a_change_fires_nothing(run_deploy: Any) -> None:
    started = time.monotonic()
    d: Deploy = run_deploy(0.0)
    # the stream does follow the clock: against the whole day before, the unchanged ranker looks worse
    naive = {b: naive_change(d, b) for b in ("head", "torso", "tail")}
    assert naive["head"] < -0.04 and sum(naive.values()) / 3 < -0.04, naive
    d.send([*d.result.events, *d.flush])
    d.group.drain()
    time.sleep(5 * ALERT_INTERVAL + 1)  # several verdict rounds after the whole stream
    d.watcher.stop()
    status, rows = d.verdicts()
    print("\nnaive change (truth, the day before against after): "
          + ", ".join(f"{b} {v:+.1%}" for b, v in naive.items())
          + f"; {time.monotonic() - started:.0f} s; monitor canary (exit {status}):\n{describe(rows)}")

    assert d.watcher.errors == []
    assert len(d.watcher.polls) > 40  # Alertmanager was watched throughout
    fired = d.watcher.ever_seen()
    assert fired == set(), (f"alerts about the unchanged ranker: {sorted(fired)}\n"  # not for a moment
                            + "\n".join(d.watcher.history_of(key) for key in sorted(fired)) + f"\n{describe(rows)}")
    assert d.watcher.alerts() == []

    assert {(r["bucket"], r["metric"]) for r in rows} == BUCKET_METRICS, rows
    assert all(r["kind"] == "deploy" and r["baseline"] == d.old for r in rows), rows
    assert all(r["verdict"] != "regression" for r in rows), describe(rows)
    assert status == 0, rows
    for row in rows:
        assert min(row["n_baseline"], row["n_candidate"]) >= 200, row  # judged, not just too few
    tail = next(r for r in rows if (r["bucket"], r["metric"]) == ("tail", "dcg"))
    assert tail["n_candidate"] > 1000 and abs(tail["estimate"]) < 0.03, tail
    verdicts = d.deploy_series()
    assert set(verdicts) == BUCKET_METRICS and -1 not in verdicts.values(), verdicts


def test_a_real_tail_drop_fires_and_stays_firing_until_a_rollback(run_deploy: Any) -> None:
    started = time.monotonic()
    d: Deploy = run_deploy(0.10)
    events = d.result.events
    first = [e for e in events if e.ts < d.deploy_ts + 2 * HOUR]
    rest = events[len(first):]
    assert events[:len(first)] == first and rest

    # two hours after the deploy: the tail DCG alert fires
    d.send(first)

    def tail_dcg_fired() -> bool:
        """the tail DCG deploy alert fired"""
        return ("tail", "dcg") in {(a["labels"]["bucket"], a["labels"]["metric"]) for a in d.watcher.alerts()}

    eventually(tail_dcg_fired, seconds=300)  # a bound for a hung worker, not a speed budget (benchmarks measure speed)
    fired_at = time.monotonic()

    # the rest of the stream, a quarter of an hour of event time at a time, while the worker keeps deciding
    step = HOUR / 4
    edge = d.deploy_ts + 2 * HOUR + step
    while rest:
        chunk = [e for e in rest if e.ts < edge]
        rest = rest[len(chunk):]
        d.send(chunk)
        time.sleep(3 * ALERT_INTERVAL)
        edge += step
    d.send(d.flush)
    d.group.drain()
    time.sleep(5 * ALERT_INTERVAL + 1)
    consumed_at = time.monotonic()

    # the final verdicts: the tail regression, nothing else
    status, rows = d.verdicts()
    assert status == 1, rows
    assert {(r["bucket"], r["metric"]) for r in rows} == BUCKET_METRICS, rows
    assert all(r["kind"] == "deploy" and r["baseline"] == d.old for r in rows), rows
    by = {(r["bucket"], r["metric"]): r for r in rows}
    assert {key for key, r in by.items() if r["verdict"] == "regression"} == TAIL, describe(rows)
    tail = by[("tail", "dcg")]
    assert -0.15 < tail["estimate"] < -0.06 and tail["upper"] < 0, tail  # 10% injected
    alerts = d.watcher.alerts()
    assert {(a["labels"]["bucket"], a["labels"]["metric"]) for a in alerts} == TAIL
    for alert in alerts:
        assert alert["labels"]["alertname"] == ALERTNAMES["deploy"]
        assert alert["labels"]["severity"] == "warning" and alert["labels"]["baseline"] == d.old
        assert alert["status"]["state"] == "active"

    # a rollback resolves them
    rolled_back = max(time.time(), max(e.ts for e in events) + 60)
    asked = time.monotonic()
    answer = d.worker.request("/deploys", json.dumps({"type": "deploy", "kind": "rollback", "ranker": d.new,
                                                      "ts": rolled_back}).encode(),
                              {"Content-Type": "application/json"}, method="POST")
    assert answer.status == 202, answer

    def resolved() -> bool:
        """the rollback resolved the alerts (they left Alertmanager's active list)"""
        return d.watcher.alerts() == []

    eventually(resolved, seconds=30)
    d.watcher.stop()
    assert d.watcher.errors == []

    # from its first appearance to the rollback, each tail alert was in every poll, active, with the same
    # startsAt: it never resolved (and so never re-fired) in between; head and torso never fired at all
    assert d.watcher.ever_seen() == TAIL, d.watcher.ever_seen()
    polls = [(t, seen) for t, seen in d.watcher.polls if t < asked]
    assert sum(1 for t, _ in polls if t > fired_at) > 60  # watched through the rest of the stream
    for key in sorted(TAIL):
        states = held_from_first(polls, key)
        assert None not in states, (key, "missing from a poll after it fired", states)
        assert len(states) == 1, (key, "changed after it fired", states)  # one startsAt, active throughout
        (name, _starts_at, state), = states
        assert (name, state) == (ALERTNAMES["deploy"], "active")
    print(f"\ntail alerts fired {fired_at - started:.0f} s in, held through the rest of the stream "
          f"({consumed_at - fired_at:.0f} s, {len(polls)} polls), resolved "
          f"{time.monotonic() - asked:.1f} s after the rollback; tail DCG {tail['estimate']:+.1%} "
          f"[{tail['lower']:+.1%}, {tail['upper']:+.1%}], naive (truth) {naive_change(d, 'tail'):+.1%}")
