"""Fixtures shared by the worker tests of this folder."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.worker_harness import Group


@pytest.fixture
def group_factory() -> Iterator[list[Group]]:
    """The worker groups a test makes (append them); each is stopped at the end of the test."""
    made: list[Group] = []
    yield made
    for group in made:
        group.stop()
