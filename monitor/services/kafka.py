"""Apache Kafka in KRaft mode: one node that is both broker and controller, from the official jars.

Version: **3.9.2**, the last bug-fix release of the 3.9 line. Kafka 4.x removes the old client protocol
versions (KIP-896) and aiokafka, which faust-streaming and this project's tests use, still tracks 4.x
support as an open question (aio-libs/aiokafka#1085); 3.9 accepts every protocol version those clients
may negotiate, runs KRaft in production (ZooKeeper is not used here), and runs on the Java 17 the CI
machines have. The price is one extra line in the pom: the Maven artifact leaves the slf4j binding out,
so ``slf4j-reload4j`` is added by hand and logging is configured with a log4j 1.x properties file.

The jars come from :func:`monitor.services.install.ensure_kafka_jars`; storage is formatted once with
``kafka.tools.StorageTool format --ignore-formatted`` and the server runs as ``java ... kafka.Kafka
server.properties`` with a heap of at most 512 MiB. Readiness is a real Kafka Metadata request (v4,
supported by 3.x and 4.x brokers alike) that must list at least one broker.

:class:`SecureKafkaServer` is the same node with its client listeners secured (SASL_SSL with SCRAM and
PLAIN, and optionally SSL with client certificates), for the tests of the worker's security settings;
its readiness probe is the same Metadata request over TLS after a SASL PLAIN login.
"""

from __future__ import annotations

import base64
import os
import re
import socket
import ssl
import struct
import subprocess
import uuid
from pathlib import Path
from typing import ClassVar

from monitor.services.install import ensure_kafka_jars, kafka_libs, require_binary
from monitor.services.ports import LOOPBACK
from monitor.services.process import ServiceError, log_tails
from monitor.services.server import LocalServer
from monitor.services.tls import TlsFiles, make_tls_files

KAFKA_VERSION = "3.9.2"
HEAP = "512m"

_LOG4J = """\
# Written by monitor.services.kafka: broker logs in {logs}/server.log, kept small.
log4j.rootLogger=INFO, server
log4j.appender.server=org.apache.log4j.RollingFileAppender
log4j.appender.server.File=${{kafka.logs.dir}}/server.log
log4j.appender.server.MaxFileSize=10MB
log4j.appender.server.MaxBackupIndex=2
log4j.appender.server.layout=org.apache.log4j.PatternLayout
log4j.appender.server.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.kafka.log.LogCleaner=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.org.apache.kafka.controller=INFO
"""


def metadata_brokers(host: str, port: int, timeout: float = 2.0, *, tls: ssl.SSLContext | None = None,
                     sasl_plain: tuple[str, str] | None = None) -> list[tuple[int, str, int]]:
    """Send a Kafka Metadata request (v4, no topics) and return the brokers as (node id, host, port).

    Request: size, header v1 (api key 3, version 4, correlation id, client id), body (topics = null,
    allow_auto_topic_creation = false). Response v4: correlation id, throttle time, then the brokers
    array of (node_id int32, host string, port int32, rack nullable string); the rest is not read.
    With ``tls`` the connection is TLS (the context verifies the broker); with ``sasl_plain`` =
    (username, password) it first authenticates with SASL PLAIN (:func:`sasl_plain_authenticate`).
    """
    with socket.create_connection((host, port), timeout=timeout) as raw:
        sock = tls.wrap_socket(raw, server_hostname=host) if tls is not None else raw
        with sock:
            correlation_id = 1
            if sasl_plain is not None:
                sasl_plain_authenticate(sock, *sasl_plain)
                correlation_id = 3
            data = _call(sock, 3, 4, struct.pack(">ib", -1, 0), correlation_id)
    _throttle, count = struct.unpack_from(">ii", data, 0)
    offset, brokers = 8, []
    for _ in range(count):
        node_id, host_length = struct.unpack_from(">ih", data, offset)
        offset += 6
        broker_host = data[offset : offset + host_length].decode()
        offset += host_length
        broker_port, rack_length = struct.unpack_from(">ih", data, offset)
        offset += 6 + max(rack_length, 0)
        brokers.append((node_id, broker_host, broker_port))
    return brokers


def sasl_plain_authenticate(sock: socket.socket, username: str, password: str) -> None:
    """SASL PLAIN on a fresh Kafka connection: SaslHandshake v1 (api key 17, the mechanism), then
    SaslAuthenticate v0 (api key 36, ``\\0username\\0password``); :class:`ServiceError` if refused.

    Responses: handshake (error code int16, enabled mechanisms), authenticate (error code int16, error
    message nullable string, server bytes). Correlation ids 1 and 2.
    """
    mechanism = b"PLAIN"
    data = _call(sock, 17, 1, struct.pack(">h", len(mechanism)) + mechanism, 1)
    (error,) = struct.unpack_from(">h", data, 0)
    if error:
        raise ServiceError(f"Kafka does not accept SASL PLAIN here (error code {error})")
    token = b"\0" + username.encode() + b"\0" + password.encode()
    data = _call(sock, 36, 0, struct.pack(">i", len(token)) + token, 2)
    error, length = struct.unpack_from(">hh", data, 0)
    if error:
        message = data[4 : 4 + length].decode(errors="replace") if length > 0 else ""
        raise ServiceError(f"Kafka refused SASL PLAIN for {username!r} (error code {error}: {message})")


