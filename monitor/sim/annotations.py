"""Annotations: when and how the grades of a session's (or a query's) documents arrive.

* A labelled session's top-k documents (k = 40 head, 20 otherwise) are each covered with probability
  ``label_coverage``. Its labels come either as one batch (``grades: [...]``, probability ``batch_share``)
  or as one single-grade event per document.
* Each delivery arrives ``Exp(label_delay_mean_s)`` after the impression, or, with probability
  ``early_label_prob``, up to ``early_label_max_s`` *before* it (never before ``start_ts``).
* Each delivery is duplicated with probability ``duplicate_prob``: the same bytes again,
  ``Exp(redelivery_mean_s)`` later.
* Each document is corrected with probability ``correction_prob``: its first grade is wrong (another level
  drawn uniformly) and a single-grade event with the true grade follows after every delivery of the wrong
  one (and its duplicate), so "the later grade wins" gives the truth whichever time a consumer orders by.
* Grades are spelled as Chinese names, English names or integers, at random.

Query-level judgments (``query`` instead of ``session_id``) grade the query's whole pool in one batch,
after the query's first session, with the same delay, early and duplicate rules.
"""

from __future__ import annotations

import json

import numpy as np
import numpy.typing as npt

from monitor.sim.config import SimConfig
from monitor.sim.records import SimEvent, json_text

ZH_NAMES = ("无", "低", "中", "高")
EN_NAMES = ("none", "low", "medium", "high")

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


# A grade's three spellings as JSON tokens: Chinese name, English name, integer level.
GRADE_TOKENS = tuple(
    (json.dumps(ZH_NAMES[level], ensure_ascii=False), json.dumps(EN_NAMES[level]), str(level))
    for level in range(4)
)


# Rows of the uniform draws one session's labels use (one ``rng.random((rows, k))`` call per session).
_COVER, _CORRECT, _WRONG, _SPELL, _EARLY, _EARLY_BY, _DELAY, _DUP, _LAG, _FIX_SPELL, _FIX_DELAY, _FIX_DUP, \
    _FIX_LAG, _BATCH = range(14)
_ROWS = 14


def _exponential(u: FloatArray, mean: float) -> FloatArray:
    """Exponential draws with the given mean from uniforms in [0, 1) (inverse CDF)."""
    return -mean * np.log1p(-u)


def _tokens(levels: list[int], u: FloatArray) -> list[str]:
    """Each grade's JSON token, spelled Chinese, English or as an integer with equal probability."""
    spellings = np.minimum((u * 3).astype(np.int64), 2).tolist()
    return [GRADE_TOKENS[level][s] for level, s in zip(levels, spellings, strict=True)]


