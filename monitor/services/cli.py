"""``monitor services up | down | status | install``: real Kafka, Redis, Prometheus and Alertmanager locally.

Examples::

    monitor services up                      # all four on their default ports, in .services/
    monitor services up --only kafka,redis   # a subset
    monitor services up --free-ports         # any free loopback ports (printed)
    monitor services up --only label-studio  # Label Studio for monitor annotate (docs/annotate.md)
    monitor services up --redis-cluster --redis-replicas 1   # a Redis Cluster (3 primaries, 3 replicas)
    monitor services up --kafka-cluster      # three KRaft brokers, replication factor 3
    monitor services status                  # what runs, whether it answers, last up's time to ready
    monitor services status --workdir DIR    # in another working folder (--workdir before or after)
    monitor services down [--purge]          # stop what up started (and delete the working folder)
    monitor services install                 # Debian packages and Kafka jars only
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from monitor.services.group import ServerGroup
from monitor.services.install import BINARIES_OF, ensure_binaries, ensure_kafka_jars, kafka_libs
from monitor.services.kafka import KAFKA_VERSION
from monitor.services.label_studio import ensure_browser, ensure_label_studio, label_studio_binary
from monitor.services.ports import free_port
from monitor.services.process import ServiceError
from monitor.services.stack import (
    DEFAULT_PORTS,
    DEFAULT_SERVICES,
    SERVICES,
    State,
    build_server,
    default_workdir,
    down,
    status,
    up,
)


def _echo(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _services(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in SERVICES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown service {unknown}; accepted: {', '.join(SERVICES)}")
    return [name for name in SERVICES if name in names]


WORKDIR_HELP = ("working folder: state, configuration, data and logs (default: $MONITOR_SERVICES_DIR, else "
                ".services/ in the repository; `monitor worker`, `produce`, `canary` and `annotate` find "
                "the services started there)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="monitor services",
        description="Real Kafka (KRaft), Redis, Prometheus and Alertmanager on 127.0.0.1, without Docker.",
    )
    parser.add_argument("--workdir", type=Path, default=None, help=WORKDIR_HELP)
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("up", help="start the services and wait until each answers")
    start.add_argument("--only", type=_services, default=list(DEFAULT_SERVICES),
                       help=f"comma-separated, of {', '.join(SERVICES)} (default: all but label-studio)")
    start.add_argument("--free-ports", action="store_true", help="use free ports instead of the defaults")
    start.add_argument("--redis-cluster", action="store_true",
                       help="a Redis Cluster (three primaries) in place of the single redis-server")
    start.add_argument("--redis-replicas", type=int, choices=(0, 1, 2), default=0,
                       help="replicas of each Redis Cluster primary (default 0)")
    start.add_argument("--kafka-cluster", action="store_true",
                       help="three Kafka brokers (replication 3, min.insync.replicas 2) in place of one")
    for role, port in DEFAULT_PORTS.items():
        start.add_argument(f"--{role}-port", type=int, default=port, help=f"default {port}")
    stop = commands.add_parser("down", help="stop what up started")
    stop.add_argument("--purge", action="store_true", help="also delete the working folder")
    show = commands.add_parser("status", help="what runs, whether it answers, and the last up's timing")
    show.add_argument("--json", action="store_true", help="print the status as JSON")
    setup = commands.add_parser("install", help="install missing Debian packages and cache the Kafka jars")
    setup.add_argument("--only", type=_services, default=list(DEFAULT_SERVICES),
                       help=f"comma-separated, of {', '.join(SERVICES)} (default: all but label-studio)")
    for command in (start, stop, show, setup):  # before or after the sub-command: both work
        command.add_argument("--workdir", type=Path, default=argparse.SUPPRESS, help=WORKDIR_HELP)
    return parser


def _chosen(args: argparse.Namespace) -> list[str]:
    """``--only``, with ``--redis-cluster`` / ``--kafka-cluster`` in place of the single server."""
    names = list(args.only)
    for flag, single in (("redis_cluster", "redis"), ("kafka_cluster", "kafka")):
        if getattr(args, flag):
            cluster = f"{single}-cluster"
            names = [cluster if name == single else name for name in names]
            names += [] if cluster in names else [cluster]
    return [name for name in SERVICES if name in names]


BASE_BELOW = {"redis-cluster": 65535 - 10000 - 16}
"""Roles whose ports derive others from theirs: a cluster's base (its nodes' bus ports are ``+ 10000``)."""


def _up(args: argparse.Namespace, workdir: Path) -> int:
    names = _chosen(args)
    options = {"redis_replicas": args.redis_replicas}
    ports = {role: getattr(args, f"{role.replace('-', '_')}_port") for role in DEFAULT_PORTS}
    if args.free_ports:
        ports = {role: port if role == "metrics" else free_port(BASE_BELOW.get(role, 65536))
                 for role, port in ports.items()}
        for name in names:  # each node of a cluster gets its own free ports
            server = build_server(name, workdir, ports, options)
            if isinstance(server, ServerGroup):
                ports.update({role: free_port() for role in server.ports()})
    report = up(workdir, names, ports, _echo, options)
    for name in names:
        if name in report.already_running:
            timing = "already running"
        else:
            timing = f"ready in {report.started[name]:5.1f} s"
        print(f"{name:<13} {timing:<17} {report.addresses[name]}")
        if report.resumed.get(name):
            nodes = ", ".join(f"node-{index}" for index in report.resumed[name])
            print(f"{'':<13} {nodes} started again (the other nodes were running)")
        if name == "label-studio":
            record = State.load(workdir).services[name]
            print(f"{'':<13} user {record['user']}, personal access token in {record['token_file']}")
    jars = {True: "; Kafka jars downloaded (cold)", False: "; Kafka jars cached (warm)", None: ""}
    print(f"all ready {report.total_seconds:.1f} s after up{jars[report.jars_downloaded]}; logs in {workdir}")
    return 0


def _status(args: argparse.Namespace, workdir: Path) -> int:
    report = status(workdir)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        if not report["services"]:
            print(f"nothing started by `monitor services up` in {workdir}")
        for name, service in report["services"].items():
            processes = service["processes"]
            state = "answers" if service["answers"] else "running, not answering"
            if not service["running"]:
                running = sum(p["running"] for p in processes)
                state = f"{running} of {len(processes)} nodes running" if running else "stopped"
            pids = ",".join(f"{p['pid']}{'' if p['started_by_up'] else '*'}" for p in processes)
            print(f"{name:<13} {state:<23} {service['address']:<28} pid {pids}")
            if not all(p["started_by_up"] for p in processes):
                print(f"{'':<13} * started again outside `monitor services up`, in its folder and port")
            print(f"{'':<13} log {service['log']}")
        last = report["last_up"]
        if last:
            print(
                f"last up: {last['at']}, all ready in {last['seconds_to_all_ready']:.1f} s "
                f"(Kafka jars {last['kafka_jars']})"
            )
    healthy = all(service["answers"] for service in report["services"].values())
    return 0 if healthy else 1


def _install(args: argparse.Namespace) -> int:
    ensure_binaries([binary for name in args.only for binary in BINARIES_OF[name]], _echo)
    print("Debian packages: all present")
    if "label-studio" in args.only:
        ensure_browser(_echo)  # the labelling page's screenshot test (docs/annotate.md)
        installed = ensure_label_studio(_echo)
        print(f"Label Studio: {'installed' if installed else 'present'}, {label_studio_binary()}")
    if {"kafka", "kafka-cluster"} & set(args.only):
        downloaded = ensure_kafka_jars(KAFKA_VERSION, _echo)
        where = "downloaded to" if downloaded else "cached in"
        print(f"Kafka {KAFKA_VERSION} jars: {where} {kafka_libs(KAFKA_VERSION)}")
    return 0


def main(argv: Sequence[str]) -> int:
    """Run ``monitor services <command>``; return the exit status (1 with a message on failure)."""
    args = _parser().parse_args(list(argv))
    workdir = (args.workdir or default_workdir()).resolve()
    try:
        if args.command == "up":
            return _up(args, workdir)
        if args.command == "down":
            down(workdir, _echo, purge=args.purge)
            return 0
        if args.command == "status":
            return _status(args, workdir)
        return _install(args)
    except (ServiceError, OSError) as error:
        _echo(f"monitor services {args.command}: {error}")
        return 1
