"""Aggregates across training seeds with honest uncertainty, as the rliable paper defines them
(Agarwal et al. 2021, "Deep RL at the Edge of the Statistical Precipice").

* the interquartile mean (IQM): the mean of the middle 50% of the scores (25% trimmed from each
  end), robust to an outlier seed and more efficient than the median;
* stratified bootstrap confidence intervals: runs resampled with replacement within each task
  (stratum), the statistic recomputed on every resample, the percentile interval reported;
* the probability of improvement P(X > Y): the chance that a run of method X scores above a run
  of method Y (ties count one half), averaged over tasks: the Mann-Whitney U statistic over m·n.

The bootstrap is scipy's (``scipy.stats.bootstrap``, percentile method as rliable uses): the
rliable package is archived, and scipy is maintained and already a dependency (docs/decisions.md).

Example:
    >>> iqm([1.0, 2.0, 3.0, 4.0, 100.0, 5.0, 6.0, 7.0])
    4.5
    >>> probability_of_improvement([3.0, 4.0], [1.0, 4.0])
    0.625
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy import stats

#: resamples of every bootstrap interval
RESAMPLES = 2000


def iqm(scores: Sequence[float] | np.ndarray, axis: int = -1) -> float | np.ndarray:
    """The interquartile mean (25% trimmed from each end along ``axis``): a float for one set of
    scores, an array for a batch of them (the bootstrap's resamples)."""
    out = stats.trim_mean(np.asarray(scores, dtype=float), 0.25, axis=axis)
    return float(out) if np.ndim(out) == 0 else out


def probability_of_improvement(x: Sequence[float], y: Sequence[float]) -> float:
    """P(X > Y) + ½·P(X = Y) for one run of each, over every pair of runs (one task)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    greater = (x[:, None] > y[None, :]).sum()
    ties = (x[:, None] == y[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(x) * len(y)))


def _stratified_statistic(statistic):
    def on_strata(*strata: np.ndarray, axis: int = -1) -> np.ndarray:
        # every stratum's resample has its own length: the statistic of the concatenation
        return statistic(np.concatenate(strata, axis=axis), axis=axis)
    return on_strata


def iqm_interval(scores_by_task: Sequence[Sequence[float]], confidence: float = 0.95, seed: int = 0,
                 resamples: int = RESAMPLES) -> tuple[float, float | None, float | None]:
    """IQM of all runs of all tasks, and its stratified-bootstrap percentile interval (runs
    resampled within each task). With fewer than two runs in every task there is nothing to
    resample: the interval is (None, None)."""
    strata = [np.asarray(s, dtype=float) for s in scores_by_task if len(s)]
    point = float(iqm(np.concatenate(strata)))
    if all(len(s) < 2 for s in strata):
        return point, None, None
    result = stats.bootstrap(tuple(strata), _stratified_statistic(iqm), n_resamples=resamples,
                             confidence_level=confidence, method="percentile", vectorized=True, paired=False,
                             rng=np.random.default_rng(seed))
    low, high = result.confidence_interval
    return point, float(low), float(high)


def improvement_interval(x: Sequence[float], y: Sequence[float], confidence: float = 0.95, seed: int = 0,
                         resamples: int = RESAMPLES) -> tuple[float, float | None, float | None]:
    """P(X > Y) and its bootstrap percentile interval (runs of X and of Y resampled apart)."""
    point = probability_of_improvement(x, y)
    if len(x) < 2 or len(y) < 2:
        return point, None, None
    result = stats.bootstrap((np.asarray(x, float), np.asarray(y, float)),
                             lambda a, b: probability_of_improvement(a, b), n_resamples=resamples,
                             confidence_level=confidence, method="percentile", vectorized=False, paired=False,
                             rng=np.random.default_rng(seed))
    low, high = result.confidence_interval
    return point, float(low), float(high)