class Annotator:
    """Turns true grades into annotation records, drawing from its own random stream.

    Values are assembled from JSON tokens (ids, grade spellings, ``repr`` of the time) rather than through
    ``json.dumps`` per event, and the random numbers of a session come from one call: a run has hundreds of
    thousands of single-grade events. Doc ids are the simulator's own ``d-<q>-<n>`` and need no escaping;
    session ids and queries are escaped.
    """

    def __init__(self, config: SimConfig, rng: np.random.Generator) -> None:
        self.config = config
        self.rng = rng

    def _times(self, base: float, early: FloatArray, early_by: FloatArray, delay: FloatArray
               ) -> list[float]:
        """Arrival times after an event at ``base``: ``Exp(mean)`` later, or (rarely) a little early."""
        config = self.config
        delays = np.where(early < config.early_label_prob, -early_by * config.early_label_max_s,
                          _exponential(delay, config.label_delay_mean_s))
        out: list[float] = np.round(np.maximum(base + delays, config.start_ts), 3).tolist()
        return out

    def _deliver(self, values: list[bytes], times: list[float], dup: FloatArray, lag: FloatArray, key: bytes
                 ) -> tuple[list[SimEvent], list[float]]:
        """Each value at its time, and again ``Exp(redelivery_mean_s)`` later with ``duplicate_prob``.

        Returns the records and, per value, when its last copy arrives.
        """
        out = [SimEvent("annotations", key, value, ts) for value, ts in zip(values, times, strict=True)]
        last = list(times)
        again = np.flatnonzero(dup < self.config.duplicate_prob).tolist()
        if again:
            lags = _exponential(lag, self.config.redelivery_mean_s).tolist()
            for i in again:
                last[i] = round(times[i] + lags[i], 3)
                out.append(SimEvent("annotations", key, values[i], last[i]))
        return out, last

    def session(
        self, session_id: str, doc_ids: list[str], levels: IntArray, impression_ts: float
    ) -> tuple[list[SimEvent], dict[str, int]]:
        """Records for one session's shown top-k (``doc_ids``/``levels``) and the final grades."""
        config = self.config
        u = self.rng.random((_ROWS, len(doc_ids)))
        covered = np.flatnonzero(u[_COVER] < config.label_coverage)
        if covered.size == 0:
            return [], {}
        u = u[:, covered]
        true = levels[covered]
        corrected = u[_CORRECT] < config.correction_prob
        wrong = (true + 1 + np.minimum((u[_WRONG] * 3).astype(np.int64), 2)) % 4
        first = np.where(corrected, wrong, true)
        docs = [doc_ids[i] for i in covered.tolist()]
        tokens = _tokens(first.tolist(), u[_SPELL])
        key = session_id.encode("utf-8")
        head = f'{{"type":"annotation","schema":1,"session_id":{json_text(session_id)},'
        if u[_BATCH, 0] < config.batch_share:
            ts = self._times(impression_ts, u[_EARLY, :1], u[_EARLY_BY, :1], u[_DELAY, :1])[0]
            grades = ",".join(f'{{"doc_id":"{d}","grade":{t}}}' for d, t in zip(docs, tokens, strict=True))
            value = f'{head}"grades":[{grades}],"ts":{ts!r}}}'.encode()
            out, last = self._deliver([value], [ts], u[_DUP, :1], u[_LAG, :1], key)
            arrived = dict.fromkeys(docs, last[0])
        else:
            times = self._times(impression_ts, u[_EARLY], u[_EARLY_BY], u[_DELAY])
            values = [f'{head}"doc_id":"{d}","grade":{t},"ts":{ts!r}}}'.encode()
                      for d, t, ts in zip(docs, tokens, times, strict=True)]
            out, last = self._deliver(values, times, u[_DUP], u[_LAG], key)
            arrived = dict(zip(docs, last, strict=True))
        fixes = np.flatnonzero(corrected)
        if fixes.size:
            fixed = [docs[i] for i in fixes.tolist()]
            waits = _exponential(u[_FIX_DELAY, fixes], config.label_delay_mean_s).tolist()
            times = [round(arrived[d] + 1.0 + wait, 3) for d, wait in zip(fixed, waits, strict=True)]
            fix_tokens = _tokens(true[fixes].tolist(), u[_FIX_SPELL, fixes])
            values = [f'{head}"doc_id":"{d}","grade":{t},"ts":{ts!r}}}'.encode()
                      for d, t, ts in zip(fixed, fix_tokens, times, strict=True)]
            out.extend(self._deliver(values, times, u[_FIX_DUP, fixes], u[_FIX_LAG, fixes], key)[0])
        return out, dict(zip(docs, true.tolist(), strict=True))

    def query(self, query: str, doc_ids: tuple[str, ...], levels: IntArray, first_ts: float
              ) -> list[SimEvent]:
        """One query-level judgment of the whole pool, after the query's first session."""
        u = self.rng.random((_ROWS, len(doc_ids)))
        tokens = _tokens(levels.tolist(), u[_SPELL])
        grades = ",".join(f'{{"doc_id":"{d}","grade":{t}}}' for d, t in zip(doc_ids, tokens, strict=True))
        ts = self._times(first_ts, u[_EARLY, :1], u[_EARLY_BY, :1], u[_DELAY, :1])[0]
        value = (f'{{"type":"annotation","schema":1,"query":{json_text(query)},'
                 f'"grades":[{grades}],"ts":{ts!r}}}')
        return self._deliver([value.encode()], [ts], u[_DUP, :1], u[_LAG, :1], query.encode("utf-8"))[0]
