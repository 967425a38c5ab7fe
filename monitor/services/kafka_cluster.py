"""A local replicated Kafka: three KRaft nodes, each broker and controller, a 3-voter quorum.

Each node is a :class:`~monitor.services.kafka.KafkaServer` (same jars, same heap) in its own folder, with
its own ``node.id`` (1, 2, 3), the three controllers as ``controller.quorum.voters``, and storage formatted
with one cluster id for all. Replication is what production uses: topics get 3 replicas by default
(``default.replication.factor``, and the consumer offsets and transaction logs too) and an ``acks=all``
write needs 2 in sync (``min.insync.replicas``), so one broker can be down without stopping writes or
losing an acknowledged one. A dead broker is fenced after 4 s without heartbeat (``broker.session.timeout
.ms``; 9 s by default), which moves its partitions' leadership and takes it out of their in-sync replicas,
so writes wait a few seconds, not the 30 s of ``replica.lag.time.max.ms``.

Ready means every node answers a Metadata request that lists all three brokers. The address is the
bootstrap list of the three.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from monitor.services.group import ServerGroup
from monitor.services.kafka import KAFKA_VERSION, KafkaServer, metadata_brokers, new_cluster_id
from monitor.services.ports import LOOPBACK
from monitor.services.process import ServiceError

NODES = 3
REPLICATION = 3
MIN_INSYNC = 2


class KafkaClusterNode(KafkaServer):
    """Node ``node_id`` of the cluster whose controllers listen on ``voters`` (node id → port)."""

    def __init__(self, folder: Path, node_id: int, port: int, controller_port: int,
                 voters: Mapping[int, int], version: str = KAFKA_VERSION) -> None:
        super().__init__(folder.parent, port, controller_port, version)
        self.dir = folder
        self.node_id = node_id
        self.voters = dict(voters)

    def quorum_voters(self) -> str:
        return ",".join(f"{node}@{LOOPBACK}:{port}" for node, port in sorted(self.voters.items()))

    def replication_properties(self) -> list[str]:
        return [
            f"default.replication.factor={REPLICATION}",
            f"min.insync.replicas={MIN_INSYNC}",
            f"offsets.topic.replication.factor={REPLICATION}",
            f"transaction.state.log.replication.factor={REPLICATION}",
            f"transaction.state.log.min.isr={MIN_INSYNC}",
            "broker.heartbeat.interval.ms=1000",
            "broker.session.timeout.ms=4000",
            "replica.lag.time.max.ms=10000",
        ]


class KafkaClusterServer(ServerGroup):
    """Three combined broker/controller nodes on ``ports`` (clients) and ``controller_ports``."""

    name: ClassVar[str] = "kafka-cluster"
    ready_timeout: ClassVar[float] = 120.0

    def __init__(self, workdir: Path, ports: list[int], controller_ports: list[int],
                 version: str = KAFKA_VERSION) -> None:
        if len(ports) != NODES or len(controller_ports) != NODES:
            raise ServiceError(f"kafka-cluster: {NODES} nodes need {NODES} client and controller ports")
        voters = {index + 1: port for index, port in enumerate(controller_ports)}
        self.kafka_nodes = [
            KafkaClusterNode(self.node_dir(workdir, self.name, index), index + 1, port, controller, voters,
                             version)
            for index, (port, controller) in enumerate(zip(ports, controller_ports, strict=True))]
        super().__init__(workdir, self.kafka_nodes)

    @classmethod
    def from_ports(cls, workdir: Path, ports: Mapping[str, int]) -> KafkaClusterServer:
        """The cluster on the ports recorded by ``up`` (``kafka-cluster-<i>``,
        ``kafka-cluster-controller-<i>``), or, for those not given, ``ports["kafka-cluster"] + i`` and
        that plus 10."""
        base = ports.get(cls.name, 19192)
        clients = [ports.get(f"{cls.name}-{i}", base + i) for i in range(NODES)]
        controllers = [ports.get(f"{cls.name}-controller-{i}", base + 10 + i) for i in range(NODES)]
        return cls(workdir, clients, controllers)

    @property
    def address(self) -> str:
        return ",".join(node.host_port for node in self.kafka_nodes)

    def prepare(self) -> None:
        """One cluster id for every node's storage, then each node's configuration and format."""
        self.dir.mkdir(parents=True, exist_ok=True)
        shared = self.dir / "cluster.id"
        if not shared.exists():
            shared.write_text(new_cluster_id() + "\n")
        for node in self.kafka_nodes:
            node.dir.mkdir(parents=True, exist_ok=True)
            (node.dir / "cluster.id").write_text(shared.read_text())
        super().prepare()

    def brokers_seen(self, node: KafkaServer) -> int:
        """How many brokers ``node``'s metadata lists (0 if it does not answer)."""
        try:
            return len(metadata_brokers(LOOPBACK, node.port, timeout=1.0))
        except (OSError, ServiceError, ValueError):
            return 0

    def form(self) -> None:
        """Nothing: the nodes find each other through ``controller.quorum.voters``."""

    def answers(self) -> bool:
        return all(self.brokers_seen(node) == NODES for node in self.kafka_nodes)

    def why_not(self) -> str:
        return ", ".join(f"node {node.node_id} lists {self.brokers_seen(node)} brokers"
                         for node in self.kafka_nodes)
