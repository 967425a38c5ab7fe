"""Small helpers shared by the metric modules: array coercion and cutoff checks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
ArrayLike = Sequence[float] | Sequence[int] | Sequence[bool] | npt.NDArray[np.generic]


def as_floats(values: ArrayLike, name: str = "values") -> FloatArray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    return array


def check_cutoff(k: int | None) -> None:
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"cutoff k must be a positive integer or None, got {k!r}")


def head(array: FloatArray, k: int | None) -> FloatArray:
    check_cutoff(k)
    return array if k is None else array[:k]
