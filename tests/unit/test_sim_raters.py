"""Simulated annotators (``monitor/sim/raters.py``) and what rater quality makes of them (issue 30).

What the issue asks to show: with one annotator answering at random among honest ones, agreement and that
annotator's gold accuracy fall below the default thresholds (``RaterThresholds``); with honest annotators
only, nothing is low. The defaults were chosen from ``benchmarks/raters.py`` (docs/annotate.md, "Rater
quality"); the slow test runs its scenarios over more seeds and panel sizes.
"""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from monitor.core.agreement.tally import RaterThresholds, assess
from monitor.sim import raters as sim_raters
from monitor.sim.config import SimConfig
from monitor.sim.raters import PanelConfig, RaterSpec, draw_pairs, honest_panel, run_panel

DEFAULTS = RaterThresholds()


def low(run_tally) -> set[str]:  # type: ignore[no-untyped-def]
    return {f"{f.key}:{f.measure}" for f in assess(run_tally, DEFAULTS) if f.status == "low"}


def test_rater_kinds_grade_as_documented() -> None:
    rng = np.random.default_rng(5)
    true = rng.integers(0, 4, 40_000)
    hours = np.full(true.size, 2.0)
    assert np.array_equal(RaterSpec("r", noise=0.0).rate(true, hours, rng), true)
    honest = RaterSpec("r", noise=0.2).rate(true, hours, rng)
    assert set(np.abs(honest - true).tolist()) == {0, 1}
    inner = (true > 0) & (true < 3)  # off the edges, a step off is never clamped back
    assert abs(np.mean(honest[inner] != true[inner]) - 0.2) < 0.01
    careless = RaterSpec("r", kind="careless").rate(true, hours, rng)
    assert np.allclose(np.bincount(careless, minlength=4) / true.size, 0.25, atol=0.01)
    assert abs(np.corrcoef(careless, true)[0, 1]) < 0.02
    drifting = RaterSpec("r", kind="drifting", noise=0.0, drift_per_hour=-1.0).rate(true, hours, rng)
    assert np.array_equal(drifting, np.maximum(true - 2, 0))  # two hours in: two levels harsher
    half = RaterSpec("r", kind="drifting", noise=0.0, drift_per_hour=0.25).rate(true, hours, rng)
    assert abs(np.mean(half[true < 3] - true[true < 3]) - 0.5) < 0.02  # half a level: one step half the time


@pytest.mark.parametrize(("spec", "message"), [
    (lambda: RaterSpec("r", kind="lazy"), "kind: 'lazy' is not one of honest, careless, drifting"),
    (lambda: RaterSpec("", kind="honest"), "name: must not be empty"),
    (lambda: RaterSpec("r", noise=1.5), "noise: must be in [0, 1], got 1.5"),
    (lambda: RaterSpec("r", drift_per_hour=float("nan")), "drift_per_hour: must be finite"),
    (lambda: PanelConfig(raters=honest_panel(2)), "raters: a third opinion needs at least 3 annotators"),
    (lambda: PanelConfig(raters=(RaterSpec("a"), RaterSpec("a"), RaterSpec("b"))), "names must be distinct"),
])
def test_settings_errors_name_the_bad_value(spec, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError) as error:
        spec()
    assert message in str(error.value)


def test_pairs_come_from_the_simulators_pools() -> None:
    keys, buckets, levels = draw_pairs(SimConfig(seed=3), 3000, np.random.default_rng(3))
    assert len(set(keys)) == 3000 and set(buckets) == {"head", "torso", "tail"}
    assert set(levels.tolist()) == {0, 1, 2, 3}
    assert all(key.split("|")[1].startswith("d-") for key in keys)


def test_a_run_follows_the_policy_and_is_deterministic() -> None:
    config = PanelConfig(raters=honest_panel(5), pairs=10_000, seed=4)
    run = run_panel(config)
    assert abs(run.overlapped / config.pairs - 0.1) < 0.01
    assert run.tally.overall().units == run.overlapped  # agreement on the first two grades of each
    assert sum(m.total for m in run.tally.peers.values()) == 2 * run.overlapped
    assert sum(m.total for m in run.tally.gold.values()) == run.gold_tasks == 527  # ceil(0.05·10,000/0.95)
    assert 0 < run.thirds < run.overlapped
    again = run_panel(config)
    assert again.tally == run.tally and np.array_equal(again.chosen, run.chosen)


def test_honest_annotators_pass_and_a_random_one_is_caught() -> None:
    honest = run_panel(PanelConfig(raters=honest_panel(5), seed=0))
    assert low(honest.tally) == set()
    assert (honest.tally.overall().alpha() or 0) > 0.8
    careless = run_panel(PanelConfig(raters=(*honest_panel(4), RaterSpec("r5", kind="careless")), seed=0))
    flagged = low(careless.tally)
    assert {"all:alpha", "r5:kappa", "r5:gold_exact"} <= flagged
    assert not any(flag.startswith(("r1:", "r2:", "r3:", "r4:")) for flag in flagged)
    assert careless.chosen_exact() < honest.chosen_exact() - 0.05  # the grades that count are worse too


def test_a_drifting_annotator_fails_gold() -> None:
    raters = (*honest_panel(4), RaterSpec("r5", kind="drifting", drift_per_hour=-1.0))
    flagged = low(run_panel(PanelConfig(raters=raters, hours=2.0, seed=0)).tally)
    assert "r5:gold_exact" in flagged
    assert not any(flag.startswith(("r1:", "r2:", "r3:", "r4:")) for flag in flagged)


def test_doctests() -> None:
    """monitor/sim is not among pytest's doctest paths: the module's examples are run here."""
    result = doctest.testmod(sim_raters)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.slow
@pytest.mark.parametrize("size", [5, 10])
def test_the_defaults_separate_over_seeds(size: int) -> None:
    """benchmarks/raters.py's scenarios, five seeds: all honest never low; the random annotator's kappa
    and gold accuracy always low, and no honest annotator's. With 5 annotators (the random one in 40% of
    the overlapped pairs) the overall alpha is low too; with 10 it is diluted (20% of the pairs) and
    straddles its threshold, which is why the per-annotator values are what single out one rater
    (docs/annotate.md, "Rater quality")."""
    for seed in range(5):
        assert low(run_panel(PanelConfig(raters=honest_panel(size), seed=seed)).tally) == set()
        odd = f"r{size}"
        raters = (*honest_panel(size - 1), RaterSpec(odd, kind="careless"))
        flagged = low(run_panel(PanelConfig(raters=raters, seed=seed)).tally)
        assert {f"{odd}:kappa", f"{odd}:gold_exact"} <= flagged
        assert size != 5 or "all:alpha" in flagged
        assert {flag for flag in flagged if flag.startswith("r")} == {f"{odd}:kappa", f"{odd}:gold_exact"}
