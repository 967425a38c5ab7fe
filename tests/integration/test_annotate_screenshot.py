"""The labelling page as annotators see it: headless Chromium (Debian's package) against a real Label Studio.

The project and the task are made with the bridge's own client, labelling config and task data
(monitor/annotate), through a personal access token. The browser logs in as the admin, opens the task's
labelling page, waits until it shows the query, the document and the four grades, and takes a
1280 × 800 screenshot. ``MONITOR_UPDATE_SCREENSHOTS=1`` writes it to docs/annotate-labelling-page.png
(the picture in docs/annotate.md); the committed one is checked to be there, a PNG of that size.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import struct
import uuid
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image

from monitor.annotate.client import LabelStudio
from monitor.annotate.tasks import LABEL_CONFIG, Document, task_data
from tests.fixtures.label_studio import LabelStudioHandle, label_studio  # noqa: F401 (fixture)
from tests.integration.browser import screenshot

pytestmark = pytest.mark.integration

DOCS_PICTURE = Path(__file__).resolve().parents[2] / "docs" / "annotate-labelling-page.png"
WIDTH, HEIGHT = 1280, 800
QUERY = "蓝牙耳机 降噪"
REQUEST = {"type": "annotation_request", "session_id": "s-1842", "query": QUERY, "query_bucket": "tail",
           "doc_ids": ["d-17"]}
DOCUMENT = Document(title="Wireless earbuds with active noise cancelling",
                    snippet="40 h battery, Bluetooth 5.3, IPX4", url="https://shop.example/item/d-17")


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


async def make_task(handle: LabelStudioHandle) -> tuple[int, int]:
    async with LabelStudio(handle.url, handle.access_token) as ls:
        project = await ls.find_or_create_project(f"Search relevance {uuid.uuid4().hex[:6]}", LABEL_CONFIG)
        task = await ls.create_task(project, task_data(REQUEST, "d-17", DOCUMENT, ["s-1842", "s-1907"]))
    return project, task


def test_the_labelling_page_shows_the_query_the_document_and_the_four_grades(
        label_studio: LabelStudioHandle, tmp_path: Path) -> None:  # noqa: F811 (the fixture)
    project, task = asyncio.run(make_task(label_studio))
    url = f"{label_studio.url}/projects/{project}/data?task={task}"
    wanted = [QUERY, DOCUMENT.title or "", "id: d-17", "高 high", "中 medium", "低 low", "无 none"]
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
