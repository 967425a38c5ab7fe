"""A local Redis Cluster: three primaries, and optionally replicas of each, from the Debian ``redis-server``.

Each node is a :class:`~monitor.services.redis_server.RedisServer` (loopback only, AOF with ``appendfsync
always``) with ``cluster-enabled yes``, its cluster bus on a port of its own (``cluster-port``, so any free
port works, not only ``port + 10000``), a node timeout of 2 s (a dead primary is replaced by its replica
within a few seconds) and diskless replication without delay. Nodes ``0..2`` are the primaries, each
with a third of the 16,384 slots; node ``3 + j`` replicates primary ``j % 3``.

:meth:`RedisClusterServer.form` does what ``redis-cli --cluster create`` does, over plain RESP
(:mod:`.resp`): a distinct config epoch and the slot range of each primary, ``CLUSTER MEET`` (with the
bus port), then ``CLUSTER REPLICATE`` once a replica knows its primary. A cluster that already formed
(a restart: each node's ``nodes.conf`` remembers it) is left as it is. Ready means every node says
``cluster_state:ok`` with all slots assigned and every replica's link to its primary is up.

The address is ``redis+cluster://127.0.0.1:<p0>,127.0.0.1:<p1>,127.0.0.1:<p2>/0``, the URL scheme the
worker takes for a cluster (docs/worker.md).

:class:`SecureRedisClusterServer` is the same cluster secured as
:class:`~monitor.services.redis_server.SecureRedisServer` is one server: every node on a TLS port only
(``port 0``), its cluster bus and its replication over TLS too (``tls-cluster yes``, ``tls-replication
yes``), client certificates required (by default), the default user off. Each node has the same three
ACL users: the worker's (:data:`~monitor.services.redis_server.WORKER_ACL` on its key pattern), ``admin``
(every command: forming the cluster, the readiness probes, tests that stop a node) and ``replication``
(``PSYNC``, ``REPLCONF`` and ``PING`` only, which a replica logs in as: ``masteruser``/``masterauth``).
Its address is ``rediss+cluster://<user>@127.0.0.1:<p0>,...``, without the password.
"""

from __future__ import annotations

import contextlib
import secrets
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from monitor.services.group import ServerGroup
from monitor.services.ports import LOOPBACK
from monitor.services.process import ServiceError
from monitor.services.redis_server import WORKER_ACL, RedisServer, acl_user, check_secured, ping_tls, tls_only
from monitor.services.resp import RespError, call, fields
from monitor.services.tls import TlsFiles, make_tls_files

PRIMARIES = 3
SLOTS = 16384
NODE_TIMEOUT_MS = 2000


class RedisClusterNode(RedisServer):
    """One node of the cluster, in its own folder, with its cluster bus on ``bus_port``."""

    def __init__(self, folder: Path, port: int, bus_port: int, node_timeout_ms: int = NODE_TIMEOUT_MS):
        super().__init__(folder.parent, port)
        self.dir = folder
        self.bus_port = bus_port
        self.node_timeout_ms = node_timeout_ms

    def ports(self) -> dict[str, int]:
        return {"redis": self.port, "redis-bus": self.bus_port}

    def config(self) -> str:
        return super().config() + "\n".join([
            "cluster-enabled yes",
            "cluster-config-file nodes.conf",
            f"cluster-port {self.bus_port}",
            f"cluster-node-timeout {self.node_timeout_ms}",
            "repl-diskless-sync-delay 0",
            "",
        ])

    def call(self, *words: str, timeout: float = 2.0) -> object:
        """One command to this node (:func:`monitor.services.resp.call`)."""
        return call(LOOPBACK, self.port, *words, timeout=timeout)

    def info(self, section: str = "cluster") -> dict[str, str]:
        """``CLUSTER INFO`` (``section="cluster"``) or ``INFO <section>`` as name → value."""
        reply = self.call("CLUSTER", "INFO") if section == "cluster" else self.call("INFO", section)
        return fields(str(reply))


@dataclass(frozen=True)
class NodeView:
    """One line of ``CLUSTER NODES``: a node as the cluster sees it."""

    id: str
    port: int
    primary: bool
    failed: bool
    primary_id: str | None
    slots: tuple[tuple[int, int], ...]


