"""Small helpers for the integration tests: JSON over HTTP, and waiting for something to happen."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def http_json(url: str, payload: object | None = None) -> Any:
    """GET ``url`` (or POST ``payload`` as JSON) and return the decoded JSON answer (None if empty)."""
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
    return json.loads(body) if body else None


def eventually(probe: Callable[[], T], seconds: float = 30.0) -> T:
    """Call ``probe`` until it returns something truthy and return that, or fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"{probe.__doc__ or probe} did not happen within {seconds:.0f} s", pytrace=False)
        time.sleep(0.25)
