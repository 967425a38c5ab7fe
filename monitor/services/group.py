"""Several local servers that make one service: a Redis Cluster (:mod:`.redis_cluster`), a Kafka cluster
(:mod:`.kafka_cluster`).

A :class:`ServerGroup` has the same face as one :class:`~monitor.services.server.LocalServer` towards
``monitor services`` (:mod:`.stack`) and the test fixtures: a folder (``<workdir>/<name>``, one
``node-<i>`` folder per node inside), the ports of all its nodes, one address, ``start``,
``wait_ready``, ``stop``, ``answers`` and the processes to record. Its nodes are ordinary
``LocalServer`` objects, so a test can :meth:`~monitor.services.server.LocalServer.kill` or restart one
node while the others run. :meth:`ServerGroup.wait_ready` waits for every node, then runs
:meth:`ServerGroup.form` (what makes the nodes one cluster, if anything) and waits until
:meth:`ServerGroup.answers` says the whole cluster serves.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

from monitor.services.process import ServerProcess, ServiceError, log_tails
from monitor.services.server import LocalServer


class ServerGroup(ABC):
    """A service made of ``nodes``, each a :class:`LocalServer` in ``<workdir>/<name>/node-<i>``."""

    name: ClassVar[str]
    ready_timeout: ClassVar[float] = 90.0
    stop_grace: ClassVar[float] = 15.0

    def __init__(self, workdir: Path, nodes: Sequence[LocalServer]) -> None:
        if not nodes:
            raise ServiceError(f"{self.name}: a group needs at least one node")
        self.workdir = workdir
        self.dir = workdir / self.name
        self.nodes = list(nodes)

    @staticmethod
    def node_dir(workdir: Path, name: str, index: int) -> Path:
        """Where node ``index`` of the group ``name`` keeps its files."""
        return workdir / name / f"node-{index}"

    @property
    @abstractmethod
    def address(self) -> str:
        """What a client is given to connect (a URL or a bootstrap list naming several nodes)."""

    @property
    def host_port(self) -> str:
        """The first node's ``127.0.0.1:<port>``."""
        return self.nodes[0].host_port

    def ports(self) -> dict[str, int]:
        """Every port of every node, by role: ``<role>-<index>`` (``redis-cluster-0``, ...)."""
        return {f"{self.name}{role.removeprefix(node.name)}-{index}": port
                for index, node in enumerate(self.nodes) for role, port in node.ports().items()}

    def log_paths(self) -> list[Path]:
        """Each node's most useful log."""
        return [node.log_paths()[-1] for node in self.nodes]

    def processes(self) -> list[ServerProcess | None]:
        """The nodes' processes, in node order (None: not started)."""
        return [node.process for node in self.nodes]

    def attach(self, processes: Sequence[ServerProcess | None]) -> None:
        """Take the processes recorded by an earlier ``up`` (one per node, in node order)."""
        for node, process in zip(self.nodes, processes, strict=True):
            node.process = process

    def prepare(self) -> None:
        """Every node's configuration and storage, before any starts."""
        for node in self.nodes:
            node.prepare()

    def start(self, *, die_with_parent: bool = False) -> None:
        """Prepare every node, then spawn them all (does not wait)."""
        self.prepare()
        for node in self.nodes:
            node.start(die_with_parent=die_with_parent)

    def wait_ready(self, timeout: float | None = None) -> float:
        """Wait until every node answers, :meth:`form` the cluster, and wait until it :meth:`answers`;
        return the seconds waited, or raise with the nodes' log tails."""
        limit = self.ready_timeout if timeout is None else timeout
        started = time.monotonic()
        for node in self.nodes:
            node.wait_ready(max(1.0, limit - (time.monotonic() - started)))
        self.form()
        while not self.answers():
            for node in self.nodes:
                if node.process is None or not node.process.alive():
                    raise ServiceError(f"{self.name}: {node.dir.name} exited while the cluster formed\n"
                                       + log_tails(self.log_paths()))
            if time.monotonic() - started > limit:
                raise ServiceError(f"{self.name} did not become one healthy cluster within {limit:.0f} s "
                                   f"({self.why_not()})\n" + log_tails(self.log_paths()))
            time.sleep(0.2)
        return time.monotonic() - started

    @abstractmethod
    def form(self) -> None:
        """Make the running nodes one cluster, if they are not yet."""

    @abstractmethod
    def answers(self) -> bool:
        """True if the cluster as a whole serves requests now."""

    def why_not(self) -> str:
        """A short reason :meth:`answers` is False (for the error message)."""
        return "not answering"

    def stop(self, grace_seconds: float | None = None) -> bool:
        """Stop every node at once (a cluster stopped one node at a time may wait on a lost quorum), each
        SIGKILLed if it has not exited ``grace_seconds`` (:attr:`stop_grace`) after SIGTERM: the last
        brokers of a Kafka cluster wait for a quorum that is gone; True if one took SIGKILL."""
        grace = self.stop_grace if grace_seconds is None else grace_seconds
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            futures = [pool.submit(node.stop, grace) for node in self.nodes]
            return any([future.result() for future in futures])

    def resume(self) -> list[int]:
        """Start again, on their ports and with their data, the nodes that do not run, and wait until the
        cluster is whole; return their indexes."""
        stopped = [index for index, node in enumerate(self.nodes)
                   if node.process is None or not node.process.alive()]
        for index in stopped:
            self.nodes[index].start()
        self.wait_ready()
        return stopped