def _call(sock: socket.socket, api_key: int, version: int, body: bytes, correlation_id: int) -> bytes:
    """One request with a v1 header; the response body after its correlation id (which is checked)."""
    client_id = b"monitor-services-probe"
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
    (size,) = struct.unpack(">i", _read_exactly(sock, 4))
    data = _read_exactly(sock, size)
    (answered,) = struct.unpack_from(">i", data, 0)
    if answered != correlation_id:
        raise ServiceError(f"Kafka answered correlation id {answered}, expected {correlation_id}")
    return data[4:]


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = sock.recv(remaining)
        if not chunk:
            raise ConnectionError("Kafka closed the connection mid-response")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, not starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class KafkaServer(LocalServer):
    """Kafka broker and KRaft controller in one JVM: clients use ``port``, the quorum ``controller_port``."""

    name: ClassVar[str] = "kafka"
    ready_timeout: ClassVar[float] = 90.0

    def __init__(self, workdir: Path, port: int, controller_port: int, version: str = KAFKA_VERSION):
        super().__init__(workdir, port)
        self.controller_port = controller_port
        self.version = version

    def ports(self) -> dict[str, int]:
        return {"kafka": self.port, "kafka-controller": self.controller_port}

    def log_paths(self) -> list[Path]:
        return [self.dir / "storage-format.log", self.log_path, self.dir / "logs" / "server.log"]

    def listener_properties(self) -> list[str]:
        """The lines of ``server.properties`` that define the listeners (and their security)."""
        return [
            f"listeners=PLAINTEXT://{LOOPBACK}:{self.port},CONTROLLER://{LOOPBACK}:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://{LOOPBACK}:{self.port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        ]

    node_id: int = 1

    def quorum_voters(self) -> str:
        """``controller.quorum.voters``: this node alone (a cluster's nodes name all three)."""
        return f"{self.node_id}@{LOOPBACK}:{self.controller_port}"

    def replication_properties(self) -> list[str]:
        """The lines of ``server.properties`` about replication: one copy of everything on one node."""
        return [
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "min.insync.replicas=1",
        ]

    def properties(self) -> str:
        """The contents of ``server.properties``."""
        return "\n".join(
            [
                "# Written by monitor.services.kafka: KRaft, broker and controller combined.",
                "process.roles=broker,controller",
                f"node.id={self.node_id}",
                f"controller.quorum.voters={self.quorum_voters()}",
                *self.listener_properties(),
                f"log.dirs={self.dir / 'data'}",
                "num.partitions=1",
                "auto.create.topics.enable=true",
                "offsets.topic.num.partitions=8",
                *self.replication_properties(),
                "group.initial.rebalance.delay.ms=0",
                "log.retention.hours=24",
                "",
            ]
        )

    def _java(self, main_class: str, *args: str) -> list[str]:
        logs = self.dir / "logs"
        return [
            require_binary("java"),
            f"-Xmx{HEAP}",
            f"-Xms{HEAP}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={logs}",
            f"-Dlog4j.configuration=file:{self.dir / 'log4j.properties'}",
            "-cp",
            f"{kafka_libs(self.version)}/*",
            main_class,
            *args,
        ]

    @property
    def cluster_id(self) -> str:
        """The cluster id this folder's storage is (or will be) formatted with."""
        return (self.dir / "cluster.id").read_text().strip()

    def write_config(self) -> None:
        """``server.properties``, ``log4j.properties`` and, the first time, a new ``cluster.id``."""
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        (self.dir / "server.properties").write_text(self.properties())
        (self.dir / "log4j.properties").write_text(_LOG4J.format(logs=self.dir / "logs"))
        cluster_file = self.dir / "cluster.id"
        if not cluster_file.exists():
            cluster_file.write_text(new_cluster_id() + "\n")

    def prepare(self) -> None:
        """Make sure the jars are cached, write the configuration and format storage (once)."""
        ensure_kafka_jars(self.version)
        super().prepare()
        if (self.dir / "data" / "meta.properties").exists():
            return
        argv = self._java(
            "kafka.tools.StorageTool", "format", "--ignore-formatted",
            "--cluster-id", self.cluster_id, "--config", str(self.dir / "server.properties"),
            *self.format_arguments(),
        )  # fmt: skip
        with (self.dir / "storage-format.log").open("wb") as log:
            done = subprocess.run(
                argv, cwd=self.dir, stdout=log, stderr=subprocess.STDOUT, timeout=120, check=False,
                env={**os.environ, "LOG_DIR": str(self.dir / "logs")},
            )  # fmt: skip
        if done.returncode != 0:
            raise ServiceError(
                f"kafka: StorageTool format failed (exit status {done.returncode})\n"
                + log_tails([self.dir / "storage-format.log"])
            )

    def format_arguments(self) -> list[str]:
        """More arguments of ``StorageTool format`` (none here; SCRAM users in the secured server)."""
        return []

    def argv(self) -> list[str]:
        return self._java("kafka.Kafka", str(self.dir / "server.properties"))

    def answers(self) -> bool:
        try:
            return bool(metadata_brokers(LOOPBACK, self.port, timeout=1.0))
        except (OSError, struct.error, ServiceError):
            return False


_SAFE = re.compile(r"[A-Za-z0-9_.~-]+")  # nothing to quote in JAAS or --add-scram
SASL_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")


class SecureKafkaServer(KafkaServer):
    """Kafka that clients reach over TLS only: SASL_SSL on ``port`` and, with ``mtls_port``, SSL with a
    client certificate (mutual TLS) there.

    The SASL_SSL listener (``CLIENTS``) accepts SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN for one user,
    ``username`` with ``password``: the SCRAM credentials are written into the metadata log when storage
    is formatted (``StorageTool format --add-scram``), PLAIN's are in the listener's JAAS configuration;
    inter-broker traffic uses this listener too (SCRAM-SHA-512, same user). The ``MTLS`` listener requires
    a certificate signed by the throwaway CA (:mod:`.tls`, in ``<dir>/tls``; ``tls.ca`` is what clients
    trust, ``tls.client_cert`` / ``tls.client_key`` what they present). The KRaft controller listener stays
    PLAINTEXT on loopback: it serves the quorum, not clients. No authorizer: any authenticated client may
    do anything. A folder formatted with one password needs the same password after a restart.
    """

    def __init__(self, workdir: Path, port: int, controller_port: int, *, password: str,
                 username: str = "monitor", mtls_port: int | None = None, version: str = KAFKA_VERSION):
        super().__init__(workdir, port, controller_port, version)
        for what, value in (("username", username), ("password", password)):
            if not _SAFE.fullmatch(value):
                raise ServiceError(f"kafka: the {what} may only hold A-Z a-z 0-9 _ . ~ -")
        self.username = username
        self.password = password
        self.mtls_port = mtls_port
        self.tls = TlsFiles(self.dir / "tls")

    def ports(self) -> dict[str, int]:
        return {**super().ports(), **({"kafka-mtls": self.mtls_port} if self.mtls_port else {})}

    def client_ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts this server's CA (and verifies its host name)."""
        return ssl.create_default_context(cafile=str(self.tls.ca))

    def listener_properties(self) -> list[str]:
        listeners = [f"CLIENTS://{LOOPBACK}:{self.port}", f"CONTROLLER://{LOOPBACK}:{self.controller_port}"]
        advertised = [f"CLIENTS://{LOOPBACK}:{self.port}"]
        if self.mtls_port:
            listeners.append(f"MTLS://{LOOPBACK}:{self.mtls_port}")
            advertised.append(f"MTLS://{LOOPBACK}:{self.mtls_port}")
        login = f'username="{self.username}" password="{self.password}"'
        scram = f"org.apache.kafka.common.security.scram.ScramLoginModule required {login};"
        plain = (f"org.apache.kafka.common.security.plain.PlainLoginModule required {login} "
                 f'user_{self.username}="{self.password}";')
        return [
            f"listeners={','.join(listeners)}",
            f"advertised.listeners={','.join(advertised)}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=CLIENTS",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,CLIENTS:SASL_SSL,MTLS:SSL",
            f"sasl.enabled.mechanisms={','.join(SASL_MECHANISMS)}",
            "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
            f"listener.name.clients.scram-sha-512.sasl.jaas.config={scram}",
            f"listener.name.clients.scram-sha-256.sasl.jaas.config={scram}",
            f"listener.name.clients.plain.sasl.jaas.config={plain}",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={self.tls.keystore}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={self.tls.ca}",
            "ssl.client.auth=none",
            "listener.name.mtls.ssl.client.auth=required",
        ]

    def write_config(self) -> None:
        make_tls_files(self.tls.folder)
        super().write_config()
        (self.dir / "server.properties").chmod(0o600)  # it holds the password

    def format_arguments(self) -> list[str]:
        user = f"name={self.username},password={self.password}"
        return [argument for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256")
                for argument in ("--add-scram", f"{mechanism}=[{user}]")]

    def answers(self) -> bool:
        try:
            return bool(metadata_brokers(LOOPBACK, self.port, timeout=2.0, tls=self.client_ssl_context(),
                                         sasl_plain=(self.username, self.password)))
        except (OSError, struct.error, ServiceError):
            return False
