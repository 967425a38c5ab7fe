"""Bounded label values: only the busiest ``max_rankers`` rankers and ``max_variants`` variants keep their
names; the rest are exported as ``other`` (their statistics merged, which is exact because they are
sums). Buckets are the schema's three; query text, session and document ids are never labels.

>>> cap_values({"a": 10, "b": 5, "c": 1}, 2)
{'a': 'a', 'b': 'b', 'c': 'other'}
"""

from __future__ import annotations

from collections.abc import Mapping

from monitor.core.stream.session import split_group

OTHER = "other"
MAX_LABEL_CHARS = 64


def cap_values(weights: Mapping[str, float], keep: int) -> dict[str, str]:
    """value → exported value: the ``keep`` heaviest (ties by name) keep their name, the rest ``other``."""
    ranked = sorted(weights, key=lambda v: (-weights[v], v))
    kept = {v for v in ranked[:keep] if len(v) <= MAX_LABEL_CHARS and v != OTHER}
    return {v: (v if v in kept else OTHER) for v in weights}


def group_labels(groups: Mapping[str, float], max_rankers: int,
                 max_variants: int) -> dict[str, tuple[str, str, str]]:
    """group key → (bucket, ranker, variant) as exported, from each group's weight (e.g. impressions)."""
    rankers: dict[str, float] = {}
    variants: dict[str, float] = {}
    for group, weight in groups.items():
        _, ranker, variant = split_group(group)
        rankers[ranker] = rankers.get(ranker, 0.0) + weight
        variants[variant] = variants.get(variant, 0.0) + weight
    ranker_map, variant_map = cap_values(rankers, max_rankers), cap_values(variants, max_variants)
    out = {}
    for group in groups:
        bucket, ranker, variant = split_group(group)
        out[group] = (bucket, ranker_map[ranker], variant_map[variant])
    return out
