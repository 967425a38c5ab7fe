"""The broken-canary end-to-end setup (``tests/integration/test_canary_broken_e2e.py``): its stream config,
its traffic, and what the simulator's ground truth says the worker must find, computed without it.

The traffic is a 5% canary whose ranker returns only irrelevant documents in the tail (``regression_kind``
"irrelevant", in every canary tail session), every session labelled (one batch per session, annotators
grading truthfully), the labelling budget far above the traffic (it never binds), 7,000 sessions over 3 h
of event time (12 epochs), 80% of them tail queries: the canary has ≈ 25 tail sessions per 15-minute
epoch, so both arms reach ``min_sessions`` (200) only after about two hours, at the 8th epoch of 12.

An impression needs at least one result, so a canary session whose query has no irrelevant document at
all shows its lowest-graded ones (a DCG above 0); seed 5 is a stream where that never happens in the tail
(every canary tail session scores DCG 0), which :func:`broken_sessions` checks, so the candidate's arm is
exactly 0 and its estimate exactly −100%.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from monitor.core.canary import CanaryConfig
from monitor.core.stream.config import StreamConfig, stream_toml
from monitor.sim import SessionTruth, SimConfig

BROKEN_BUCKET = "tail"
STREAM = StreamConfig(join_window=1800, min_coverage=0.8, max_closes_per_step=1_000_000,
                      budget={"head": 1e9, "torso": 1e9, "tail": 1e9})
CONFIG_TOML = stream_toml(STREAM)
JOIN_WINDOW = STREAM.join_window
MIN_SESSIONS = CanaryConfig().min_sessions  # the worker's default (it has no setting for it)
TRAFFIC = SimConfig(seed=5, n_sessions=7000, duration_s=3 * 3600, bucket_hint_share=1.0, head_share=0.1,
                    torso_share=0.1, tail_share=0.8, canary_start=0.0, canary_share=0.05, label_share=1.0,
                    label_coverage=1.0, batch_share=1.0, regression=1.0, regression_kind="irrelevant",
                    regression_bucket=BROKEN_BUCKET)


def broken_sessions(sessions: Iterable[SessionTruth], bucket: str = BROKEN_BUCKET) -> list[str]:
    """What the traffic must be for the test to mean what it says, from the ground truth: every canary
    session of ``bucket`` degraded and showing only grade-0 documents (DCG 0), and no other session
    degraded. Returns the violations (empty: as required)."""
    out = []
    for s in sessions:
        broken = s.variant == "canary" and s.bucket == bucket
        if s.degraded != broken:
            out.append(f"{s.session_id} ({s.bucket} {s.variant}): degraded={s.degraded}")
        elif broken and any(s.levels):
            out.append(f"{s.session_id}: a broken session shows grades {s.levels}")
    return out


@dataclass(frozen=True)
class Looks:
    """The canary's looks in ``bucket``, from the ground truth: its sessions per arm and epoch.

    ``first_full``: the first epoch (index: ``ts // epoch``) after which both arms have at least
    ``min_sessions`` sessions since the canary's start (every session is labelled and scored, so these are
    the scored sessions the verdict counts); ``deadline``: the end of the epoch after it, the latest time
    at which "within two looks of min_sessions" allows the regression (docs/canary.md: the verdict's
    ``changed_at`` is the end of the epoch of the look that changed it)."""

    epoch: float
    control: Counter[int]
    canary: Counter[int]
    min_sessions: int

    @property
    def first_full(self) -> int:
        control = canary = 0
        for index in sorted(set(self.control) | set(self.canary)):
            control, canary = control + self.control[index], canary + self.canary[index]
            if min(control, canary) >= self.min_sessions:
                return index
        raise AssertionError(f"the arms never both reach {self.min_sessions} sessions "
                             f"(control {control}, canary {canary})")

    @property
    def earliest(self) -> float:
        """The end of ``first_full``: the first look that may decide."""
        return (self.first_full + 1) * self.epoch

    @property
    def deadline(self) -> float:
        """The end of the epoch after ``first_full``: the second look."""
        return (self.first_full + 2) * self.epoch

    @property
    def eligible(self) -> int:
        """How many looks have both arms at ``min_sessions``: the epochs with sessions of the pair (a look
        is such an epoch) from ``first_full`` on; the sticky verdict's reason says it "kept" its interval
        over that many."""
        return sum(1 for index in set(self.control) | set(self.canary) if index >= self.first_full)

    def total(self, arm: str) -> int:
        return sum((self.canary if arm == "canary" else self.control).values())

    def look(self, ts: float) -> int:
        """The look that ends at ``ts`` (an epoch's end), counted from the canary's first epoch (1)."""
        first = min(set(self.control) | set(self.canary))
        return round(ts / self.epoch) - first


def looks(sessions: Iterable[SessionTruth], bucket: str, since: float, epoch: float = STREAM.epoch,
          min_sessions: int = MIN_SESSIONS) -> Looks:
    """Each arm's sessions per epoch in ``bucket`` from the epoch holding ``since`` (the canary's start) on:
    a canary's period is its epochs from the one of its start (docs/canary.md, ``comparisons``)."""
    control: Counter[int] = Counter()
    canary: Counter[int] = Counter()
    first = math.floor(since / epoch)
    for s in sessions:
        index = math.floor(s.ts / epoch)
        if s.bucket == bucket and index >= first:
            (canary if s.variant == "canary" else control)[index] += 1
    return Looks(epoch, control, canary, min_sessions)


def impression_share(sessions: Iterable[SessionTruth], bucket: str, since: float,
                     epoch: float = STREAM.epoch) -> tuple[int, int]:
    """(canary, control) impressions of ``bucket`` after the epoch holding ``since``: what the sample-ratio
    check counts (the epoch of the canary's start is left out, its impressions straddling two shares)."""
    first = math.floor(since / epoch) + 1
    counts = Counter(s.variant for s in sessions if s.bucket == bucket and math.floor(s.ts / epoch) >= first)
    return counts["canary"], counts["control"]
