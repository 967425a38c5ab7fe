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
"""

from __future__ import annotations

import base64
import os
import socket
import struct
import subprocess
import uuid
from pathlib import Path
from typing import ClassVar

from monitor.services.install import ensure_kafka_jars, kafka_libs, require_binary
from monitor.services.ports import LOOPBACK
from monitor.services.process import ServiceError, log_tails
from monitor.services.server import LocalServer

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


def metadata_brokers(host: str, port: int, timeout: float = 2.0) -> list[tuple[int, str, int]]:
    """Send a Kafka Metadata request (v4, no topics) and return the brokers as (node id, host, port).

    Request: size, header v1 (api key 3, version 4, correlation id, client id), body (topics = null,
    allow_auto_topic_creation = false). Response v4: correlation id, throttle time, then the brokers
    array of (node_id int32, host string, port int32, rack nullable string); the rest is not read.
    """
    client_id = b"monitor-services-probe"
    body = struct.pack(">hhih", 3, 4, 1, len(client_id)) + client_id + struct.pack(">ib", -1, 0)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", _read_exactly(sock, 4))
        data = _read_exactly(sock, size)
    correlation_id, _throttle, count = struct.unpack_from(">iii", data, 0)
    if correlation_id != 1:
        raise ServiceError(f"Kafka answered correlation id {correlation_id}, expected 1")
    offset, brokers = 12, []
    for _ in range(count):
        node_id, host_length = struct.unpack_from(">ih", data, offset)
        offset += 6
        broker_host = data[offset : offset + host_length].decode()
        offset += host_length
        broker_port, rack_length = struct.unpack_from(">ih", data, offset)
        offset += 6 + max(rack_length, 0)
        brokers.append((node_id, broker_host, broker_port))
    return brokers


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = sock.recv(remaining)
        if not chunk:
            raise ConnectionError("Kafka closed the connection mid-response")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _new_cluster_id() -> str:
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

    def properties(self) -> str:
        """The contents of ``server.properties``."""
        return "\n".join(
            [
                "# Written by monitor.services.kafka: single-node KRaft, broker and controller combined.",
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@{LOOPBACK}:{self.controller_port}",
                f"listeners=PLAINTEXT://{LOOPBACK}:{self.port},CONTROLLER://{LOOPBACK}:{self.controller_port}",
                f"advertised.listeners=PLAINTEXT://{LOOPBACK}:{self.port}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                f"log.dirs={self.dir / 'data'}",
                "num.partitions=1",
                "auto.create.topics.enable=true",
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=8",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "min.insync.replicas=1",
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
            cluster_file.write_text(_new_cluster_id() + "\n")

    def prepare(self) -> None:
        """Make sure the jars are cached, write the configuration and format storage (once)."""
        ensure_kafka_jars(self.version)
        super().prepare()
        if (self.dir / "data" / "meta.properties").exists():
            return
        argv = self._java(
            "kafka.tools.StorageTool", "format", "--ignore-formatted",
            "--cluster-id", self.cluster_id, "--config", str(self.dir / "server.properties"),
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

    def argv(self) -> list[str]:
        return self._java("kafka.Kafka", str(self.dir / "server.properties"))

    def answers(self) -> bool:
        try:
            return bool(metadata_brokers(LOOPBACK, self.port, timeout=1.0))
        except (OSError, struct.error, ServiceError):
            return False
