"""A Prometheus collector that computes every series at scrape time from a :class:`Snapshot`.

Because values are computed from the shared state when scraped (not accumulated in the process), several
workers reading the same Redis export the same global values, and dashboards must not sum across
workers (take ``max`` or one instance). Series are listed in ``docs/metrics.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from monitor.core.canary.paired import FIELDS as PAIRED_FIELDS
from monitor.core.stream.counters import DEAD_LETTER, LABELS_DROPPED, UNDECLARED
from monitor.core.stream.shadow import FOOTING_FIELDS, SENT_FIELDS
from monitor.core.stream.snapshot import Snapshot
from monitor.core.stream.stats import FIELDS, Stats, summarise
from monitor.export.label_values import group_labels

WINDOW_LABELS = ["bucket", "k", "ranker", "variant", "window"]
GROUP_LABELS = ["bucket", "ranker", "variant"]
SHORT_LABELS = [*GROUP_LABELS, "window"]
GAUGES: dict[str, tuple[str, str, list[str]]] = {
    "dcg": ("dcg", "Mean DCG@k per scored session (linear gain, log2 discount)", WINDOW_LABELS),
    "dcg_ci_lower": ("dcg_ci_lower", "Lower bound of the 95% interval of mean DCG@k", WINDOW_LABELS),
    "dcg_ci_upper": ("dcg_ci_upper", "Upper bound of the 95% interval of mean DCG@k", WINDOW_LABELS),
    "ndcg": ("ndcg", "Mean NDCG@k (ideal from all labelled documents of the query)", WINDOW_LABELS),
    "pnr": ("pnr", "PNR: (concordant + grade-tied) / discordant pairs, summed over sessions", WINDOW_LABELS),
    "pnr_strict": ("pnr_strict", "PNR leaving out grade-tied pairs: concordant / discordant", WINDOW_LABELS),
    "rr": ("reciprocal_rank", "Mean reciprocal rank of the first relevant document", WINDOW_LABELS),
    "judged": ("judged_top_k", "Mean number of judged documents in the top k per scored session",
               WINDOW_LABELS),
    "sessions": ("sessions_scored", "Sessions scored in the window", SHORT_LABELS),
    "expired": ("sessions_expired", "Sessions expired in the window", SHORT_LABELS),
    "join_lag": ("join_lag_seconds", "Mean event time from impression to first scoring, seconds",
                 SHORT_LABELS),
    "coverage": ("label_coverage", "Mean share of the top k labelled, over scored and expired sessions",
                 SHORT_LABELS),
}
COUNTERS = {
    "impressions": "Impression sessions seen",
    "sampled": "Sessions sampled for annotation (a request each, unless its top k is already graded)",
    "scored": "Sessions scored (first time)",
    "expired": "Sessions expired below the coverage minimum (first time)",
    "rescored": "Session contributions taken back for a re-score (corrections, late labels)",
    "corrections": "Labels that changed an earlier grade",
    "judgments_requested": "Documents asked of annotators (sampled sessions' ungraded top-k documents, "
                           "served and shadow lists' together)",
    "judgments_received": "Requested documents whose first grade for their session arrived",
    "judgments_top_k": "Documents in sampled sessions' top k, served and shadow lists' union (what requests "
                       "would list if no grade were reused)",
    "shadow_scored": "Sessions whose shadow list of a candidate ranker (variant shadow) was paired with the "
                     "served list (first time): both reached the coverage minimum",
}
LABELLED = {DEAD_LETTER: "dead_letters", LABELS_DROPPED: "labels_dropped",
            UNDECLARED: "undeclared_impressions"}
"""The labelled counters of the partition (no group): each family's name → the metric family (without the
prefix) that exports it, its label (``reason``) the counter's ``label``."""

EXPORTED_STATS = (*FIELDS, *PAIRED_FIELDS, *SENT_FIELDS, *FOOTING_FIELDS)
"""The statistics ``stat_added``/``stat_removed`` export: a served group's :data:`FIELDS`, and a paired
group's (``bucket|candidate|shadow``) sums, ``pair_n`` … ``pair_dy_dy``, from which the paired verdicts'
estimates can be recomputed in PromQL, ``sent_n``, ``sent_x``, ``sent_xx`` (the sessions the candidate
sent a list for: the shadow coverage check's) and ``pair_wx``, ``pair_gx``, ``pair_wy``, ``pair_gy`` (how
graded the two lists are: what the paired verdict allows for grades in flight)."""

Family = GaugeMetricFamily | CounterMetricFamily


