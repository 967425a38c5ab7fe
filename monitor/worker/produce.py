"""``monitor produce``: simulated traffic (monitor/sim) written to the worker's Kafka topics.

The traffic generator of the compose stack and of the end-to-end tests and benchmarks: impressions,
labels (late, duplicated, corrected, query-level, missing), deploys and, with ``--invalid-rate``, invalid
events, each keyed as docs/events.md says. Topic names, the bootstrap address and the Kafka security
settings (SASL, TLS) come from the same settings as the worker (``MONITOR_*``), or the options.

Session ids name the run: ``s<seed>-<start in ms>-<n>``, so runs with another seed or start (the default
start is now) never share a session. ``--write-events FILE`` also writes each event sent, in the order sent,
as one line of a JSONL file (its value's bytes, invalid ones too): the input of ``monitor replay``, which
with ``--partitions`` set to the topics' partition count gives the worker's numbers for the same events.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace

from monitor.services.found import found_services
from monitor.sim import SimConfig, generate
from monitor.sim.records import SimEvent
from monitor.worker.security import KafkaSecurity
from monitor.worker.settings import SettingsError, default_hint, load_settings, refused


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="monitor produce", description=__doc__)
    parser.add_argument("--bootstrap",
                        help="Kafka host:port (default: MONITOR_KAFKA_BOOTSTRAP, else the Kafka `monitor "
                             "services up` runs, else 127.0.0.1:9092)")
    parser.add_argument("--sessions", type=int, default=2000, help="sessions per run (default 2000)")
    parser.add_argument("--duration", type=float, default=3600.0, metavar="SECONDS",
                        help="event-time seconds a run's sessions span (default 3600), not wall time: the "
                             "messages go as fast as --rate lets them. A session closes (scored or "
                             "expired) once event time passes its impression by the join window ([stream] "
                             "join_window, default 3600 s): with a span no longer than that, a run's own "
                             "events close none of its sessions, and the worker closes them within one "
                             "join window of wall time after the run (docs/worker.md, \"Quiet "
                             "partitions\"); a longer span, or --forever, closes them as the stream goes")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="messages per second (default 0: as fast as the broker takes them)")
    parser.add_argument("--seed", type=int, default=0,
                        help="simulator seed (default 0): the same seed gives the same traffic; --forever "
                             "adds the run's number")
    parser.add_argument("--regression", type=float, default=0.10, help="canary's relative DCG drop (0: none)")
    parser.add_argument("--bucket", default="tail", choices=["head", "torso", "tail", "all"],
                        help="the query-frequency bucket where the canary regresses (default tail)")
    parser.add_argument("--invalid-rate", type=float, default=0.0, help="share of invalid events mixed in")
    parser.add_argument("--start", default="now",
                        help="event time of the first session: 'now' or Unix seconds (default now)")
    parser.add_argument("--forever", action="store_true", help="run after run (new seed, later times)")
    parser.add_argument("--write-events", metavar="FILE",
                        help="also write each event sent to FILE as JSONL, in the order sent (input of "
                             "monitor replay --partitions N, N the topics' partition count)")
    return parser


def run_config(config: SimConfig, run: int) -> SimConfig:
    """The ``run``-th run of ``config`` (``--forever``: the next seed, the next span of event time), its
    session ids named by its seed and start (``s<seed>-<start in ms>``), so two runs never share one."""
    seed, start = config.seed + run, config.start_ts + run * config.duration_s
    return replace(config, seed=seed, start_ts=start, id_prefix=f"s{seed}-{start * 1000:.0f}")


def sent_events(config: SimConfig, path: str | None, append: bool = False) -> Iterable[SimEvent]:
    """The events of a run, each written to ``path`` (appended to it with ``append``) as it is taken when
    a path is given; an ``OSError`` when the file cannot be opened."""
    from monitor.sim.jsonl import write_through

    events = generate(config)
    return events if path is None else write_through(events, open(path, "ab" if append else "wb"))


async def produce(bootstrap: str, topics: dict[str, str], events: Iterable[SimEvent],
                  rate: float = 0.0, security: KafkaSecurity | None = None) -> int:
    """Send ``events`` in order (sim topic → Kafka topic name); return how many were sent.
    ``security``: how to connect (SASL, TLS; default plaintext)."""
    from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                                max_batch_size=256 * 1024, enable_idempotence=True,
                                **(security or KafkaSecurity()).aiokafka_options())
    await producer.start()
    sent, started = 0, time.monotonic()
    try:
        pending = []
        for event in events:
            pending.append(await producer.send(topics[event.topic], value=event.value, key=event.key))
            sent += 1
            if len(pending) >= 5000:
                await asyncio.gather(*pending)
                pending.clear()
            if rate > 0:
                ahead = sent / rate - (time.monotonic() - started)
                if ahead > 0.01:
                    await asyncio.sleep(ahead)
        await asyncio.gather(*pending)
        await producer.flush()
    finally:
        await producer.stop()
    return sent


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    services = found_services(os.environ)
    try:
        settings = load_settings(os.environ, services=services)
    except SettingsError as error:
        return refused("monitor produce", error)
    bootstrap = args.bootstrap or settings.kafka_bootstrap
    names = {"impressions": settings.topics.impressions, "annotations": settings.topics.annotations,
             "deploys": settings.topics.deploys}
    start = time.time() if args.start == "now" else float(args.start)
    try:
        config = SimConfig(seed=args.seed, n_sessions=args.sessions, duration_s=args.duration, start_ts=start,
                           regression=args.regression, regression_bucket=args.bucket,
                           invalid_rate=args.invalid_rate)
    except ValueError as error:
        return refused("monitor produce", error)
    from monitor.worker.topics import ensure_topics

    try:
        asyncio.run(ensure_topics(bootstrap, settings.topics, settings.partitions,
                                  settings.replication_factor, security=settings.kafka_security()))
    except SettingsError as error:
        hint = "" if args.bootstrap else default_hint(settings, "kafka_bootstrap", services)
        return refused("monitor produce", SettingsError(f"{error}{hint}"))
    run = 0
    while True:
        try:
            events = sent_events(run_config(config, run), args.write_events, append=run > 0)
        except OSError as error:
            return refused("monitor produce", ValueError(f"--write-events: cannot write {args.write_events}: "
                                                         f"{error.strerror or error}"))
        sent = asyncio.run(produce(bootstrap, names, events, args.rate, settings.kafka_security()))
        also = f" (and to {args.write_events})" if args.write_events is not None else ""
        sys.stderr.write(f"monitor produce: run {run}: {sent} messages to {bootstrap}{also}\n")
        run += 1
        if not args.forever:
            return 0
