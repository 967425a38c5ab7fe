"""Rater quality: how far annotators agree, as mergeable counts (issue 30, item 4).

``matrix.py`` (``GradeMatrix``: integer counts of graded pairs; weighted Cohen's kappa, gold accuracy),
``alpha.py`` (``Coincidence``: Krippendorff's sufficient statistics; alpha, nominal to ratio),
``policy.py`` (when a third annotator is asked, which grade counts, which pairs are overlapped),
``identity.py`` (bounded annotator labels), ``tally.py`` (``RaterTally``: per bucket and per annotator,
and ``RaterThresholds``: which values are too low). docs/annotate.md, "Rater quality".
"""
