"""Measures as values: parse, canonical form round trip, equality, hashing and error messages."""

from __future__ import annotations

import pytest

from monitor.core.errors import MeasureError
from monitor.core.measures import Measure, parse_measure

CANONICAL = [
    "nDCG@10", "nDCG", "DCG@20", "CG@4", "P@5", "R@10", "AP", "AP@10", "RR", "RR@10", "RBP(p=0.8)",
    "RBP(p=0.95)@100", "ERR@20", "ERR(p=0.9)@20", "AUC", "PNR", "PNR(ties=skip)", "KendallTau",
    "DCG(gain=exp)@20", "nDCG(discount=jk,gain=exp)@10",
]


@pytest.mark.parametrize("text", CANONICAL)
def test_canonical_strings_round_trip(text: str) -> None:
    measure = parse_measure(text)
    assert str(measure) == text
    assert parse_measure(str(measure)) == measure
    assert hash(parse_measure(text)) == hash(measure)


@pytest.mark.parametrize(("text", "canonical"), [
    ("ndcg@10", "nDCG@10"), ("NDCG@10", "nDCG@10"), (" nDCG @ 10 ", "nDCG@10"), ("map", "AP"),
    ("MRR", "RR"), ("precision@5", "P@5"), ("RBP(p=.8)", "RBP(p=0.8)"), ("RBP(p=0.80)", "RBP(p=0.8)"),
    ("ERR(p=1)@20", "ERR@20"), ("DCG(gain=linear)@5", "DCG@5"), ("PNR(ties=positive)", "PNR"),
    ("PNR(ties=seed)", "PNR"),  # the older spelling of ties=positive
    ("nDCG(gain=exp,discount=jk)@3", "nDCG(discount=jk,gain=exp)@3"), ("kendall", "KendallTau"),
])
def test_spellings_normalise(text: str, canonical: str) -> None:
    assert str(parse_measure(text)) == canonical


def test_values_compare_hash_and_sort() -> None:
    a, b = parse_measure("P@5"), parse_measure("p@5")
    assert a == b and len({a, b, parse_measure("P@10")}) == 2
    assert {a: 1}[b] == 1
    assert parse_measure("P@5") != parse_measure("R@5")
    assert sorted([parse_measure("P@5"), parse_measure("AP")])[0] == Measure("AP")
    with pytest.raises(AttributeError):
        a.cutoff = 3  # type: ignore[misc]


@pytest.mark.parametrize(("text", "fragment"), [
    ("XYZ@10", "unknown measure 'XYZ@10'; accepted: CG"),
    ("nDCG@0", "positive integer"),
    ("nDCG@x", "positive integer"),
    ("P", "needs a cutoff, e.g. P@10"),
    ("AUC@10", "takes no cutoff"),
    ("RBP", "needs parameter p"),
    ("RBP(p=1.5)", r"in \(0, 1\)"),
    ("RBP(p=abc)", "expected a number"),
    ("RBP(q=0.5)", "RBP accepts: p=0<p<1"),
    ("DCG(gain=cubic)@5", "expected one of linear, exp"),
    ("PNR(ties=half)", "expected one of positive, skip"),
    ("ERR(p=0.5,p=0.6)", "given twice"),
    ("AP(k=3)", "AP accepts: none"),
    ("", "unknown measure"),
])
def test_bad_measures_are_clear_errors(text: str, fragment: str) -> None:
    with pytest.raises(MeasureError, match=fragment):
        parse_measure(text)


def test_unknown_measure_lists_every_accepted_name() -> None:
    with pytest.raises(MeasureError) as error:
        parse_measure("Foo(p=1)@3")
    for name in ["CG", "DCG", "nDCG", "P@k", "R@k", "AP", "RR", "RBP", "ERR", "AUC", "PNR", "KendallTau"]:
        assert name in str(error.value)


def test_tie_conventions_have_names_that_say_what_they_do() -> None:
    from monitor.core.metrics.pairs import PairCounts, tie_convention

    counts = PairCounts(concordant=3, discordant=2, grade_tied=4)
    assert counts.pnr("positive") == counts.pnr("seed") == 7 / 2 and counts.pnr("skip") == 3 / 2
    assert tie_convention("seed") == "positive"
    with pytest.raises(ValueError, match="accepted: positive, skip"):
        tie_convention("ties")
