"""The worker's log leaves out Faust's timer drift notices but one per timer every ten minutes (issue 29)."""

from __future__ import annotations

import logging

import pytest

from monitor.worker.cli import setup_logging
from monitor.worker.log_filters import TIMER_LOGGER, TimerDriftFilter, quiet_timer_drift

LATE = "Timer %s woke up too late, with a drift of +%r runtime=%r sleeptime=%r"  # as mode/timers.py logs it


def drift(timer: str, message: str = LATE) -> logging.LogRecord:
    return logging.LogRecord(TIMER_LOGGER, logging.INFO, "timers.py", 121, message, (timer, 1.5, 0.01, 1.0),
                             None)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_notice_per_timer_every_period_and_what_was_left_out() -> None:
    clock = Clock()
    quiet = TimerDriftFilter(every=600.0, clock=clock)
    passed = []
    for second in range(0, 1300, 2):  # a notice every 2 s for 21 minutes, from two timers
        clock.now = 1000.0 + second
        for timer in ("Monitor.sampler", "Worker._stats"):
            record = drift(timer)
            if quiet.filter(record):
                passed.append((second, timer, record.getMessage()))
    sampler = [(second, message) for second, timer, message in passed if timer == "Monitor.sampler"]
    assert [second for second, _ in sampler] == [0, 600, 1200]  # of 650 notices
    assert sampler[0][1] == "Timer Monitor.sampler woke up too late, with a drift of +1.5 runtime=0.01 sleeptime=1.0"
    assert sampler[1][1].endswith("(299 more like it in the last 600 s not logged)")
    assert sampler[2][1].endswith("(299 more like it in the last 600 s not logged)")
    assert len(passed) == 6  # the other timer's own three


def test_other_records_all_pass() -> None:
    quiet = TimerDriftFilter(every=600.0, clock=Clock())
    early = "Timer %s woke up too early, with a drift of -%r runtime=%r sleeptime=%r"
    assert quiet.filter(drift("t", early)) and not quiet.filter(drift("t", early))  # "too early" too
    for message in ("Timer %s is late but not said so", "consumer ready %s"):
        assert all(quiet.filter(drift("t", message)) for _ in range(5))
    plain = logging.LogRecord("mode.timers", logging.WARNING, "x.py", 1, ValueError("not a string"), None, None)
    assert quiet.filter(plain)


def test_the_period_must_be_positive() -> None:
    with pytest.raises(ValueError, match="every must be a positive number of seconds, got 0"):
        TimerDriftFilter(every=0)


def test_the_worker_installs_it_once_on_modes_timer_logger(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger(TIMER_LOGGER)
    setup_logging("INFO")  # what monitor worker does before it starts the Faust worker
    try:
        installed = quiet_timer_drift()
        assert sum(isinstance(f, TimerDriftFilter) for f in logger.filters) == 1
        with caplog.at_level(logging.INFO, logger=TIMER_LOGGER):
            for _ in range(50):
                logger.info(LATE, "Monitor.sampler", 1.5, 0.01, 1.0)
        assert [r.getMessage()[:39] for r in caplog.records] == ["Timer Monitor.sampler woke up too late,"]
    finally:
        logger.removeFilter(installed)
