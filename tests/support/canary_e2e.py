"""The canary end-to-end setup: its stream config, timings, traffic and the expected comparison."""

from __future__ import annotations

from typing import Any

from monitor.core.canary import Comparison, Verdict
from monitor.core.stream.config import StreamConfig, stream_toml
from monitor.sim import SimConfig

CONFIG_TOML = stream_toml(StreamConfig(join_window=1800, min_coverage=0.8, max_closes_per_step=1_000_000,
                                       budget={"head": 1e9, "torso": 1e9, "tail": 1e9}))
JOIN_WINDOW = 1800
ALERT_INTERVAL = 1.0
TRAFFIC = SimConfig(seed=4, n_sessions=5000, duration_s=2 * 3600, bucket_hint_share=1.0, head_share=0.2,
                    torso_share=0.2, tail_share=0.6, canary_start=0.0, canary_share=0.5, label_share=1.0,
                    batch_share=1.0, regression_bucket="tail")


def comparison(row: dict[str, Any]) -> Comparison:
    """A row of ``monitor canary --json`` back as the comparison it prints."""
    verdict = Verdict(row["verdict"], row["estimate"], row["lower"], row["upper"], row["evidence"],
                      row["n_baseline"], row["n_candidate"], row["reason"])
    return Comparison(row["bucket"], row["metric"], row["kind"], row["baseline"], row["candidate"], verdict)
