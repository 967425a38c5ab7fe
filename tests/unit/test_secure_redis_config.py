"""The secured Redis of monitor/services without a server: what a secured cluster node's ``redis.conf`` says
(TLS on every link, the default user off, passwords hashed), the URLs it gives, and that docs/worker.md
quotes the ACLs the tests run with. test_worker_security.py runs them for real."""

from __future__ import annotations

import hashlib
from pathlib import Path

from monitor.services.redis_cluster import (
    ADMIN,
    PRIMARIES,
    REPLICATION,
    REPLICATION_ACL,
    SecureRedisClusterNode,
    SecureRedisClusterServer,
)
from monitor.services.redis_server import WORKER_ACL, SecureRedisServer
from monitor.store.client import cluster_seeds, is_cluster_url

DOCS = Path(__file__).resolve().parents[2] / "docs" / "worker.md"
PASSWORD = "w0rker-pw"


def secured_cluster(tmp_path: Path) -> SecureRedisClusterServer:
    ports, buses = list(range(41000, 41006)), list(range(42000, 42006))
    return SecureRedisClusterServer(tmp_path, ports, buses, password=PASSWORD, key_pattern="srm:*", replicas=1)


def sha(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def test_a_secured_cluster_node_speaks_tls_only_on_every_link(tmp_path: Path) -> None:
    cluster = secured_cluster(tmp_path)
    logins = cluster.logins
    assert len(cluster.redis_nodes) == 2 * PRIMARIES
    assert len({logins.admin_password, logins.replication_password, PASSWORD}) == 3  # new random ones
    for node in cluster.redis_nodes:
        assert isinstance(node, SecureRedisClusterNode)
        lines = node.config().splitlines()
        assert "port 0" in lines and f"port {node.port}" not in lines  # no plaintext port
        for line in (f"tls-port {node.port}", f"cluster-port {node.bus_port}", "cluster-enabled yes",
                     "tls-cluster yes", "tls-replication yes", "tls-auth-clients yes", "user default off",
                     f"tls-ca-cert-file {cluster.tls.ca}",
                     f"user monitor on #{sha(PASSWORD)} ~srm:* {WORKER_ACL}",
                     f"user {ADMIN} on #{sha(logins.admin_password)} ~* &* +@all",
                     f"user {REPLICATION} on #{sha(logins.replication_password)} {REPLICATION_ACL}",
                     f"masteruser {REPLICATION}", f"masterauth {logins.replication_password}"):
            assert line in lines, (line, node.dir)
        text = node.config()
        assert PASSWORD not in text and logins.admin_password not in text  # hashed; masterauth must be plain
        assert node.dir.parent == cluster.dir and cluster.tls.folder.parent == cluster.dir  # one CA for all


def test_the_secured_cluster_url_lists_the_primaries_and_shows_no_password(tmp_path: Path) -> None:
    cluster = secured_cluster(tmp_path)
    assert PASSWORD not in cluster.address and cluster.address.startswith("rediss+cluster://monitor@")
    assert set(cluster.passwords) == {PASSWORD, cluster.logins.admin_password,
                                      cluster.logins.replication_password}
    first, seeds = cluster_seeds(cluster.client_url())
    assert is_cluster_url(cluster.client_url())
    assert first == f"rediss://monitor:{PASSWORD}@127.0.0.1:41000/0"
    assert seeds == [("127.0.0.1", port) for port in (41000, 41001, 41002)]
    assert SecureRedisServer(tmp_path, 41010, password=PASSWORD).passwords == [PASSWORD]


def test_docs_quote_the_acls_the_secured_servers_run_with() -> None:
    text = DOCS.read_text()
    assert f"user monitor on >PASSWORD ~srm:* {WORKER_ACL}\n" in text
    assert f"user {REPLICATION} on >PASSWORD {REPLICATION_ACL}\n" in text