def parse_nodes(text: str) -> list[NodeView]:
    """``CLUSTER NODES`` as :class:`NodeView` rows (importing/migrating slot markers are skipped)."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 8:
            continue
        flags = set(parts[2].split(","))
        address = parts[1].split("@", 1)[0]
        slots = []
        for item in parts[8:]:
            if item.startswith("["):
                continue
            low, _, high = item.partition("-")
            slots.append((int(low), int(high or low)))
        out.append(NodeView(parts[0], int(address.rsplit(":", 1)[1]), "master" in flags,
                            bool(flags & {"fail", "fail?"}), None if parts[3] == "-" else parts[3],
                            tuple(slots)))
    return out


def slot_ranges(primaries: int = PRIMARIES) -> list[tuple[int, int]]:
    """The slots of each primary: ``[(0, 5460), (5461, 10922), (10923, 16383)]`` for three."""
    edges = [round(i * SLOTS / primaries) for i in range(primaries + 1)]
    return [(edges[i], edges[i + 1] - 1) for i in range(primaries)]


class RedisClusterServer(ServerGroup):
    """Three primaries and ``replicas`` replicas of each (node ``3 + j`` replicates primary ``j % 3``)."""

    name: ClassVar[str] = "redis-cluster"
    ready_timeout: ClassVar[float] = 60.0

    def __init__(self, workdir: Path, ports: list[int], bus_ports: list[int], *, replicas: int = 0,
                 node_timeout_ms: int = NODE_TIMEOUT_MS) -> None:
        count = PRIMARIES * (1 + replicas)
        if replicas < 0 or len(ports) != count or len(bus_ports) != count:
            raise ServiceError(f"redis-cluster: {replicas} replicas per primary need {count} ports and "
                               f"{count} bus ports, got {len(ports)} and {len(bus_ports)}")
        self.replicas = replicas
        self.redis_nodes = [self.node(self.node_dir(workdir, self.name, i), port, bus, node_timeout_ms)
                            for i, (port, bus) in enumerate(zip(ports, bus_ports, strict=True))]
        super().__init__(workdir, self.redis_nodes)

    def node(self, folder: Path, port: int, bus_port: int, node_timeout_ms: int) -> RedisClusterNode:
        """One node of this cluster (a secured cluster's are secured)."""
        return RedisClusterNode(folder, port, bus_port, node_timeout_ms)

    @classmethod
    def from_ports(cls, workdir: Path, ports: Mapping[str, int], replicas: int = 0) -> RedisClusterServer:
        """The cluster on the ports recorded by ``up`` (``redis-cluster-<i>``, ``redis-cluster-bus-<i>``),
        or, for those not given, ``ports["redis-cluster"] + i`` and that plus 10,000 (Redis's own rule)."""
        count = PRIMARIES * (1 + replicas)
        base = ports.get(cls.name, 17000)
        clients = [ports.get(f"{cls.name}-{i}", base + i) for i in range(count)]
        buses = [ports.get(f"{cls.name}-bus-{i}", base + 10000 + i) for i in range(count)]
        if max(buses) > 65535:
            raise ServiceError(f"redis-cluster: bus ports up to {max(buses)} are not ports; choose a base "
                               f"port below {65535 - 10000 - count}")
        return cls(workdir, clients, buses, replicas=replicas)

    @staticmethod
    def replicas_in(ports: Mapping[str, int]) -> int:
        """How many replicas per primary the recorded ``ports`` describe."""
        nodes = sum(1 for role in ports if role.startswith("redis-cluster-") and "-bus-" not in role)
        return max(nodes // PRIMARIES - 1, 0)

    def seeds(self) -> str:
        """The primaries' ``host:port``, comma-separated, as a cluster URL lists them."""
        return ",".join(node.host_port for node in self.redis_nodes[:PRIMARIES])

    @property
    def address(self) -> str:
        return f"redis+cluster://{self.seeds()}/0"

    def primary_of(self, index: int) -> int:
        """The primary node that node ``index`` was set up to replicate (itself for a primary)."""
        return index if index < PRIMARIES else (index - PRIMARIES) % PRIMARIES

    def form(self) -> None:
        first = self.redis_nodes[0]
        if int(first.info().get("cluster_known_nodes", "1")) >= len(self.redis_nodes):
            return  # formed already (a restart): nodes.conf remembers it
        for index, (low, high) in enumerate(slot_ranges()):
            node = self.redis_nodes[index]
            with contextlib.suppress(RespError):  # it has an epoch already
                node.call("CLUSTER", "SET-CONFIG-EPOCH", str(index + 1))
            node.call("CLUSTER", "ADDSLOTSRANGE", str(low), str(high))
        for node in self.redis_nodes[1:]:
            node.call("CLUSTER", "MEET", LOOPBACK, str(first.port), str(first.bus_port))
        ids = [str(node.call("CLUSTER", "MYID")) for node in self.redis_nodes]
        deadline = time.monotonic() + self.ready_timeout
        for index in range(PRIMARIES, len(self.redis_nodes)):
            primary = ids[self.primary_of(index)]
            while True:
                try:
                    self.redis_nodes[index].call("CLUSTER", "REPLICATE", primary)
                    break
                except RespError:  # it does not know its primary yet: the gossip is still on its way
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)

    def topology(self) -> list[NodeView]:
        """``CLUSTER NODES`` from the first node that answers."""
        for node in self.redis_nodes:
            try:
                return parse_nodes(str(node.call("CLUSTER", "NODES")))
            except (OSError, ServiceError):
                continue
        raise ServiceError("redis-cluster: no node answers CLUSTER NODES")

    def primary_for_slot(self, slot: int) -> RedisClusterNode:
        """The node that serves ``slot`` now (after a failover, the promoted replica)."""
        for view in self.topology():
            if view.primary and not view.failed and any(low <= slot <= high for low, high in view.slots):
                return next(node for node in self.redis_nodes if node.port == view.port)
        raise ServiceError(f"redis-cluster: no live primary serves slot {slot}")

    def healthy(self, nodes: list[RedisClusterNode]) -> str | None:
        """None if each of ``nodes`` says the cluster is ok, all slots assigned, and each replica among
        them has its primary's link up; else what is not."""
        for node in nodes:
            try:
                info = node.info()
                if info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != str(SLOTS):
                    return f"node {node.port}: cluster_state {info.get('cluster_state')}, " \
                           f"{info.get('cluster_slots_ok')} slots ok"
                replication = node.info("replication")
                if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
                    return f"node {node.port}: replica link {replication.get('master_link_status')}"
            except (OSError, ServiceError) as error:
                return f"node {node.port}: {error}"
        return None

    def whole(self) -> str | None:
        """None if the cluster, as each node sees it, has its three primaries, each with its replicas, and
        no node failed; else what is missing."""
        for node in self.redis_nodes:
            try:
                views = parse_nodes(str(node.call("CLUSTER", "NODES")))
            except (OSError, ServiceError) as error:
                return f"node {node.port}: {error}"
            primaries = [v for v in views if v.primary and v.slots]
            followers = [v for v in views if not v.primary and v.primary_id in {p.id for p in primaries}]
            if len(views) != len(self.redis_nodes) or any(v.failed for v in views) \
                    or len(primaries) != PRIMARIES or len(followers) != PRIMARIES * self.replicas:
                return f"node {node.port} sees {len(primaries)} primaries, {len(followers)} replicas"
        return None

    def answers(self) -> bool:
        return self.healthy(self.redis_nodes) is None and self.whole() is None

    def why_not(self) -> str:
        return self.healthy(self.redis_nodes) or self.whole() or "healthy now"


ADMIN = "admin"
REPLICATION = "replication"
REPLICATION_ACL = "resetchannels -@all +psync +replconf +ping"
"""What the replication user may do: what a replica sends its primary (docs/worker.md quotes it)."""


@dataclass(frozen=True)
class Logins:
    """The TLS files and ACL users shared by every node of a :class:`SecureRedisClusterServer`."""

    tls: TlsFiles
    username: str
    password: str
    key_pattern: str
    client_auth: str
    admin_password: str
    replication_password: str

    def config(self) -> list[str]:
        """The lines a node's ``redis.conf`` adds to the plain node's ``tls_only`` one."""
        return [
            "tls-cluster yes",
            "tls-replication yes",
            acl_user(self.username, self.password, f"~{self.key_pattern} {WORKER_ACL}"),
            acl_user(ADMIN, self.admin_password, "~* &* +@all"),
            acl_user(REPLICATION, self.replication_password, REPLICATION_ACL),
            f"masteruser {REPLICATION}",
            f"masterauth {self.replication_password}",
            "",
        ]


class SecureRedisClusterNode(RedisClusterNode):
    """A node on a TLS port only, with the cluster's ACL users; set up and probed as ``admin``."""

    def __init__(self, folder: Path, port: int, bus_port: int, node_timeout_ms: int, logins: Logins) -> None:
        super().__init__(folder, port, bus_port, node_timeout_ms)
        self.logins = logins
        self._context: ssl.SSLContext | None = None

    def config(self) -> str:
        plain = tls_only(super().config(), self.port, self.logins.tls, self.logins.client_auth)
        return plain + "\n".join(self.logins.config())

    def write_config(self) -> None:
        super().write_config()
        (self.dir / "redis.conf").chmod(0o600)  # masterauth is the replication user's password itself

    def client_ssl_context(self) -> ssl.SSLContext:
        if self._context is None:
            self._context = self.logins.tls.client_context()
        return self._context

    def call(self, *words: str, timeout: float = 2.0) -> object:
        return call(LOOPBACK, self.port, *words, timeout=timeout, tls=self.client_ssl_context(),
                    auth=(ADMIN, self.logins.admin_password))

    def answers(self) -> bool:
        return ping_tls(LOOPBACK, self.port, self.client_ssl_context(), ADMIN, self.logins.admin_password)


class SecureRedisClusterServer(RedisClusterServer):
    """:class:`RedisClusterServer` secured (see the module docstring): ``username`` logs in with
    ``password`` and has :data:`~monitor.services.redis_server.WORKER_ACL` on the keys matching
    ``key_pattern``; ``client_auth`` is ``tls-auth-clients``. The CA and certificates (one server
    certificate for every node) are made in ``<dir>/tls``; the admin and replication passwords are new
    random ones."""

    def __init__(self, workdir: Path, ports: list[int], bus_ports: list[int], *, password: str,
                 username: str = "monitor", key_pattern: str = "*", client_auth: str = "yes",
                 replicas: int = 0, node_timeout_ms: int = NODE_TIMEOUT_MS) -> None:
        check_secured(username, password, key_pattern, client_auth)
        self.logins = Logins(TlsFiles(workdir / self.name / "tls"), username, password, key_pattern,
                             client_auth, secrets.token_urlsafe(24), secrets.token_urlsafe(24))
        super().__init__(workdir, ports, bus_ports, replicas=replicas, node_timeout_ms=node_timeout_ms)

    def node(self, folder: Path, port: int, bus_port: int, node_timeout_ms: int) -> RedisClusterNode:
        return SecureRedisClusterNode(folder, port, bus_port, node_timeout_ms, self.logins)

    @property
    def tls(self) -> TlsFiles:
        return self.logins.tls

    @property
    def username(self) -> str:
        return self.logins.username

    @property
    def password(self) -> str:
        return self.logins.password

    @property
    def passwords(self) -> list[str]:
        """Every password of the cluster: the worker's, admin's, the replication user's."""
        return [self.password, self.logins.admin_password, self.logins.replication_password]

    @property
    def port(self) -> int:
        """The first node's TLS port."""
        return self.redis_nodes[0].port

    @property
    def address(self) -> str:
        """``rediss+cluster://<username>@127.0.0.1:<p0>,...,/0``: without the password, so it can be shown."""
        return f"rediss+cluster://{self.username}@{self.seeds()}/0"

    def client_url(self) -> str:
        """The URL with the password in it: never print it."""
        return f"rediss+cluster://{self.username}:{self.password}@{self.seeds()}/0"

    def client_ssl_context(self) -> ssl.SSLContext:
        """Trusts the cluster's CA and presents the client certificate."""
        return self.tls.client_context()

    def prepare(self) -> None:
        make_tls_files(self.tls.folder)
        super().prepare()
