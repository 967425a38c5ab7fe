"""The worker on secured services: Kafka over SASL_SSL (SCRAM) and TLS, Redis over TLS as an ACL user.

One secured Kafka (:class:`SecureKafkaServer`: a SASL_SSL listener taking SCRAM-SHA-512, SCRAM-SHA-256
and PLAIN, and an SSL listener that requires a client certificate) and, in turn, two secured Redis stores
(the Redis tests run once on each, ``[redis-server]`` and ``[redis-cluster]``): one redis-server
(:class:`SecureRedisServer`) and a Redis Cluster of three primaries with a replica each
(:class:`SecureRedisClusterServer`, given to the worker as ``rediss+cluster://``), each node on a TLS
port only, client certificates required, the default user off, one ACL user with ``WORKER_ACL`` on
``e2e-*`` keys; the cluster's bus and replication over TLS too. A throwaway CA, free loopback ports, for
this module. It checks that:

* the services really are secured: plaintext clients, clients that do not trust the CA, wrong or
  missing passwords, the default Redis user, a missing client certificate are all refused, for the
  reason expected, on every node of the cluster, while the right credentials pass (so the refusals are
  not a broken server); a cluster's bus ports take TLS with a certificate of its CA only, and its
  replicas are linked;
* a ``monitor worker`` configured only through the documented ``MONITOR_*`` variables (SCRAM-SHA-512,
  passwords from files, ``rediss://`` or ``rediss+cluster://`` with a CA and a client certificate)
  drains a small simulated stream (produced by the harness over SCRAM-SHA-256) and exports the gauges
  ``MemoryPipeline`` computes in process for the same stream;
* ``monitor canary`` reads the secured Redis (password in the URL), ``monitor produce`` writes over the
  mutual-TLS listener (protocol SSL) and what it wrote is read back over SASL PLAIN;
* no password (Kafka's, the Redis user's, a cluster's admin and replication users') appears in the
  worker's whole debug log, its ``/metrics``, ``--check`` or the CLIs' output, also when a password is
  wrong.

``POST /deploys`` without or with a wrong bearer token is tested in test_worker_http.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import secrets
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError
from redis.exceptions import RedisError

from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.services.install import ensure_binaries
from monitor.services.kafka import SecureKafkaServer, metadata_brokers
from monitor.services.ports import LOOPBACK, free_port
from monitor.services.process import ServiceError
from monitor.services.redis_cluster import PRIMARIES, SecureRedisClusterServer
from monitor.services.redis_server import SecureRedisServer, ping, ping_tls
from monitor.sim import SimConfig, simulate
from monitor.store.client import connect
from monitor.store.memory import MemoryPipeline
from monitor.worker.security import KafkaSecurity
from tests.fixtures.services import LocalCluster, LocalService
from tests.support.worker_e2e import CONFIG, CONFIG_TOML, comparable, exported
from tests.support.worker_harness import Group, Samples, Stream, flush_events, parse_metrics, read_topic

pytestmark = pytest.mark.integration

USER = "monitor"


SecuredRedis = SecureRedisServer | SecureRedisClusterServer


def kafka_security(kafka: SecureKafkaServer, mechanism: str = "SCRAM-SHA-512",
                   password: str | None = None) -> KafkaSecurity:
    return KafkaSecurity("SASL_SSL", mechanism, USER, password or kafka.password, str(kafka.tls.ca))


@dataclass
class Secured:
    kafka: SecureKafkaServer
    redis: SecuredRedis
    folder: Path

    @property
    def secrets(self) -> list[str]:
        return [self.kafka.password, *self.redis.passwords]

    def kafka_security(self, mechanism: str = "SCRAM-SHA-512", password: str | None = None) -> KafkaSecurity:
        return kafka_security(self.kafka, mechanism, password)

    def worker_env(self) -> dict[str, str]:
        """The documented settings, passwords from files (as from a mounted Secret)."""
        kafka_password, redis_password = self.folder / "kafka.password", self.folder / "redis.password"
        kafka_password.write_text(self.kafka.password + "\n")
        redis_password.write_text(self.redis.password + "\n")
        tls = self.redis.tls
        return {"MONITOR_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "MONITOR_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
                "MONITOR_KAFKA_SASL_USERNAME": USER, "MONITOR_KAFKA_SASL_PASSWORD_FILE": str(kafka_password),
                "MONITOR_KAFKA_SSL_CAFILE": str(self.kafka.tls.ca),
                "MONITOR_REDIS_PASSWORD_FILE": str(redis_password), "MONITOR_REDIS_SSL_CAFILE": str(tls.ca),
                "MONITOR_REDIS_SSL_CERTFILE": str(tls.client_cert), "MONITOR_REDIS_SSL_KEYFILE": str(tls.client_key),
                "MONITOR_LOG_LEVEL": "debug"}


@contextlib.contextmanager
def started(service: LocalService | LocalCluster) -> Iterator[None]:
    """``service`` started (its binaries installed if missing), stopped at the end."""
    service.start()
    try:
        yield
    finally:
        service.stop()


@pytest.fixture(scope="module")
def secured_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafkaServer]:
    ensure_binaries(["openssl"])
    kafka = SecureKafkaServer(tmp_path_factory.mktemp("secured-kafka"), free_port(), free_port(),
                              mtls_port=free_port(), username=USER, password=secrets.token_urlsafe(24))
    with started(LocalService(kafka)):
        yield kafka


@pytest.fixture(scope="module", params=["redis-server", "redis-cluster"])
def secured_redis(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredRedis]:
    """One secured redis-server, then a secured Redis Cluster: three primaries with a replica each, every
    node, cluster bus and replication link over TLS, the worker's ACL user on every node."""
    ensure_binaries(["openssl"])
    folder = tmp_path_factory.mktemp(f"secured-{request.param}")
    options: dict[str, Any] = {"username": USER, "password": secrets.token_urlsafe(24), "key_pattern": "e2e-*",
                               "client_auth": "yes"}
    if request.param == "redis-server":
        server = SecureRedisServer(folder, free_port(), **options)
        with started(LocalService(server)):
            yield server
    else:
        count = PRIMARIES * 2
        cluster = SecureRedisClusterServer(folder, [free_port() for _ in range(count)],
                                           [free_port() for _ in range(count)], replicas=1, **options)
        with started(LocalCluster(cluster)):
            yield cluster


