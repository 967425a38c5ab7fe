"""Grade scales: names, aliases, integers, TREC grades, custom scales and their error messages."""

from __future__ import annotations

import pytest

from monitor.core.errors import GradeError
from monitor.core.grades import FOUR_LEVEL_SCALE, TrecScale, parse_scale


@pytest.mark.parametrize(("value", "name"), [
    ("高", "高"), ("high", "高"), ("HIGH", "高"), (" High ", "高"), (3, "高"), ("3", "高"), (3.0, "高"),
    ("中", "中"), ("medium", "中"), (2, "中"),
    ("低", "低"), ("low", "低"), (1, "低"),
    ("无", "无"), ("none", "无"), (0, "无"), ("0", "无"),
])
def test_four_level_scale_accepts_names_aliases_and_levels(value: str | int | float, name: str) -> None:
    assert FOUR_LEVEL_SCALE.parse(value).name == name


@pytest.mark.parametrize("value", ["excellent", 4, -1, 2.5, "", "高高", float("nan")])
def test_unknown_grade_names_value_and_scale(value: str | int | float) -> None:
    with pytest.raises(GradeError) as error:
        FOUR_LEVEL_SCALE.parse(value)
    message = str(error.value)
    assert repr(value) in message and "four-level scale" in message and "高=1" in message


def test_trec_scale() -> None:
    scale = TrecScale()
    assert scale.parse("2").gain == 2.0 and scale.parse("2").relevant
    assert not scale.parse(0).relevant
    assert scale.parse("-1").gain == -1.0
    assert TrecScale(min_relevant=2).parse(1).relevant is False
    with pytest.raises(GradeError, match=r"'x'.*trec scale"):
        scale.parse("x")


def test_custom_scale_spec() -> None:
    scale = parse_scale("bad=0,fair=0.5,good=1@fair")
    assert [g.name for g in scale.grades] == ["bad", "fair", "good"]  # type: ignore[union-attr]
    assert scale.parse("fair").relevant and not scale.parse("bad").relevant
    assert scale.parse(2).gain == 1.0
    assert parse_scale("trec:2").parse(2).relevant and not parse_scale("trec:2").parse(1).relevant
    # the default's own name, and its older spellings still accepted (configuration and the CLI)
    assert all(parse_scale(name) is FOUR_LEVEL_SCALE for name in ("four-level", "seed", "default", ""))
    assert FOUR_LEVEL_SCALE.name == "four-level"


@pytest.mark.parametrize(("spec", "fragment"), [
    ("bad=0,fair", "name=gain"),
    ("bad=x", "'x' of 'bad' is not a number"),
    ("bad=0,good=1@great", "'great' is not one of"),
    ("trec:x", "integer N"),
    ("a=0,a=1", "repeats a grade name"),
])
def test_bad_scale_specs(spec: str, fragment: str) -> None:
    with pytest.raises(GradeError, match=fragment):
        parse_scale(spec)
