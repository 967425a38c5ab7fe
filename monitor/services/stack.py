"""The set of local servers that ``monitor services up`` started, recorded in ``<workdir>/state.json``.

``up`` installs what is missing, starts the chosen servers in parallel, waits until each really answers
and records pids, argument vectors, ports and timings; ``down`` stops exactly the processes recorded there
(and only while ``/proc`` still shows the recorded command); ``status`` probes them and reports the
last ``up``'s time to all-ready, cold (Kafka jars downloaded) or warm (jars cached).

A service is one server (:class:`~monitor.services.server.LocalServer`) or a group of them that makes one
cluster (:class:`~monitor.services.group.ServerGroup`: ``redis-cluster``, ``kafka-cluster``); a group's
record lists every node's process, and its ports every node's ports.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from monitor.services.alertmanager import AlertmanagerServer
from monitor.services.group import ServerGroup
from monitor.services.install import BINARIES_OF, REPO_ROOT, ensure_binaries, ensure_kafka_jars
from monitor.services.kafka import KAFKA_VERSION, KafkaServer
from monitor.services.kafka_cluster import KafkaClusterServer
from monitor.services.label_studio import LabelStudioServer, ensure_label_studio, personal_access_token
from monitor.services.ports import LOOPBACK, port_in_use
from monitor.services.process import ServerProcess, ServiceError, listener_in, listening_pid
from monitor.services.prometheus import DEFAULT_METRICS_PORT, PrometheusServer
from monitor.services.redis_cluster import RedisClusterServer
from monitor.services.redis_server import RedisServer
from monitor.services.server import LocalServer

Echo = Callable[[str], None]
Service = LocalServer | ServerGroup

SERVICES: tuple[str, ...] = ("kafka", "redis", "prometheus", "alertmanager", "label-studio", "redis-cluster",
                             "kafka-cluster")
#: What ``up`` starts when not told (Label Studio, for the annotation bridge, only with ``--only``).
DEFAULT_SERVICES: tuple[str, ...] = ("kafka", "redis", "prometheus", "alertmanager")

#: Ports used by ``up`` unless told otherwise: away from the defaults (9092, 6379, 9090, 9093) so that
#: a system-wide service or another project on the same machine does not get in the way.
DEFAULT_PORTS: dict[str, int] = {
    "kafka": 19092,
    "kafka-controller": 19091,
    "redis": 16379,
    "prometheus": 19090,
    "alertmanager": 19093,
    "label-studio": 18080,
    "metrics": DEFAULT_METRICS_PORT,
    "redis-cluster": 17000,  # the first node's; node i: 17000 + i, its cluster bus 27000 + i
    "kafka-cluster": 19192,  # the first broker's; broker i: 19192 + i, its controller 19202 + i
}


def default_workdir(env: Mapping[str, str] | None = None) -> Path:
    """``$MONITOR_SERVICES_DIR`` (of ``env``, default the process's) or ``.services/`` in the repository
    root."""
    configured = (os.environ if env is None else env).get("MONITOR_SERVICES_DIR", "").strip()
    return Path(configured).expanduser().resolve() if configured else REPO_ROOT / ".services"


def build_server(name: str, workdir: Path, ports: Mapping[str, int],
                 options: Mapping[str, Any] | None = None) -> Service:
    """The server object for ``name`` with the given ports (see :data:`DEFAULT_PORTS` for the keys; a
    cluster also takes its nodes' own, as :meth:`ServerGroup.ports` names them). ``options``:
    ``redis_replicas``, the replicas of each Redis Cluster primary (0)."""
    if name == "redis-cluster":
        return RedisClusterServer.from_ports(workdir, ports, int((options or {}).get("redis_replicas", 0)))
    if name == "kafka-cluster":
        return KafkaClusterServer.from_ports(workdir, ports)
    if name == "kafka":
        return KafkaServer(workdir, ports["kafka"], ports["kafka-controller"])
    if name == "redis":
        return RedisServer(workdir, ports["redis"])
    if name == "alertmanager":
        return AlertmanagerServer(workdir, ports["alertmanager"])
    if name == "prometheus":
        alertmanager = f"{LOOPBACK}:{ports['alertmanager']}"
        return PrometheusServer(
            workdir, ports["prometheus"], alertmanager=alertmanager, metrics_port=ports["metrics"]
        )
    if name == "label-studio":
        return LabelStudioServer(workdir, ports["label-studio"])
    raise ValueError(f"unknown service {name!r}; accepted: {', '.join(SERVICES)}")


@dataclass
class State:
    """What ``state.json`` holds: one record per running server, and the timing of the last ``up``."""

    path: Path
    services: dict[str, dict[str, Any]] = field(default_factory=dict)
    last_up: dict[str, Any] | None = None

    @classmethod
    def load(cls, workdir: Path) -> State:
        path = workdir / "state.json"
        if not path.exists():
            return cls(path)
        data = json.loads(path.read_text())
        return cls(path, dict(data.get("services", {})), data.get("last_up"))

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"services": self.services, "last_up": self.last_up}
        self.path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")

    def recorded(self, name: str) -> list[ServerProcess]:
        """The processes of ``name`` that ``up`` started (one per node of a cluster)."""
        record = self.services[name]
        found = record.get("processes") or [record]  # a record written before clusters: one process
        return [ServerProcess.attach(name, p["argv"], int(p["pid"]), p.get("start_time")) for p in found]

    def node_ports(self, name: str) -> list[int | None]:
        """The client port of each node of ``name`` (None where the record does not say)."""
        record = self.services[name]
        ports, count = record.get("ports", {}), len(record.get("processes") or [record])
        if count == 1 and name in ports:
            return [int(ports[name])]
        return [int(ports[f"{name}-{i}"]) if f"{name}-{i}" in ports else None for i in range(count)]

    def processes(self, name: str) -> list[ServerProcess]:
        """The process of each node of ``name`` now: the recorded one while it runs, else the one started
        again by hand in its place (listening on its port, running in its folder:
        :func:`~monitor.services.process.listener_in`), else the recorded one (not running)."""
        now = []
        for process, port in zip(self.recorded(name), self.node_ports(name), strict=True):
            folder = self.path.parent / name
            again = None if process.alive() or port is None else listener_in(name, port, folder)
            now.append(again or process)
        return now

    def alive(self, name: str) -> bool:
        """True while every node of ``name`` has a running process (:meth:`processes`)."""
        return all(process.alive() for process in self.processes(name))

    def refresh(self, name: str) -> list[int]:
        """Record the processes that run now in place of those ``up`` started; return their pids."""
        record, now = self.services[name], self.processes(name)
        replaced = [p.pid for p, before in zip(now, self.recorded(name), strict=True) if p.pid != before.pid]
        if replaced:
            record["processes"] = [{"pid": p.pid, "start_time": p.started, "argv": p.argv} for p in now]
            record["pid"] = now[0].pid
        return replaced

    def server(self, name: str, workdir: Path) -> Service:
        record = self.services[name]
        server = build_server(name, workdir, {**DEFAULT_PORTS, **record["ports"]}, record.get("options"))
        processes = self.processes(name)
        if isinstance(server, ServerGroup):
            server.attach(processes)
        else:
            server.process = processes[0]
        return server


@dataclass(frozen=True)
class UpReport:
    """What ``up`` did: the servers now running, seconds each took, and the total."""

    started: dict[str, float]
    already_running: list[str]
    addresses: dict[str, str]
    total_seconds: float
    jars_downloaded: bool | None  # None: Kafka was not started
    resumed: dict[str, list[int]] = field(default_factory=dict)  # a cluster's nodes started again


def _start_and_wait(server: Service) -> float:
    started = time.monotonic()
    server.start()
    server.wait_ready()
    return time.monotonic() - started


def up(workdir: Path, names: Sequence[str], ports: Mapping[str, int], echo: Echo,
       options: Mapping[str, Any] | None = None) -> UpReport:
    """Start every server in ``names`` that is not already running; raise :class:`ServiceError` if any fails.

    Servers are started in parallel. If one fails, those started by this call are stopped again and the
    error (with log tails) is raised; servers that were already running are left alone (a node started
    again by hand counts: :meth:`State.processes`), and the stopped nodes of a cluster whose others run
    are started again. ``options``: see :func:`build_server`.
    """
    began = time.monotonic()
    state = State.load(workdir)
    running = [name for name in names if name in state.services and state.alive(name)]
    for name in running:
        ports = {**ports, **state.services[name]["ports"]}
        state.refresh(name)
    resumed: dict[str, list[int]] = {}
    timings: dict[str, float] = {}
    for name in names:  # a cluster some of whose nodes stopped: those started again, the others kept
        if name in state.services and name not in running and any(p.alive() for p in state.processes(name)):
            server = state.server(name, workdir)
            if isinstance(server, ServerGroup):
                since = time.monotonic()
                resumed[name] = server.resume()
                timings[name] = time.monotonic() - since
                state.services[name]["processes"] = [{"pid": p.pid, "start_time": p.started, "argv": p.argv}
                                                     for p in server.processes() if p is not None]
                running.append(name)
    wanted = [name for name in names if name not in running]
    ensure_binaries([binary for name in wanted for binary in BINARIES_OF[name]], echo)
    kafka = {"kafka", "kafka-cluster"} & set(wanted)
    downloaded = ensure_kafka_jars(KAFKA_VERSION, echo) if kafka else None
    if "label-studio" in wanted:
        ensure_label_studio(echo)

    servers = [build_server(name, workdir, ports, options) for name in wanted]
    for server in servers:
        for role, port in server.ports().items():
            if port_in_use(port):
                pid = listening_pid(port)
                option = f"--{server.name}-port" if isinstance(server, ServerGroup) else f"--{role}-port"
                raise ServiceError(f"port {port} for {role} is in use{f' by pid {pid}' if pid else ''}, not "
                                   f"by a service `up` started in {workdir}; choose another ({option}) or "
                                   "--free-ports")

    errors: list[str] = []
    with ThreadPoolExecutor(max_workers=max(1, len(servers))) as pool:
        futures = {server.name: pool.submit(_start_and_wait, server) for server in servers}
        for name, future in futures.items():
            try:
                timings[name] = future.result()
            except ServiceError as error:
                errors.append(str(error))
    if errors:
        for server in servers:
            server.stop()
        raise ServiceError("\n\n".join(errors))

    now = datetime.now(UTC).isoformat(timespec="seconds")
    for server in servers:
        processes = server.processes() if isinstance(server, ServerGroup) else [server.process]
        started = [process for process in processes if process is not None]
        if len(started) != len(processes):
            raise ServiceError(f"{server.name} has no process after a successful start")
        state.services[server.name] = {
            "pid": started[0].pid,
            "processes": [{"pid": p.pid, "start_time": p.started, "argv": p.argv} for p in started],
            "options": dict(options or {}) if isinstance(server, ServerGroup) else {},
            "ports": server.ports(),
            "address": server.address,
            "log": str(server.log_paths()[-1]),
            "started_at": now,
            "ready_seconds": round(timings[server.name], 3),
        }
        if isinstance(server, LabelStudioServer):  # the bridge's token (docs/annotate.md)
            state.services[server.name]["token_file"] = str(personal_access_token(server))
            state.services[server.name]["user"] = server.username
    total = time.monotonic() - began
    if servers:
        state.last_up = {
            "at": now,
            "services": wanted,
            "seconds_to_all_ready": round(total, 3),
            "kafka_jars": {True: "downloaded", False: "cached", None: "not used"}[downloaded],
        }
    state.save()
    addresses = {name: state.services[name]["address"] for name in names}
    return UpReport(timings, [name for name in running if name not in resumed], addresses, total, downloaded,
                    resumed)


def down(workdir: Path, echo: Echo, purge: bool = False) -> list[str]:
    """Stop the servers recorded by ``up`` (only those); with ``purge`` also delete the working folder."""
    state = State.load(workdir)
    stopped = []
    for name in list(state.services):
        processes = state.processes(name)
        pids = ",".join(str(p.pid) for p in processes)
        if any(process.alive() for process in processes):
            again = state.refresh(name)
            killed = state.server(name, workdir).stop()
            stopped.append(name)
            notes = [f"{', '.join(map(str, again))} started again outside `up`"] if again else []
            notes += ["SIGKILLed: SIGTERM was not enough"] if killed else []
            echo(f"{name:<13} stopped (pid {pids}{''.join(f'; {note}' for note in notes)})")
        else:
            echo(f"{name:<13} was not running")
        del state.services[name]
    if state.path.exists():
        state.save()
    if purge and workdir.exists():
        shutil.rmtree(workdir)
        echo(f"removed {workdir}")
    return stopped


def status(workdir: Path) -> dict[str, Any]:
    """Each recorded server with whether its process runs and whether it answers; and the last ``up``."""
    state = State.load(workdir)
    services = {}
    for name, record in state.services.items():
        server = state.server(name, workdir)
        now = state.processes(name)
        alive = all(process.alive() for process in now)
        processes = [{"pid": p.pid, "start_time": p.started, "argv": p.argv, "running": p.alive(),
                      "started_by_up": p.pid == before.pid}
                     for p, before in zip(now, state.recorded(name), strict=True)]
        services[name] = {**record, "pid": now[0].pid, "processes": processes, "running": alive,
                          "answers": alive and server.answers()}
    return {"workdir": str(workdir), "services": services, "last_up": state.last_up}