@pytest.fixture(scope="module")
def secured(secured_kafka: SecureKafkaServer, secured_redis: SecuredRedis,
            tmp_path_factory: pytest.TempPathFactory) -> Secured:
    return Secured(secured_kafka, secured_redis, tmp_path_factory.mktemp("secured"))


def admin_start(bootstrap: str, security: KafkaSecurity) -> list[str]:
    """Start an aiokafka admin client with ``security`` and list the topics (raises if refused)."""
    async def run() -> list[str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000,
                                    **security.aiokafka_options())
        try:
            await admin.start()
            return list(await admin.list_topics())
        finally:
            await admin.close()
    return asyncio.run(run())


def test_kafka_refuses_clients_without_the_right_credentials(secured_kafka: SecureKafkaServer,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    kafka, ca = secured_kafka, str(secured_kafka.tls.ca)
    mtls = f"{LOOPBACK}:{kafka.mtls_port}"
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"):  # the right credentials pass
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="aiokafka"):
            admin_start(kafka.host_port, kafka_security(kafka, mechanism))
        # aiokafka logs each request at DEBUG; PLAIN's holds the password, which the worker hides
        assert "SaslAuthenticateRequest" in caplog.text and kafka.password not in caplog.text, mechanism
    client = KafkaSecurity("SSL", ssl_cafile=ca, ssl_certfile=str(kafka.tls.client_cert),
                           ssl_keyfile=str(kafka.tls.client_key))
    admin_start(mtls, client)

    wrong = "not-" + kafka.password
    refused = [
        (kafka.host_port, KafkaSecurity(), "closed"),  # plaintext on the TLS port
        (kafka.host_port, replace(kafka_security(kafka), ssl_cafile=None), "CERTIFICATE_VERIFY_FAILED"),
        (kafka.host_port, KafkaSecurity("SSL", ssl_cafile=ca), "closed"),  # TLS but no login
        (kafka.host_port, kafka_security(kafka, "SCRAM-SHA-512", wrong), "Authentication failed"),
        (kafka.host_port, kafka_security(kafka, "SCRAM-SHA-256", wrong), "Authentication failed"),
        (kafka.host_port, kafka_security(kafka, "PLAIN", wrong), "Authentication failed"),
        (kafka.host_port, replace(kafka_security(kafka), sasl_username="intruder"), "Authentication failed"),
        (mtls, KafkaSecurity("SSL", ssl_cafile=ca), "closed"),  # no client certificate
    ]
    for bootstrap, security, reason in refused:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="aiokafka"), pytest.raises(KafkaConnectionError):
            admin_start(bootstrap, security)
        assert reason in caplog.text, (security, caplog.text)
        assert kafka.password not in caplog.text and wrong not in caplog.text

    # the raw protocol: no TLS gets no answer; TLS with a wrong PLAIN password is refused by name
    with pytest.raises(ConnectionError):
        metadata_brokers(LOOPBACK, kafka.port)
    with pytest.raises(ServiceError, match="error code 58"):
        metadata_brokers(LOOPBACK, kafka.port, tls=kafka.client_ssl_context(), sasl_plain=(USER, wrong))
    assert metadata_brokers(LOOPBACK, kafka.port, tls=kafka.client_ssl_context(),
                            sasl_plain=(USER, kafka.password)) == [(1, LOOPBACK, kafka.port)]


