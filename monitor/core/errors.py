"""The project's error types (raised instead of bare ValueError where a caller needs to tell them apart)."""

from __future__ import annotations


class MonitorError(ValueError):
    """Base class: bad input or configuration, with a message naming the bad value."""


class GradeError(MonitorError):
    """A grade that is not on the configured scale."""


class MeasureError(MonitorError):
    """A measure name or parameter that cannot be parsed."""
