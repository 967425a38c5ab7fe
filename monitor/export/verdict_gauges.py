"""Canary verdicts and deploy times as Prometheus gauges, computed at scrape time.

``source()`` returns the current comparisons (:func:`monitor.core.canary.comparisons`) and the deploy
events seen. Series (``docs/canary.md``):

* ``search_relevance_canary_{estimate,lower,upper,evidence,verdict}`` {bucket, metric, kind, baseline,
  candidate}: relative change, its confidence sequence, log mixture likelihood ratio against no change,
  and the verdict (1 pass, 0 inconclusive, −1 regression);
* ``search_relevance_canary_sessions`` {…, arm}: sessions per arm (``baseline`` / ``candidate``);
* ``search_relevance_canary_verdict_changes`` and
  ``search_relevance_canary_verdict_changed_timestamp_seconds`` {…}: how often the verdict changed
  over the comparison's looks (one per epoch, starting from inconclusive), and the event time of the
  last change (left out while it never changed);
* per pair, {bucket, kind, baseline, candidate}: ``search_relevance_canary_overall_verdict`` (the verdict
  over both metrics, :func:`monitor.core.canary.overall`: 1, 0, −1 as above);
  ``search_relevance_canary_sample_ratio_mismatch`` (1 a mismatch with the declared share was declared,
  so the pair's verdicts are not trusted; 0 checked and fine) with ``search_relevance_canary_sample_ratio``
  (the canary's observed share of impressions over the declared one, − 1); and
  ``search_relevance_canary_covariate_imbalance`` (1 the arms' query mixes differ: the DCG verdict is not
  adjusted for query difficulty; 0 checked and fine); for a shadow candidate
  ``search_relevance_canary_shadow_coverage_mismatch`` (1 its lists reach fewer served sessions than in its
  first hour, or sessions unlike the others: its verdicts are not trusted; 0 checked and fine) with
  ``search_relevance_canary_shadow_coverage`` (the share of the served sessions they reach). A check that did
  not run (a comparison not adjusted) or does not apply leaves its series out;
* ``search_relevance_deploy_timestamp_seconds`` {ranker, kind}: the latest event time per ranker and kind,
  deploys detected in the impressions included as ``kind="deploy"`` (Grafana annotations).

A shadow comparison (:mod:`monitor.core.canary.shadow`) is exported like the others with ``kind="shadow"``
and ``baseline="served"`` (the lists the sessions were served: a fixed value, not a ranker); the sample-ratio
and balance checks do not apply to it, its shadow coverage check does.

Ranker names are capped like the relevance series (:mod:`.labels`): the busiest ``max_rankers`` (by
sessions compared, then name) keep their names, the rest become ``other`` (a shadow candidate's name
too; its ``served`` baseline takes no place among them). Verdicts cannot be merged, so
when several comparisons land on one label set the worst is shown (regression before inconclusive before
pass, then the most candidate sessions; for a check: flagged first, then the most candidate sessions).
An undefined value (None) leaves its series out; it is never 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from monitor.core.canary import Check, Comparison, Overall, overall
from monitor.core.canary.shadow import SERVED, SHADOW
from monitor.core.events import Deploy
from monitor.export.label_values import cap_values

COMPARISON_LABELS = ["bucket", "metric", "kind", "baseline", "candidate"]
PAIR_LABELS = ["bucket", "kind", "baseline", "candidate"]
VERDICT_CODES = {"pass": 1.0, "inconclusive": 0.0, "regression": -1.0}
GAUGES = {
    "estimate": "Relative change of the candidate's metric vs the baseline's (-0.1 = 10% lower)",
    "lower": "Lower end of the always-valid confidence sequence of the relative change",
    "upper": "Upper end of the always-valid confidence sequence of the relative change",
    "evidence": "Log mixture likelihood ratio against no change (>= log(1/alpha): a gain proven; "
                ">= log(2/alpha): a drop proven, each metric's regression being decided at alpha/2)",
    "verdict": "Canary verdict: 1 pass, 0 inconclusive, -1 regression",
}

PAIR_GAUGES = {
    "overall_verdict": "Verdict of the pair over every metric (regression if any regressed, pass if all "
                       "passed): 1 pass, 0 inconclusive, -1 regression",
    "sample_ratio_mismatch": "1: the canary's share of impressions does not match the declared share (the "
                             "pair's verdicts are not trusted); 0: checked and fine; absent: no share "
                             "declared",
    "sample_ratio": "The canary's observed share of the pair's impressions over the declared share, minus 1",
    "covariate_imbalance": "1: the arms' query mixes differ (the DCG verdict is not adjusted for query "
                           "difficulty); 0: checked and fine; absent: not adjusted",
    "shadow_coverage_mismatch": "1: a shadow candidate's lists reach fewer of the served sessions than in "
                                "its first hour, or sessions unlike the others (its verdicts are not "
                                "trusted); 0: checked and fine",
    "shadow_coverage": "The share of the served sessions a shadow candidate's lists reach",
}

Source = Callable[[], tuple[Sequence[Comparison], Sequence[Deploy]]]


class CanaryCollector(Collector):
    def __init__(self, source: Source, max_rankers: int = 10, prefix: str = "search_relevance") -> None:
        if isinstance(max_rankers, bool) or not isinstance(max_rankers, int) or max_rankers < 1:
            raise ValueError(f"max_rankers: expected a positive integer, got {max_rankers!r}")
        self.source, self.max_rankers, self.prefix = source, max_rankers, prefix

    def collect(self) -> Iterator[Metric]:
        found, deploys = self.source()
        weights: dict[str, float] = {}
        for c in found:
            if c.kind != SHADOW:  # a shadow's baseline is the served lists, not a ranker
                weights[c.baseline] = weights.get(c.baseline, 0.0) + c.verdict.n_baseline
            weights[c.candidate] = weights.get(c.candidate, 0.0) + c.verdict.n_candidate
        for d in deploys:
            weights.setdefault(d.ranker, 0.0)
        names = cap_values(weights, self.max_rankers)

        def baseline(c: Comparison | Overall) -> str:
            return SERVED if c.kind == SHADOW else names[c.baseline]

        shown: dict[tuple[str, ...], Comparison] = {}
        for c in sorted(found, key=lambda c: (VERDICT_CODES[c.verdict.verdict], -c.verdict.n_candidate)):
            shown.setdefault((c.bucket, c.metric, c.kind, baseline(c), names[c.candidate]), c)
        families = self._families()
        self._pairs(found, names, baseline, families)
        for labels, c in sorted(shown.items()):
            v = c.verdict
            values = {"estimate": v.estimate, "lower": v.lower, "upper": v.upper, "evidence": v.evidence,
                      "verdict": VERDICT_CODES[v.verdict]}
            for name, value in values.items():
                if value is not None:
                    families[name].add_metric(list(labels), value)
            families["sessions"].add_metric([*labels, "baseline"], v.n_baseline)
            families["sessions"].add_metric([*labels, "candidate"], v.n_candidate)
            families["verdict_changes"].add_metric(list(labels), v.changes)
            if v.changed_at is not None:
                families["verdict_changed_timestamp_seconds"].add_metric(list(labels), v.changed_at)
            if v.adjusted is not None:
                families["adjusted_share"].add_metric(list(labels), v.adjusted)

        latest: dict[tuple[str, str], float] = {}
        for d in deploys:
            key = (names[d.ranker], d.kind)
            latest[key] = max(latest.get(key, d.ts), d.ts)
        for (ranker, kind), ts in sorted(latest.items()):
            families["deploy_timestamp_seconds"].add_metric([ranker, kind], ts)
        yield from families.values()

    def describe(self) -> Iterator[Metric]:
        """Every family :meth:`collect` yields (names, types, labels, in its order) without samples and
        without reading the source: what a registry checks for name clashes when this is registered."""
        yield from self._families().values()

    @staticmethod
    def _pairs(found: Sequence[Comparison], names: dict[str, str],
               baseline: Callable[[Comparison | Overall], str], families: dict[str, GaugeMetricFamily]
               ) -> None:
        """The per-pair series: the overall verdict and the checks (module docstring)."""
        def pair(x: Comparison | Overall) -> tuple[str, ...]:
            return x.bucket, x.kind, baseline(x), names[x.candidate]

        verdicts: dict[tuple[str, ...], Overall] = {}
        for o in sorted(overall(found), key=lambda o: (VERDICT_CODES[o.verdict], -o.n_candidate)):
            verdicts.setdefault(pair(o), o)
        for labels, o in sorted(verdicts.items()):
            families["overall_verdict"].add_metric(list(labels), VERDICT_CODES[o.verdict])
        checks: dict[tuple[str, tuple[str, ...]], tuple[Check, int]] = {}
        for c in found:
            for check in (check for check in c.verdict.checks if check.applicable):
                key = (check.name, pair(c))
                held = checks.get(key)
                if held is None or (check.flagged, c.verdict.n_candidate) > (held[0].flagged, held[1]):
                    checks[key] = (check, c.verdict.n_candidate)
        for (name, labels), (check, _) in sorted(checks.items()):
            if name == "sample_ratio":
                families["sample_ratio_mismatch"].add_metric(list(labels), float(check.flagged))
                if check.estimate is not None:
                    families["sample_ratio"].add_metric(list(labels), check.estimate)
            elif name == "covariate_balance":
                families["covariate_imbalance"].add_metric(list(labels), float(check.flagged))
            elif name == "shadow_coverage":
                families["shadow_coverage_mismatch"].add_metric(list(labels), float(check.flagged))
                if check.estimate is not None:
                    families["shadow_coverage"].add_metric(list(labels), check.estimate)

    def _families(self) -> dict[str, GaugeMetricFamily]:
        """The empty families, keyed by name without the prefix (and ``canary_``), in the order they are
        exported."""
        out = {name: GaugeMetricFamily(f"{self.prefix}_canary_{name}", doc, labels=COMPARISON_LABELS)
               for name, doc in GAUGES.items()}
        out["sessions"] = GaugeMetricFamily(f"{self.prefix}_canary_sessions", "Sessions compared, per arm",
                                            labels=[*COMPARISON_LABELS, "arm"])
        out["verdict_changes"] = GaugeMetricFamily(f"{self.prefix}_canary_verdict_changes",
                                                   "How often the verdict changed (a look per epoch)",
                                                   labels=COMPARISON_LABELS)
        out["verdict_changed_timestamp_seconds"] = GaugeMetricFamily(
            f"{self.prefix}_canary_verdict_changed_timestamp_seconds",
            "Event time of the verdict's last change (Unix seconds)", labels=COMPARISON_LABELS)
        out["adjusted_share"] = GaugeMetricFamily(
            f"{self.prefix}_canary_adjusted_share",
            "Share of the compared sessions adjusted for query difficulty (their query had scored sessions "
            "before the comparison); absent: unadjusted", labels=COMPARISON_LABELS)
        for name, doc in PAIR_GAUGES.items():
            out[name] = GaugeMetricFamily(f"{self.prefix}_canary_{name}", doc, labels=PAIR_LABELS)
        out["deploy_timestamp_seconds"] = GaugeMetricFamily(
            f"{self.prefix}_deploy_timestamp_seconds",
            "Time of the latest deploy event per ranker and kind (Unix seconds)", labels=["ranker", "kind"])
        return out