def test_redis_refuses_clients_without_the_right_credentials(secured_redis: SecuredRedis) -> None:
    redis = secured_redis
    tls = redis.tls
    ports = [n.port for n in redis.redis_nodes] if isinstance(redis, SecureRedisClusterServer) else [redis.port]
    for port in ports:  # on a cluster every node, replicas too
        assert not ping(LOOPBACK, port)  # plaintext on the TLS port
        assert not ping_tls(LOOPBACK, port, ssl.create_default_context(cafile=str(tls.ca)), USER,
                            redis.password)  # no client certificate
        assert not ping_tls(LOOPBACK, port, redis.client_ssl_context(), USER, "not-" + redis.password)
        assert ping_tls(LOOPBACK, port, redis.client_ssl_context(), USER, redis.password)
        with socket.create_connection((LOOPBACK, port), timeout=5) as raw, \
                redis.client_ssl_context().wrap_socket(raw, server_hostname=LOOPBACK) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")  # TLS with a certificate, but no AUTH
            assert sock.recv(256).startswith(b"-NOAUTH")
    if isinstance(redis, SecureRedisClusterServer):
        assert_cluster_links_are_tls(redis)

    files: dict[str, Any] = {"ssl_ca_certs": str(tls.ca), "ssl_certfile": str(tls.client_cert), "ssl_keyfile": str(tls.client_key)}

    async def attempt(url: str, command: tuple[str, ...] = ("PING",)) -> str:
        client = connect(url, socket_timeout=5, socket_connect_timeout=5, **files)
        try:
            return str(await client.execute_command(*command))
        except RedisError as error:
            return f"refused: {error}"
        finally:
            await client.aclose()

    scheme = urlsplit(redis.address).scheme  # rediss, or rediss+cluster with every primary
    hosts = redis.seeds() if isinstance(redis, SecureRedisClusterServer) else redis.host_port
    assert asyncio.run(attempt(redis.client_url())) == "True"
    wrong = "invalid username-password pair or user is disabled"
    nobody = asyncio.run(attempt(f"{scheme}://{hosts}/0"))  # NOAUTH (RESP2) or HELLO refused (RESP3)
    assert nobody.startswith("refused: ") and "authenticated" in nobody.replace("Authentication", "authenticated")
    for login in (f"{USER}:not-{redis.password}", f"default:{redis.password}"):  # default: off
        refused = asyncio.run(attempt(f"{scheme}://{login}@{hosts}/0"))
        assert refused.startswith("refused: ") and wrong in refused and redis.password not in refused
    # the ACL user: its keys only, and nothing dangerous
    assert asyncio.run(attempt(redis.client_url(), ("SET", "e2e-acl-probe", "1"))) == "True"
    assert "has no permissions" in asyncio.run(attempt(redis.client_url(), ("SET", "other-app:key", "1")))
    assert "has no permissions" in asyncio.run(attempt(redis.client_url(), ("FLUSHALL",)))
    assert "has no permissions" in asyncio.run(attempt(redis.client_url(), ("CONFIG GET", "requirepass")))


