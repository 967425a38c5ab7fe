"""comparisons(): which groups are paired (canary vs control, after vs before a deploy), over which epochs,
deploys detected in the impressions, rollbacks, order."""

from __future__ import annotations

from dataclasses import replace

import pytest

from monitor.core.canary import CanaryConfig, Comparison, Verdict, compare, detect_deploys, first_epoch
from monitor.core.canary import comparisons as compare_history
from monitor.core.events import Deploy
from monitor.core.stream.history import History
from monitor.core.stream.stats import Stats, add

CONFIG = CanaryConfig(min_sessions=2, time_matched=False, sticky=False)  # periods only; matching: below


def plain(verdict: Verdict) -> Verdict:
    """The verdict without its history along the looks (what :func:`compare` of the totals gives)."""
    fields = {name: pytest.approx(getattr(verdict, name), rel=1e-9, abs=1e-12) if isinstance(
        getattr(verdict, name), float) else getattr(verdict, name)
        for name in ("estimate", "lower", "upper", "evidence")}
    return replace(verdict, changes=0, changed_at=None, resets=0, **fields)


def stats(n: int, mean: float) -> Stats:
    """n sessions of DCG mean ± 0.5 and PNR ≈ 3 (distinct per mean, so a pairing is recognisable)."""
    half = n // 2
    return {"sessions": float(n), "dcg": n * mean, "dcg_sq": n * mean * mean + n * 0.25,
            "concordant": 30.0 * n, "grade_tied": 0.0, "discordant": 10.0 * n, "pnr_pos_sq": 900.0 * n + half,
            "pnr_neg_sq": 100.0 * n + half, "pnr_pos_neg": 300.0 * n}


def comparisons(totals: dict[str, Stats], deploys: list[Deploy], config: CanaryConfig) -> list[Comparison]:
    """The pairing rules alone: every session in one epoch, so every period holds all of them."""
    return compare_history(History(1e9, {0: totals}), deploys, config)


def summed(*parts: Stats) -> Stats:
    out: Stats = {}
    for part in parts:
        add(out, part)
    return out


def pairs(result: list[Comparison]) -> list[tuple[str, str, str, str, str]]:
    return [(c.bucket, c.kind, c.baseline, c.candidate, c.metric) for c in result]


def test_canary_against_the_single_control_in_each_bucket() -> None:
    totals = {"tail|a|control": stats(500, 2.0), "tail|b|canary": stats(400, 1.5),
              "head|a|control": stats(900, 3.0), "head|b|canary": stats(800, 3.0)}
    result = comparisons(totals, [], CONFIG)
    assert pairs(result) == [("head", "canary", "a", "b", "dcg"), ("head", "canary", "a", "b", "pnr"),
                             ("tail", "canary", "a", "b", "dcg"), ("tail", "canary", "a", "b", "pnr")]
    assert plain(result[2].verdict) == compare(totals["tail|a|control"], totals["tail|b|canary"], "dcg", CONFIG)
    assert result[2].verdict.n_baseline == 500 and result[2].verdict.n_candidate == 400


def test_several_controls_use_the_canary_starts_previous() -> None:
    totals = {"torso|a|control": stats(100, 2.0), "torso|z|control": stats(900, 2.5),
              "torso|b|canary": stats(300, 2.0)}
    deploys = [Deploy("canary_start", "b", 10.0, previous="z"), Deploy("canary_start", "b", 20.0, previous="a")]
    result = comparisons(totals, deploys, CONFIG)
    assert {c.baseline for c in result} == {"a"}  # the latest start names a, though z has more sessions


def test_several_controls_without_a_usable_start_use_the_busiest() -> None:
    totals = {"torso|a|control": stats(100, 2.0), "torso|z|control": stats(900, 2.5),
              "torso|b|canary": stats(300, 2.0)}
    assert {c.baseline for c in comparisons(totals, [], CONFIG)} == {"z"}
    named_elsewhere = [Deploy("canary_start", "b", 10.0, previous="gone")]
    assert {c.baseline for c in comparisons(totals, named_elsewhere, CONFIG)} == {"z"}
    tied = {"torso|y|control": stats(900, 2.0), "torso|x|control": stats(900, 2.0), "torso|b|canary": stats(3, 2)}
    assert {c.baseline for c in comparisons(tied, [], CONFIG)} == {"x"}


