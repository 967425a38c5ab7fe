"""Normal memory pages for numpy's large arrays while ``monitor evaluate`` runs.

numpy asks the kernel for transparent huge pages (``madvise(MADV_HUGEPAGE)``) on every array of 4 MiB or
more. Where the kernel then defragments memory to find a 2 MiB page on the first touch (THP ``defrag`` set
to ``madvise``, the common default) and memory is fragmented, those faults cost more than they save: on
the 2-core machine, a 2 M-line run took 0.8–1.6 s of system time with them and 0.35–0.45 s without
(``/usr/bin/time``, same files; docs/evaluate.md). The switch is numpy's own
``_set_madvise_hugepage`` (what ``NUMPY_MADVISE_HUGEPAGE=0`` sets at import); arrays made inside the block
get normal pages and the previous setting comes back after it. Where numpy has no such switch, nothing
changes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def _switch() -> Callable[[bool], bool] | None:
    for name in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        setter = getattr(module, "_set_madvise_hugepage", None)
        if callable(setter):
            return setter  # type: ignore[no-any-return]
    return None


@contextmanager
def normal_pages() -> Iterator[None]:
    """Inside the block, numpy's new large arrays do not ask for transparent huge pages."""
    setter = _switch()
    if setter is None:
        yield
        return
    previous = setter(False)
    try:
        yield
    finally:
        setter(previous)
