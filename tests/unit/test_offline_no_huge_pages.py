"""``normal_pages``: numpy's huge-page advice is off inside the block and back as it was after it."""

from __future__ import annotations

import pytest

from monitor.offline import no_huge_pages as pages


@pytest.mark.parametrize("before", [True, False])
def test_normal_pages_switches_huge_pages_off_and_restores_the_setting(before: bool) -> None:
    setter = pages._switch()
    assert setter is not None, "numpy >= 1.26 (pyproject.toml) has _set_madvise_hugepage"
    original = setter(before)
    try:
        with pages.normal_pages():
            assert setter(False) is False  # off inside (setter returns the previous value)
        assert setter(before) is before  # as it was before the block
    finally:
        setter(original)


def test_the_setting_comes_back_when_the_block_raises() -> None:
    setter = pages._switch()
    assert setter is not None, "numpy >= 1.26 (pyproject.toml) has _set_madvise_hugepage"
    original = setter(True)
    try:
        with pytest.raises(RuntimeError), pages.normal_pages():
            raise RuntimeError("boom")
        assert setter(True) is True
    finally:
        setter(original)
