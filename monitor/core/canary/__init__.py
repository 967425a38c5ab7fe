"""The canary verdict: an always-valid sequential test of candidate against baseline relevance.

``compare`` gives one :class:`Verdict` (pass / regression / inconclusive, the relative change with its
confidence sequence and the evidence) from two groups' Stats; ``comparisons`` (a function of
:mod:`.pairing`) pairs the groups (canary vs control, after vs before a deploy, deploys detected by
:mod:`.detection` too, and a shadow candidate's lists vs the served ones of the same sessions:
:mod:`.shadow`) over their periods, from the epochs of a :class:`~monitor.core.stream.history.History`,
and compares each pair on DCG and PNR (:mod:`.judging`), with the checks of :mod:`.checks`;
:mod:`.overall` gives each pair one verdict over its metrics; :mod:`.alerts` turns comparisons into
alerts. Pure: numpy/math only, time is passed in. The method, its defaults and its benchmark are in
``docs/canary.md``.
"""

from monitor.core.canary.checks import Check
from monitor.core.canary.config import CanaryConfig
from monitor.core.canary.detection import detect_deploys, every_deploy
from monitor.core.canary.estimates import METRICS
from monitor.core.canary.judging import compare
from monitor.core.canary.overall import Overall, overall
from monitor.core.canary.pairing import KINDS, Comparison, comparisons, first_epoch
from monitor.core.canary.verdict import VERDICTS, Verdict

__all__ = ["KINDS", "METRICS", "VERDICTS", "CanaryConfig", "Check", "Comparison", "Overall", "Verdict",
           "compare", "comparisons", "detect_deploys", "every_deploy", "first_epoch", "overall"]