def test_a_canary_without_control_in_its_bucket_is_not_compared() -> None:
    totals = {"head|a|control": stats(500, 2.0), "tail|b|canary": stats(400, 1.5)}
    assert comparisons(totals, [], CONFIG) == []


@pytest.mark.parametrize("ending", ["rollback", "canary_end"])
def test_a_rollback_or_end_newer_than_the_start_ends_the_canary(ending: str) -> None:
    totals = {"tail|a|control": stats(500, 2.0), "tail|b|canary": stats(400, 1.5),
              "tail|c|canary": stats(400, 1.9)}
    start_b = Deploy("canary_start", "b", 100.0, previous="a")
    assert {c.candidate for c in comparisons(totals, [start_b], CONFIG)} == {"b", "c"}
    assert {c.candidate for c in comparisons(totals, [start_b, Deploy(ending, "b", 150.0)], CONFIG)} == {"c"}
    # an ending older than the (re)start does not count
    restarted = [Deploy(ending, "b", 50.0), start_b]
    assert {c.candidate for c in comparisons(totals, restarted, CONFIG)} == {"b", "c"}
    # a canary seen without any start ends with any ending
    assert {c.candidate for c in comparisons(totals, [Deploy(ending, "c", 1.0)], CONFIG)} == {"b"}


def test_equal_times_follow_the_order_given() -> None:
    totals = {"tail|a|control": stats(500, 2.0), "tail|b|canary": stats(400, 1.5)}
    start, end = Deploy("canary_start", "b", 100.0, "a"), Deploy("rollback", "b", 100.0)
    assert comparisons(totals, [start, end], CONFIG) == []
    assert len(comparisons(totals, [end, start], CONFIG)) == 2


def test_a_deploy_compares_after_against_before_on_plain_and_control_sessions() -> None:
    totals = {"head|a|": stats(300, 2.0), "head|a|control": stats(200, 2.0), "head|b|": stats(400, 1.8),
              "head|b|canary": stats(999, 0.1), "tail|a|control": stats(50, 1.0)}
    result = comparisons(totals, [Deploy("deploy", "b", 100.0, previous="a")], CONFIG)
    deploys = [c for c in result if c.kind == "deploy"]
    assert pairs(deploys) == [("head", "deploy", "a", "b", "dcg"), ("head", "deploy", "a", "b", "pnr"),
                              ("tail", "deploy", "a", "b", "dcg"), ("tail", "deploy", "a", "b", "pnr")]
    head = deploys[0].verdict
    merged_a = {k: totals["head|a|"][k] + totals["head|a|control"][k] for k in totals["head|a|"]}
    assert plain(head) == compare(merged_a, totals["head|b|"], "dcg", CONFIG)  # the canary group stays out
    assert (deploys[2].verdict.n_baseline, deploys[2].verdict.n_candidate) == (50, 0)
    assert deploys[2].verdict.verdict == "inconclusive"


def test_deploys_without_previous_or_of_the_same_ranker_are_not_compared() -> None:
    totals = {"head|a|control": stats(300, 2.0), "head|b|control": stats(300, 2.0)}
    assert comparisons(totals, [Deploy("deploy", "b", 1.0)], CONFIG) == []
    assert comparisons(totals, [Deploy("deploy", "b", 1.0, previous="b")], CONFIG) == []


def test_only_the_latest_deploy_of_a_ranker_counts_and_a_rollback_ends_it() -> None:
    totals = {"head|a|control": stats(300, 2.0), "head|b|control": stats(300, 1.0),
              "head|z|control": stats(300, 2.5)}
    deploys = [Deploy("deploy", "b", 1.0, previous="z"), Deploy("deploy", "b", 2.0, previous="a")]
    assert {c.baseline for c in comparisons(totals, deploys, CONFIG)} == {"a"}
    rolled = [*deploys, Deploy("rollback", "b", 3.0, previous="a")]
    assert comparisons(totals, rolled, CONFIG) == []
    redeployed = [*rolled, Deploy("deploy", "b", 4.0, previous="a")]
    assert {c.candidate for c in comparisons(totals, redeployed, CONFIG)} == {"b"}


