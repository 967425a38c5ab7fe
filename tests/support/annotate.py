"""The annotation bridge end to end: running the bridge, grading in Label Studio, waiting for requests to be
consumed.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from monitor.services.ports import free_port
from tests.fixtures.label_studio import LabelStudioHandle
from tests.support.worker_harness import Group, http_request, parse_metrics

SECRET = "s3cret-webhook-value-for-the-test"


@dataclass
class Bridge:
    group: Group
    handle: LabelStudioHandle
    workdir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    logs: list[Path] = field(default_factory=list)
    extra: dict[str, str] = field(default_factory=dict)
    """More settings for the bridge (e.g. ``MONITOR_ANNOTATE_SCOPE``)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        token_file = self.workdir / "ls-token"
        token_file.write_text(self.handle.access_token + "\n")
        return {**self.group.env(0), "MONITOR_LABEL_STUDIO_URL": self.handle.url,
                "MONITOR_LABEL_STUDIO_TOKEN_FILE": str(token_file), "MONITOR_ANNOTATE_SECRET": SECRET,
                "MONITOR_ANNOTATE_PORT": str(self.port), "MONITOR_ANNOTATE_PROJECT": self.group.app_id,
                "MONITOR_ANNOTATE_DOC_URL": "https://shop.example/item/{doc_id}",
                "MONITOR_ANNOTATE_RECONCILE_INTERVAL": "3600", "MONITOR_LOG_LEVEL": "info", **self.extra}

    def start(self) -> None:
        log = self.workdir / f"bridge-{len(self.logs)}.log"
        self.logs.append(log)
        self.process = subprocess.Popen([sys.executable, "-m", "monitor", "annotate"], env=self.env(),
                                        stdout=log.open("wb"), stderr=subprocess.STDOUT)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_text(self) -> str:
        return "\n".join(path.read_text(errors="replace") for path in self.logs)

    def metrics(self) -> dict[str, float]:
        samples = parse_metrics(http_request(f"{self.url}/metrics").body.decode())
        return {name + "".join(f"{{{v}}}" for _, v in labels): value for (name, labels), value in samples.items()}

    def ready(self) -> bool:
        try:
            return http_request(f"{self.url}/healthz", timeout=5).json().get("project") is not None
        except OSError:
            return False


def wait_for(what: str, probe: Any, seconds: float = 120.0, bridge: Bridge | None = None) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        result = probe()
        if result:
            return result
        if bridge is not None and bridge.process is not None and bridge.process.poll() is not None:
            pytest.fail(f"the bridge exited ({bridge.process.returncode}) while waiting for {what}:\n"
                        f"{bridge.log_text()[-4000:]}", pytrace=False)
        if time.monotonic() > deadline:
            extra = f"\n{bridge.log_text()[-4000:]}" if bridge else ""
            pytest.fail(f"{what} did not happen within {seconds:.0f} s{extra}", pytrace=False)
        time.sleep(0.2)


async def _requests_consumed(bootstrap: str, group: Group) -> bool:
    topic, consumer_group = group.outputs.requests, f"{group.app_id}-annotate"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await admin.start()
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(group.stream.partitions)]
        ends = await consumer.end_offsets(partitions)
        committed = {tp: meta.offset for tp, meta in (await admin.list_consumer_group_offsets(consumer_group)).items()}
        return all(committed.get(tp, 0) >= end for tp, end in ends.items())
    finally:
        await consumer.stop()
        await admin.close()


def requests_consumed(bootstrap: str, group: Group) -> bool:
    """The bridge's consumer group has committed the requests topic to its end (every request handled)."""
    return asyncio.run(_requests_consumed(bootstrap, group))


def grade(handle: LabelStudioHandle, task_id: int, name: str) -> int:
    """Annotate a task as an annotator would (Label Studio's API); the annotation's id."""
    body = handle.api("POST", f"/api/tasks/{task_id}/annotations", {"result": [
        {"from_name": "grade", "to_name": "query", "type": "choices", "value": {"choices": [name]}}]})
    return int(body["id"])