def assert_cluster_links_are_tls(cluster: SecureRedisClusterServer) -> None:
    """The nodes' own links are TLS too: each cluster bus port takes a TLS connection from a holder of a
    certificate of the cluster's CA only, and the replicas are linked to their primaries (whose only
    port is TLS, with the default user off: ``tls-replication`` and the replication user)."""
    for node in cluster.redis_nodes:
        with socket.create_connection((LOOPBACK, node.bus_port), timeout=5) as raw, \
                cluster.client_ssl_context().wrap_socket(raw, server_hostname=LOOPBACK) as sock:
            assert sock.version() in {"TLSv1.2", "TLSv1.3"}
        with socket.create_connection((LOOPBACK, node.bus_port), timeout=5) as raw, \
                ssl.create_default_context(cafile=str(cluster.tls.ca)).wrap_socket(
                    raw, server_hostname=LOOPBACK) as sock, pytest.raises(ssl.SSLError):
            sock.recv(16)  # no client certificate: the node ends the handshake (TLS 1.3: at the first read)
    views = cluster.topology()
    assert sum(not v.primary for v in views) == 3 and not any(v.failed for v in views)
    for node in cluster.redis_nodes:
        replication = node.info("replication")
        assert replication["role"] == "master" or replication["master_link_status"] == "up", replication


def expected_metrics(stream: Stream, seed: int, sessions: int) -> tuple[Samples, int]:
    """Simulate, compute the in-process exports (MemoryPipeline), produce the stream; (expected, messages)."""
    result = simulate(SimConfig(seed=seed, n_sessions=sessions, duration_s=2 * 3600, bucket_hint_share=1.0,
                                invalid_rate=0.02))
    events = [*result.events, *flush_events(stream, max(e.ts for e in result.events) + CONFIG.join_window + 1)]
    memory = MemoryPipeline(CONFIG, FOUR_LEVEL_SCALE, partitions=stream.partitions)
    for event in events:
        memory.submit(event.topic, event.key, event.value)
    expected = exported(memory)
    assert stream.send(events) == len(events)
    return expected, len(events)


def assert_relevance_equal(got: Samples, want: Samples) -> None:
    """Every relevance series of ``want`` (comparable ones, as in test_worker_e2e), and no other, equal."""
    names = {name for name, _ in want}
    got, want = comparable({k: v for k, v in got.items() if k[0] in names}), comparable(want)
    assert set(got) == set(want), (sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5])
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-9, nan_ok=True), key


def assert_no_secret(text: str, secured: Secured, where: str) -> None:
    for secret in secured.secrets:
        assert secret not in text, f"a password appears in {where}"