class RelevanceCollector(Collector):
    def __init__(self, source: Callable[[], Snapshot], max_rankers: int = 10, max_variants: int = 5,
                 prefix: str = "search_relevance") -> None:
        self.source, self.prefix = source, prefix
        self.max_rankers, self.max_variants = max_rankers, max_variants

    def describe(self) -> Iterator[Metric]:
        """Every family :meth:`collect` yields (names, types, labels, in its order) without samples and
        without reading the source: what a registry checks for name clashes when this is registered."""
        yield from self._families().values()

    def _families(self) -> dict[str, Family]:
        """The empty families, keyed by name without the prefix, in the order they are exported."""
        out: dict[str, Family] = {}
        for name, doc, labels in GAUGES.values():
            out[name] = GaugeMetricFamily(f"{self.prefix}_{name}", doc, labels=labels)
        out["watermark_seconds"] = GaugeMetricFamily(f"{self.prefix}_watermark_seconds",
                                                     "Largest impression event time seen (Unix seconds)",
                                                     labels=[])
        for name, doc in COUNTERS.items():
            out[name] = CounterMetricFamily(f"{self.prefix}_{name}", doc, labels=GROUP_LABELS)
        out["dead_letters"] = CounterMetricFamily(f"{self.prefix}_dead_letters",
                                                  "Invalid events sent to the dead-letter topic",
                                                  labels=["reason"])
        out["labels_dropped"] = CounterMetricFamily(
            f"{self.prefix}_labels_dropped",
            "Grades dropped without scoring anything, by reason (evicted: waiting for an impression when "
            "more than max_early_sessions sessions' labels did)",
            labels=["reason"])
        out["stale_labels"] = CounterMetricFamily(
            f"{self.prefix}_stale_labels",
            "Grades that lost to a held grade with a later ts (a re-sent old grade): they changed nothing",
            labels=[])
        out["undeclared_impressions"] = CounterMetricFamily(
            f"{self.prefix}_undeclared_impressions",
            "Impressions of a variant or ranker the settings do not declare, counted as other (not sampled); "
            "reason shadow_ranker: shadow lists of an undeclared ranker, dropped from their impressions",
            labels=["reason"])
        for direction in ("added", "removed"):
            out[f"stat_{direction}"] = CounterMetricFamily(
                f"{self.prefix}_stat_{direction}",
                f"Cumulative session statistics {direction} (PromQL: rate(added) - rate(removed))",
                labels=[*GROUP_LABELS, "stat"])
        return out

    def collect(self) -> Iterator[Metric]:
        snap = self.source()
        weights: dict[str, float] = {}
        for counter, value in snap.counters.items():
            if counter.group and counter.name == "impressions":
                weights[counter.group] = weights.get(counter.group, 0.0) + value
        for _, group in snap.windows:
            weights.setdefault(group, 0.0)
        for group in list(snap.added) + list(snap.removed):
            weights.setdefault(group, 0.0)
        exported = group_labels(weights, self.max_rankers, self.max_variants)
        families = self._families()
        self._windows(snap, exported, families)
        if math.isfinite(snap.watermark):
            families["watermark_seconds"].add_metric([], snap.watermark)
        self._counters(snap, exported, families)
        yield from families.values()

    @staticmethod
    def _windows(snap: Snapshot, exported: dict[str, tuple[str, str, str]],
                 families: dict[str, Family]) -> None:
        windows: dict[tuple[str, tuple[str, str, str]], Stats] = {}
        for (window, group), stats in snap.windows.items():
            if not any(name in stats for name in FIELDS):  # a paired group's sums (bucket|candidate|shadow)
                continue                                    # alone: no served statistic to show
            windows.setdefault((window, exported[group]), Stats()).add(stats)
        gauges = {key: families[name] for key, (name, _, _) in GAUGES.items()}
        for (window, (bucket, ranker, variant)), stats in sorted(windows.items()):
            s = summarise(stats)
            k = str(snap.config.k.get(bucket, ""))
            labels = [bucket, k, ranker, variant, window]
            values = {"dcg": s.dcg, "ndcg": s.ndcg, "pnr": s.pnr, "pnr_strict": s.pnr_skip_ties, "rr": s.rr,
                      "judged": stats.mean("judged").get() if "judged" in stats else None}
            for name, shown in values.items():
                if shown is not None:
                    gauges[name].add_metric(labels, shown)
            if s.dcg_ci is not None:
                gauges["dcg_ci_lower"].add_metric(labels, s.dcg_ci[0])
                gauges["dcg_ci_upper"].add_metric(labels, s.dcg_ci[1])
            short = [bucket, ranker, variant, window]
            gauges["sessions"].add_metric(short, s.sessions)
            gauges["expired"].add_metric(short, s.expired)
            if s.coverage is not None:
                gauges["coverage"].add_metric(short, s.coverage)
            if s.join_lag is not None:
                gauges["join_lag"].add_metric(short, s.join_lag)

    @staticmethod
    def _counters(snap: Snapshot, exported: dict[str, tuple[str, str, str]],
                  families: dict[str, Family]) -> None:
        stale_total = 0.0
        merged: dict[tuple[str, tuple[str, str, str]], float] = {}
        for counter, value in snap.counters.items():
            name, group = counter.name, counter.group
            if name == "stale_labels":  # sessions' own and query grades (per group), early labels, queries'
                stale_total += value
            elif group and name in COUNTERS:
                merged[(name, exported[group])] = merged.get((name, exported[group]), 0.0) + value
            elif not group and counter.label and name in LABELLED:
                families[LABELLED[name]].add_metric([counter.label], value)
        for (name, labels), value in sorted(merged.items()):
            families[name].add_metric(list(labels), value)
        families["stale_labels"].add_metric([], stale_total)
        for direction, source in (("added", snap.added), ("removed", snap.removed)):
            totals: dict[tuple[tuple[str, str, str], str], float] = {}
            for group, stats in source.items():
                for stat in EXPORTED_STATS:
                    if stat in stats:
                        key = (exported[group], stat)
                        totals[key] = totals.get(key, 0.0) + stats[stat]
            for (labels, stat), value in sorted(totals.items()):
                families[f"stat_{direction}"].add_metric([*labels, stat], value)
