"""faust-streaming, end to end on the real broker: a worker's agent reads one topic and writes another."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from tests.support.kafka_admin import create_topic

pytestmark = pytest.mark.integration

APP = Path(__file__).with_name("faust_relay_app.py")
EVENTS = 200


def stop_worker(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


async def test_faust_agent_relays_a_topic_into_another(kafka_bootstrap: str, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    source, sink = f"relay-in-{run}", f"relay-out-{run}"
    await create_topic(kafka_bootstrap, source, 1)
    await create_topic(kafka_bootstrap, sink, 1)
    env = {
        **os.environ,
        "RELAY_APP_ID": f"relay-{run}",
        "RELAY_BOOTSTRAP": kafka_bootstrap,
        "RELAY_DATADIR": str(tmp_path / "faust"),
        "RELAY_SOURCE": source,
        "RELAY_SINK": sink,
    }
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, str(APP), "worker", "--loglevel", "info"],
            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
        await producer.start()
        try:
            for index in range(EVENTS):
                event = {"session_id": f"s{index}", "score": index / 10}
                await producer.send(source, key=f"s{index}".encode(), value=json.dumps(event).encode())
            await producer.flush()
        finally:
            await producer.stop()

        consumer = AIOKafkaConsumer(
            sink, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
        )
        await consumer.start()
        relayed: dict[str, dict[str, object]] = {}
        try:
            async with asyncio.timeout(120):
                while len(relayed) < EVENTS:
                    assert worker.poll() is None, "the faust worker exited:\n" + log_path.read_text()[-4000:]
                    batches = await consumer.getmany(timeout_ms=1000)
                    for records in batches.values():
                        for record in records:
                            value = json.loads(record.value)
                            relayed[value["session_id"]] = value
        except TimeoutError:
            pytest.fail(
                f"{len(relayed)} of {EVENTS} relayed in 120 s; worker log:\n{log_path.read_text()[-4000:]}"
            )
        finally:
            await consumer.stop()
    finally:
        stop_worker(worker)

    assert sorted(relayed) == sorted(f"s{index}" for index in range(EVENTS))
    for index in range(EVENTS):
        value = relayed[f"s{index}"]
        assert value["doubled"] == pytest.approx(2 * index / 10)
        assert value["relayed_by"] == f"relay-{run}"