def test_a_replaced_deploy_ends() -> None:
    totals = {"head|a|control": stats(300, 2.0), "head|b|control": stats(300, 1.0),
              "head|c|control": stats(300, 1.1)}
    deploys = [Deploy("deploy", "b", 1.0, previous="a"), Deploy("deploy", "c", 2.0, previous="b")]
    assert {(c.baseline, c.candidate) for c in comparisons(totals, deploys, CONFIG)} == {("b", "c")}


def test_order_is_bucket_kind_candidate_baseline_metric_whatever_the_input_order() -> None:
    totals = {"tail|a|control": stats(300, 2.0), "tail|c|canary": stats(300, 2.0),
              "tail|b|canary": stats(300, 2.0), "eu|a|control": stats(300, 2.0), "eu|b|canary": stats(300, 2),
              "head|a|control": stats(300, 2.0), "head|d|control": stats(300, 2.0),
              "torso|a|control": stats(300, 2.0)}
    deploys = [Deploy("deploy", "d", 5.0, previous="a")]
    # the deploy of d is compared in every bucket where a or d served (inconclusive without sessions of d)
    expected = [(bucket, kind, "a", candidate, metric)
                for bucket, kind, candidate in [("head", "deploy", "d"), ("torso", "deploy", "d"),
                                                ("tail", "canary", "b"), ("tail", "canary", "c"),
                                                ("tail", "deploy", "d"), ("eu", "canary", "b"),
                                                ("eu", "deploy", "d")]
                for metric in ("dcg", "pnr")]
    assert pairs(comparisons(totals, deploys, CONFIG)) == expected
    shuffled = dict(reversed(list(totals.items())))
    assert pairs(comparisons(shuffled, deploys, CONFIG)) == expected


# -- periods: epochs of one hour ----------------------------------------------------------------------
HOUR = 3600.0


def test_a_canary_is_compared_with_the_control_sessions_of_its_own_period_only() -> None:
    epochs = {0: {"tail|a|control": stats(5000, 3.0)},           # the control alone, before the canary
              1: {"tail|a|control": stats(300, 2.0), "tail|b|canary": stats(300, 2.0)},
              2: {"tail|a|control": stats(200, 2.2), "tail|b|canary": stats(100, 2.1)}}
    history = History(HOUR, epochs, {("canary", "b"): (HOUR + 10, 3 * HOUR)})  # epoch 2 over
    expected_control = summed(epochs[1]["tail|a|control"], epochs[2]["tail|a|control"])
    expected_canary = summed(epochs[1]["tail|b|canary"], epochs[2]["tail|b|canary"])
    # without a canary_start the period starts at the canary's first impression ...
    result = compare_history(history, [], CONFIG)
    assert plain(result[0].verdict) == compare(expected_control, expected_canary, "dcg", CONFIG)
    assert result[0].verdict.n_baseline == 500
    # ... with one, at its start (the epoch holding it, so here epoch 2 only)
    started = compare_history(history, [Deploy("canary_start", "b", 2 * HOUR + 5, previous="a")], CONFIG)
    assert plain(started[0].verdict) == compare(epochs[2]["tail|a|control"], epochs[2]["tail|b|canary"], "dcg", CONFIG)


