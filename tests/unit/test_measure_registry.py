"""Adding a measure is one module: a definition registered under its name, which ``parse_measure``,
``compute``, ``MeasureAggregate``, ``evaluate_lists`` and the batch path then all find.

``judged@k`` (how many of the top k documents carry a label) stands in for that module here, defined in
this file and registered by a fixture that takes it out again, checking that the registry is left as it
was found; ``ConcordantShare`` (concordant / (concordant + discordant) pairs) does the same for a measure
whose aggregate is a ratio of summed pair counts.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from monitor.core.batch import evaluate_batch, measure_values
from monitor.core.errors import MeasureError
from monitor.core.evaluation import MeasureAggregate, compute, evaluate_lists, list_pair_counts
from monitor.core.grades import TrecScale
from monitor.core.judged import JudgedList
from monitor.core.measures import (
    ALIASES,
    SPECS,
    Measure,
    MeasureDefinition,
    MeasureSpec,
    PairRatio,
    accepted_measures,
    lookup,
    parse_measure,
    register,
    unregister,
)
from monitor.core.metrics.pairs import PairCounts
from monitor.core.ranked_batch import RankedBatch, top_sum

ROOT = Path(__file__).resolve().parents[2]
SCALE = TrecScale()
GRADES = {level: SCALE.parse(str(level)) for level in range(4)}
ORDER = ["CG", "DCG", "nDCG", "P", "R", "AP", "RR", "RBP", "ERR", "AUC", "PNR", "KendallTau"]

# ---------------------------------------------------------------- the new measure's module, in a test


def judged_value(measure: Measure, judged: JudgedList) -> float:
    """Labelled documents among the top k."""
    top = judged.judged if measure.cutoff is None else judged.judged[: measure.cutoff]
    return float(top.sum())


def judged_batch(measure: Measure, batch: RankedBatch) -> npt.NDArray[np.float64]:
    return top_sum(batch, batch.judged.astype(np.float64), measure.cutoff)


JUDGED_SPEC = MeasureSpec("judged", "optional", {}, "labelled documents in the top k")


def concordant_share(measure: Measure, counts: PairCounts) -> float | None:
    ordered = counts.concordant + counts.discordant
    return counts.concordant / ordered if ordered else None


SHARE = PairRatio(list_pair_counts, concordant_share)
SHARE_DEFINITION = MeasureDefinition(MeasureSpec("ConcordantShare", "none", {}, "concordant / ordered pairs"),
                                     SHARE.value, pairs=SHARE, aliases=("share",))


def registry_state() -> tuple[list[str], str, dict[str, str]]:
    return list(SPECS), accepted_measures(), dict(ALIASES)


@pytest.fixture(params=["per-list value only", "with a batch value"])
def judged_measure(request: pytest.FixtureRequest) -> Iterator[MeasureDefinition]:
    """``judged`` registered for one test (with and without a vectorised batch value), then taken out."""
    before = registry_state()
    batch = judged_batch if request.param == "with a batch value" else None
    definition = register(MeasureDefinition(JUDGED_SPEC, judged_value, batch=batch, aliases=("labelled",)))
    try:
        yield definition
    finally:
        unregister("judged")
    assert registry_state() == before


@pytest.fixture
def share_measure() -> Iterator[MeasureDefinition]:
    before = registry_state()
    register(SHARE_DEFINITION)
    try:
        yield SHARE_DEFINITION
    finally:
        unregister("ConcordantShare")
    assert registry_state() == before


def lists() -> dict[str, JudgedList]:
    """Three lists: five documents three of them labelled, an empty one, two documents none labelled."""
    labels = {"a": GRADES[2], "c": GRADES[0], "d": GRADES[1], "z": GRADES[3]}
    return {
        "q1": JudgedList.build(["a", "b", "c", "d", "e"], [5.0, 4.0, 3.0, 2.0, 1.0], labels, 3),
        "q2": JudgedList.build([], [], labels, 3),
        "q3": JudgedList.build(["x", "y"], [2.0, 1.0], labels, 3),
    }


# ---------------------------------------------------------------- every entry point finds it


def test_parse_measure_reads_and_lists_a_registered_measure(judged_measure: MeasureDefinition) -> None:
    measure = parse_measure("judged@3")
    assert measure == Measure("judged", 3) and str(measure) == "judged@3"
    assert parse_measure("JUDGED @ 3") == measure and parse_measure("Labelled@3") == measure
    assert str(parse_measure("judged")) == "judged"
    assert measure.spec is JUDGED_SPEC and lookup("judged") is judged_measure
    assert list(SPECS) == [*ORDER, "judged"]
    assert accepted_measures().endswith(", KendallTau, judged[@k]")
    assert ALIASES["labelled"] == "judged"
    with pytest.raises(MeasureError, match="judged accepts: none"):
        parse_measure("judged(p=0.5)@3")
    with pytest.raises(MeasureError, match=r"accepted: CG.*judged\[@k\]"):
        parse_measure("unjudged@3")


def test_compute_and_evaluate_lists_use_a_registered_measure(judged_measure: MeasureDefinition) -> None:
    at3, whole = parse_measure("judged@3"), parse_measure("judged")
    judged = lists()
    assert [compute(at3, jl) for jl in judged.values()] == [2.0, 0.0, 0.0]
    assert compute(whole, judged["q1"]) == 3.0
    aggregate, per_list = evaluate_lists([at3, whole], judged)
    assert per_list["q1"] == {at3: 2.0, whole: 3.0}
    assert aggregate == {at3: 2.0 / 3.0, whole: 1.0}
    single = MeasureAggregate(at3)
    for jl in judged.values():
        single.update(jl)
    assert single.get() == aggregate[at3]


def test_the_batch_path_uses_a_registered_measure(judged_measure: MeasureDefinition) -> None:
    judged = lists()
    batch = RankedBatch.from_lists(list(judged), list(judged.values()), 3)
    measures = [parse_measure("judged@3"), parse_measure("judged@1"), parse_measure("judged")]
    aggregate, per_list = evaluate_batch(measures, batch)
    expected_aggregate, expected = evaluate_lists(measures, judged)
    for measure in measures:
        assert per_list[measure] == [expected[key][measure] for key in judged]
        assert measure_values(measure, batch) == per_list[measure]
        assert aggregate[measure] == pytest.approx(expected_aggregate[measure], rel=1e-12)


def test_a_measure_aggregated_from_pair_counts(share_measure: MeasureDefinition) -> None:
    """Its aggregate is the ratio of the summed counts, in every path, never the mean of per-list ones."""
    share = parse_measure("share")
    assert str(share) == "ConcordantShare"
    g = GRADES
    first = JudgedList.build(["a", "b", "c"], [3.0, 2.0, 1.0], {"a": g[1], "b": g[2], "c": g[0]}, 3)  # 2 of 3
    second = JudgedList.build(["a", "b"], [2.0, 1.0], {"a": g[0], "b": g[1]}, 3)  # 0 of 1
    aggregate, per_list = evaluate_lists([share], {"first": first, "second": second})
    assert per_list == {"first": {share: 2 / 3}, "second": {share: 0.0}}
    assert aggregate[share] == 2 / 4  # summed counts: 2 concordant of 4 ordered pairs (the mean would be 1/3)
    batch_aggregate, batch_per_list = evaluate_batch([share], RankedBatch.from_lists(["f", "s"], [first, second], 3))
    assert batch_aggregate == aggregate and batch_per_list[share] == [2 / 3, 0.0]
    with pytest.raises(ValueError, match="ConcordantShare aggregates pair counts"):
        MeasureAggregate(share).update_value(0.5)


# ---------------------------------------------------------------- the registry itself


def test_measures_are_registered_in_the_order_they_are_listed() -> None:
    assert list(SPECS) == ORDER
    assert accepted_measures().startswith("CG[@k], DCG(gain=linear|exp,discount=log2|jk)[@k], nDCG(")
    assert dict(ALIASES) == {"map": "AP", "mrr": "RR", "ndcg": "nDCG", "precision": "P", "recall": "R",
                             "kendall": "KendallTau"}


def test_unregistering_leaves_nothing_behind() -> None:
    before = registry_state()
    register(MeasureDefinition(JUDGED_SPEC, judged_value, aliases=("labelled",)))
    assert unregister("judged").spec is JUDGED_SPEC
    assert registry_state() == before
    for text in ("judged@3", "labelled@3"):
        with pytest.raises(MeasureError, match="unknown measure"):
            parse_measure(text)
    with pytest.raises(MeasureError, match="unknown measure 'judged'"):
        compute(Measure("judged", 3), lists()["q1"])
    with pytest.raises(MeasureError, match="no measure 'judged' is registered"):
        unregister("judged")


@pytest.mark.parametrize(("name", "aliases", "fragment"), [
    ("NDCG", (), "'ndcg' already names nDCG"),
    ("judged", ("MAP",), "'map' already names AP"),
    ("judged2", (), "ASCII letters only"),
    ("judged", ("top-k",), "ASCII letters only"),
])
def test_a_name_taken_or_unreadable_is_refused(name: str, aliases: tuple[str, ...], fragment: str) -> None:
    before = registry_state()
    spec = MeasureSpec(name, "optional", {}, "refused")
    with pytest.raises(MeasureError, match=fragment):
        register(MeasureDefinition(spec, judged_value, aliases=aliases))
    assert registry_state() == before


def test_the_provider_and_the_batch_path_name_no_measure() -> None:
    """They dispatch through the registry: no string in their code is a measure's name or alias."""
    names = {word.casefold() for word in [*SPECS, *ALIASES]}
    for path in ("monitor/core/evaluation.py", "monitor/core/batch.py"):
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        strings = {node.value.casefold() for node in ast.walk(tree)
                   if isinstance(node, ast.Constant) and isinstance(node.value, str)}
        assert not strings & names, f"{path} names {sorted(strings & names)}"
