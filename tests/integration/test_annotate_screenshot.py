"""The labelling page as annotators see it: headless Chromium (Debian's package) against a real Label Studio.

The task is made by the documented path of a document's text (docs/annotate.md, "What annotators
see"): an impression whose results carry a title, a snippet and a URL is sampled by the stream's core
(:class:`~monitor.store.memory.MemoryPipeline`), its annotation request is published as the worker
publishes it (:func:`~monitor.worker.outbox.request_json`), and the bridge (real Redis, a personal access
token) sets up the project and imports the task. The browser logs in as the admin, opens the task's
labelling page, waits until it shows the query, the document and the four grades, and takes a
1280 × 800 screenshot. ``MONITOR_UPDATE_SCREENSHOTS=1`` writes it to docs/annotate-labelling-page.png
(the picture in docs/annotate.md); the committed one is checked to be there, a PNG of that size.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import struct
import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image
from prometheus_client import CollectorRegistry

from monitor.annotate.bridge import Bridge
from monitor.annotate.client import LabelStudio
from monitor.annotate.metrics import BridgeMetrics
from monitor.annotate.settings import AnnotateSettings
from monitor.annotate.tasks import Document, pair_key
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.store.client import connect
from monitor.store.memory import MemoryPipeline
from monitor.worker.outbox import request_json
from monitor.worker.settings import WorkerSettings
from tests.fixtures.label_studio import LabelStudioHandle, label_studio  # noqa: F401 (fixture)
from tests.integration.browser import screenshot

pytestmark = pytest.mark.integration

DOCS_PICTURE = Path(__file__).resolve().parents[2] / "docs" / "annotate-labelling-page.png"
WIDTH, HEIGHT = 1280, 800
QUERY = "蓝牙耳机 降噪"
DOCUMENT = Document(title="Wireless earbuds with active noise cancelling",
                    snippet="40 h battery, Bluetooth 5.3, IPX4", url="https://shop.example/item/d-17")
IMPRESSION = {"type": "impression", "session_id": "s-1842", "query": QUERY, "ranker": "ranker-a",
              "variant": "control", "query_bucket": "tail", "ts": 1795518000.0, "results": [
                  {"doc_id": "d-17", "position": 1, "score": 3.2, "title": DOCUMENT.title,
                   "snippet": DOCUMENT.snippet, "url": DOCUMENT.url}]}


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


async def make_task(handle: LabelStudioHandle, redis_url: str) -> tuple[int, int]:
    """The task of the impression's one document, made by the worker's core and the bridge."""
    pipeline = MemoryPipeline(StreamConfig(join_window=300), FOUR_LEVEL_SCALE, clock=lambda: None)
    pipeline.submit("impressions", b"s-1842", json.dumps(IMPRESSION, ensure_ascii=False).encode())
    (request,) = pipeline.requests
    tag = uuid.uuid4().hex[:6]
    worker = replace(WorkerSettings(), redis_url=redis_url, redis_prefix=f"screenshot-{tag}")
    settings = AnnotateSettings(worker=worker, label_studio_url=handle.url, label_studio_token=handle.access_token,
                                secret="sec", project=f"Search relevance {tag}",
                                webhook_url="http://127.0.0.1:9/webhook")
    redis = connect(redis_url)
    metrics = BridgeMetrics(CollectorRegistry())
    try:
        async with LabelStudio(handle.url, handle.access_token) as ls:
            bridge = Bridge(settings, ls, redis, _no_grades, metrics)
            project = await bridge.setup()
            await bridge.handle_requests([request_json(request)])
            task = await redis.hget(bridge._key("tasks"), pair_key(QUERY, "d-17"))
    finally:
        await redis.aclose()
    assert task is not None and metrics.tasks_without_text._value.get() == 0
    return project, int(task)


async def _no_grades(key: bytes, value: bytes) -> None:
    raise AssertionError("no grade is produced here")


def test_the_labelling_page_shows_the_query_the_document_and_the_four_grades(
        label_studio: LabelStudioHandle, redis_url: str, tmp_path: Path) -> None:  # noqa: F811 (the fixture)
    project, task = asyncio.run(make_task(label_studio, redis_url))
    url = f"{label_studio.url}/projects/{project}/data?task={task}"
    wanted = [QUERY, DOCUMENT.title or "", DOCUMENT.snippet or "", DOCUMENT.url or "", "id: d-17",
              "高 high", "中 medium", "低 low", "无 none"]
    png, text = screenshot(url, label_studio.session_cookies(), wanted, WIDTH, HEIGHT)
    assert all(w in text for w in wanted)
    (tmp_path / "labelling-page.png").write_bytes(png)
    assert png_size(png) == (WIDTH, HEIGHT) and len(png) > 20_000
    pixels = image.imread(tmp_path / "labelling-page.png")
    assert pixels.shape[:2] == (HEIGHT, WIDTH)
    dark = (pixels[..., :3].mean(axis=2) < 0.4).mean()  # text and controls on a light page
    assert 0.005 < dark < 0.5 and float(np.std(pixels[..., :3])) > 0.05
    if os.environ.get("MONITOR_UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(tmp_path / "labelling-page.png", DOCS_PICTURE)
    assert png_size(DOCS_PICTURE.read_bytes()) == (WIDTH, HEIGHT) and DOCS_PICTURE.stat().st_size > 20_000