def test_a_deploy_compares_its_sessions_since_with_the_previous_rankers_recent_baseline() -> None:
    config = CanaryConfig(min_sessions=2, baseline_window=2 * HOUR, time_matched=False, sticky=False)
    epochs = {0: {"head|a|control": stats(900, 9.0)},                       # older than the baseline window
              1: {"head|a|control": stats(300, 2.0)},
              2: {"head|a|control": stats(100, 2.1), "head|a|": stats(50, 2.0)},
              3: {"head|a|control": stats(100, 2.2), "head|b|control": stats(200, 1.9)},  # deploy at 3h
              4: {"head|a|control": stats(40, 5.0), "head|b|control": stats(250, 1.8)}}   # a after: out
    history = History(HOUR, epochs)
    result = compare_history(history, [Deploy("deploy", "b", 3 * HOUR + 60, previous="a")], config)
    baseline = summed(epochs[1]["head|a|control"], epochs[2]["head|a|control"], epochs[2]["head|a|"],
                      epochs[3]["head|a|control"])
    candidate = summed(epochs[3]["head|b|control"], epochs[4]["head|b|control"])
    assert [c.kind for c in result] == ["deploy", "deploy"]
    assert plain(result[0].verdict) == compare(baseline, candidate, "dcg", config)
    assert (result[0].verdict.n_baseline, result[0].verdict.n_candidate) == (550, 450)


def test_a_new_ranker_in_the_impressions_is_a_detected_deploy_of_the_one_seen_before() -> None:
    seen = {("plain", "a"): (10.0, 5 * HOUR), ("plain", "old"): (0.0, HOUR - 1),
            ("plain", "b"): (3 * HOUR + 7, 6 * HOUR), ("canary", "c"): (4 * HOUR, 5 * HOUR)}
    history = History(HOUR, {3: {"tail|a|control": stats(300, 2.0), "tail|b|control": stats(300, 1.0)}}, seen)
    assert detect_deploys(history, []) == [Deploy("deploy", "b", 3 * HOUR + 7, previous="a")]
    result = compare_history(history, [], CONFIG)
    assert {(c.kind, c.baseline, c.candidate) for c in result} == {("deploy", "a", "b")}
    # a deploy event that names b wins; so does nothing when b served from the first epoch on
    assert detect_deploys(history, [Deploy("deploy", "b", 3 * HOUR, previous="old")]) == []
    together = History(HOUR, {}, {("plain", "a"): (10.0, 9.0 * HOUR), ("plain", "b"): (20.0, 9.0 * HOUR)})
    assert detect_deploys(together, []) == []
    # nor a ranker seen for less than an epoch (a stray impression, a test request)
    stray = History(HOUR, {}, {("plain", "a"): (10.0, 9.0 * HOUR), ("plain", "t"): (3 * HOUR, 4 * HOUR - 1)})
    assert detect_deploys(stray, []) == []
    # the previous ranker is the one seen most recently before (ties: by name); a canary arm never counts
    tie = History(HOUR, {}, {("plain", "y"): (0.0, 2 * HOUR), ("plain", "x"): (5.0, 2 * HOUR),
                             ("plain", "n"): (3 * HOUR, 4 * HOUR), ("canary", "m"): (0.0, 9 * HOUR)})
    assert detect_deploys(tie, []) == [Deploy("deploy", "n", 3 * HOUR, previous="x")]
    # a rollback of a detected deploy ends its comparison
    assert compare_history(history, [Deploy("rollback", "b", 7 * HOUR)], CONFIG) == []


def test_first_epoch_is_the_oldest_any_period_reads() -> None:
    config = CanaryConfig(baseline_window=2 * HOUR, adjust_queries=False)
    assert first_epoch(History(HOUR, {}), [], config) is None
    canary = History(HOUR, {}, {("canary", "c"): (5 * HOUR + 1, 6 * HOUR)})
    assert first_epoch(canary, [], config) == 5
    deploys = [Deploy("deploy", "b", 4 * HOUR, previous="a"), Deploy("rollback", "b", HOUR)]
    assert first_epoch(canary, deploys, config) == 2
    started = [Deploy("canary_start", "c", 3 * HOUR + 5), Deploy("deploy", "c", HOUR)]  # no previous
    assert first_epoch(canary, started, config) == 3
    # the adjustment for query difficulty reads the covariate window before the oldest period too
    adjusted = CanaryConfig(baseline_window=2 * HOUR, covariate_window=3 * HOUR)
    assert first_epoch(canary, deploys, adjusted) == -1
