"""``monitor produce``: simulated traffic (monitor/sim) written to the worker's Kafka topics.

The traffic generator of the compose stack and of the end-to-end tests and benchmarks: impressions,
labels (late, duplicated, corrected, query-level, missing), deploys and, with ``--invalid-rate``, invalid
events, each keyed as docs/events.md says. Topic names, the bootstrap address and the Kafka security
settings (SASL, TLS) come from the same settings as the worker (``MONITOR_*``), or the options.
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
    return parser


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
        this = replace(config, seed=config.seed + run, start_ts=config.start_ts + run * config.duration_s,
                       id_prefix=f"r{run}-")
        sent = asyncio.run(produce(bootstrap, names, generate(this), args.rate, settings.kafka_security()))
        sys.stderr.write(f"monitor produce: run {run}: {sent} messages to {bootstrap}\n")
        run += 1
        if not args.forever:
            return 0