def test_worker_on_secured_services_exports_the_in_process_values_and_no_secret(
        secured: Secured, tmp_path: Path) -> None:
    kafka = secured.kafka
    stream = Stream(kafka.host_port, security=secured.kafka_security("SCRAM-SHA-256"))
    expected, messages = expected_metrics(stream, seed=31, sessions=400)
    group = Group(stream, secured.redis.address, tmp_path, "secured", CONFIG_TOML, extra_env=secured.worker_env())
    try:
        check = group.cli("worker", "--check")
        assert check.returncode == 0, check.stderr
        assert '"protocol": "SASL_SSL"' in check.stdout and '"sasl_password": "set"' in check.stdout
        assert '"password": "set"' in check.stdout  # Redis's, from the file
        cluster = isinstance(secured.redis, SecureRedisClusterServer)
        assert f'"cluster": {json.dumps(cluster)}' in check.stdout and '"tls": true' in check.stdout
        assert_no_secret(check.stdout + check.stderr, secured, "monitor worker --check")

        worker = group.start()
        group.drain()
        metrics = worker.metrics_text()
        got = parse_metrics(metrics)
        processing_errors = got.get(("search_relevance_dead_letters_total", (("reason", "processing_error"),)))
        assert not processing_errors, worker.failures()
        assert_relevance_equal(got, expected)
        scored = [v for (name, _), v in got.items() if name == "search_relevance_sessions_scored"]
        assert sum(scored) > 0 and sum(v for (n, _), v in got.items() if n == "search_relevance_events_total") >= messages
        assert got[("search_relevance_redis_memory_bytes", ())] > 0  # INFO memory under the ACL
        if isinstance(secured.redis, SecureRedisClusterServer):  # the state is spread over the three shards
            primaries = [n for n in secured.redis.redis_nodes if n.info("replication")["role"] == "master"]
            assert len(primaries) == PRIMARIES and all(int(str(n.call("DBSIZE"))) > 10 for n in primaries)
        assert_no_secret(metrics, secured, "/metrics")

        # monitor canary: the password in the URL this time; and a wrong one fails without showing it
        url = {"MONITOR_REDIS_URL": secured.redis.client_url(), "MONITOR_REDIS_PASSWORD_FILE": ""}
        canary = group.cli("canary", "--json", env=url)
        assert canary.returncode in (0, 1), canary.stderr  # 2: a bad setting, Redis refused, or nothing
        rows = json.loads(canary.stdout)
        assert rows and all(r["verdict"] and r["n_candidate"] > 0 for r in rows)
        wrong = "not-" + secured.redis.password
        refused = group.cli("canary", env={**url, "MONITOR_REDIS_URL": secured.redis.client_url().replace(
            secured.redis.password, wrong)})
        assert refused.returncode == 2 and "cannot read Redis" in refused.stderr, refused.stderr
        assert wrong not in refused.stderr + refused.stdout
        assert_no_secret(canary.stdout + canary.stderr + refused.stdout + refused.stderr, secured, "monitor canary")

        # monitor produce over the mutual-TLS listener (SSL, a client certificate), read back over SASL PLAIN
        topics = {role: f"e2e-{stream.tag}-produced-{role}" for role in
                  ("impressions", "annotations", "deploys", "dead-letters", "requests")}
        produced = group.cli("produce", "--sessions", "5", "--start", "1700000000", env={
            "MONITOR_KAFKA_BOOTSTRAP": f"{LOOPBACK}:{kafka.mtls_port}", "MONITOR_KAFKA_SECURITY_PROTOCOL": "SSL",
            "MONITOR_KAFKA_SASL_USERNAME": "", "MONITOR_KAFKA_SASL_PASSWORD_FILE": "",
            "MONITOR_KAFKA_SSL_CERTFILE": str(kafka.tls.client_cert),
            "MONITOR_KAFKA_SSL_KEYFILE": str(kafka.tls.client_key),
            **{f"MONITOR_TOPIC_{role.upper().replace('-', '_')}": name for role, name in topics.items()}})
        assert produced.returncode == 0, produced.stderr
        sent = int(re.search(r"run 0: (\d+) messages", produced.stderr).group(1))  # type: ignore[union-attr]
        plain = secured.kafka_security("PLAIN")
        back = sum(len(read_topic(kafka.host_port, topics[role], plain))
                   for role in ("impressions", "annotations", "deploys"))
        assert sent > 0 and back == sent
        assert_no_secret(produced.stdout + produced.stderr, secured, "monitor produce")
    finally:
        group.stop()
    log = worker.log.read_text(errors="replace")
    # the whole debug log, with the broker logins in it (their payloads hidden in the worker too)
    assert "DEBUG" in log and "SaslAuthenticateRequest_v1(sasl_auth_bytes=<hidden>)" in log
    assert_no_secret(log, secured, f"the worker's log ({worker.log})")
    assert group.restarts_seen() == []
