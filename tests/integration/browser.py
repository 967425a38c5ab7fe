"""Headless Chromium (Debian's ``chromium``) driven over the DevTools protocol, for page screenshots.

:func:`screenshot` starts a browser with a throw-away profile, sets cookies (a logged-in session), opens a
URL, waits until the page's text holds every wanted string, and returns the PNG and the page's text.
Only aiohttp (a test dependency already) talks to the browser; no Selenium, no Playwright.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from monitor.services.install import require_binary
from monitor.services.label_studio import ensure_browser
from monitor.services.ports import free_port


class Page:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self.ids)
        await self.ws.send_str(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads((await self.ws.receive()).data)
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))

    async def text(self) -> str:
        result = await self.call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''",
                                 returnByValue=True)
        return str(result.get("result", {}).get("value", ""))


async def _screenshot(url: str, cookies: Sequence[dict[str, Any]], wanted: Sequence[str], width: int,
                      height: int, timeout: float, profile: Path) -> tuple[bytes, str]:
    ensure_browser()
    port = free_port()
    browser = subprocess.Popen([require_binary("chromium"), "--headless=new", "--no-sandbox", "--disable-gpu",
                                "--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars",
                                f"--remote-debugging-port={port}", "--remote-debugging-address=127.0.0.1",
                                f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + 60
            while True:
                try:
                    async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
                        targets = [t for t in await response.json() if t.get("type") == "page"]
                    if targets:
                        break
                except aiohttp.ClientError:
                    pass
                if time.monotonic() > deadline or browser.poll() is not None:
                    raise RuntimeError("chromium's DevTools endpoint did not answer")
                await asyncio.sleep(0.2)
            async with session.ws_connect(targets[0]["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                page = Page(ws)
                await page.call("Network.enable")
                for cookie in cookies:
                    await page.call("Network.setCookie", **cookie)
                await page.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                                deviceScaleFactor=1, mobile=False)
                await page.call("Page.enable")
                await page.call("Page.navigate", url=url)
                deadline = time.monotonic() + timeout
                text = ""
                while not all(w in text for w in wanted):
                    if time.monotonic() > deadline:
                        missing = [w for w in wanted if w not in text]
                        raise AssertionError(f"{url} did not show {missing} within {timeout:.0f} s; "
                                             f"it shows: {text[:1500]!r}")
                    await asyncio.sleep(0.5)
                    text = await page.text()
                await asyncio.sleep(1.0)  # let the last layout and fonts settle
                shot = await page.call("Page.captureScreenshot", format="png")
                return base64.b64decode(shot["data"]), await page.text()
    finally:  # the whole process group: renderer and helper processes too, before the profile goes
        with contextlib.suppress(ProcessLookupError):
            os.killpg(browser.pid, signal.SIGTERM)
        try:
            browser.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(browser.pid, signal.SIGKILL)
            browser.wait(timeout=20)


def screenshot(url: str, cookies: Sequence[dict[str, Any]], wanted: Sequence[str], width: int = 1280,
               height: int = 800, timeout: float = 90.0) -> tuple[bytes, str]:
    """The PNG of ``url`` at ``width`` × ``height`` once its text holds every string of ``wanted``, and that
    text. ``cookies`` are DevTools ``Network.setCookie`` parameters (name, value, url or domain)."""
    # a helper process may still write to the profile as it goes: leftovers are not the test's failure
    with tempfile.TemporaryDirectory(prefix="chromium-", ignore_cleanup_errors=True) as profile:
        return asyncio.run(_screenshot(url, cookies, wanted, width, height, timeout, Path(profile)))
