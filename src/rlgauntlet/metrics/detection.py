"""OOD-detection metrics: how well a per-step score separates shifted (OOD) steps from
nominal (ID) ones, with OOD as the positive class and a higher score meaning "more OOD".

* AUROC: area under the ROC curve (scikit-learn's ``roc_auc_score``): 1.0 when every OOD
  score is above every ID score, 0.5 for scores that carry no information (ties count half).
* FPR at 95% TPR: the fraction of ID steps flagged when the threshold is set to flag 95% of
  the OOD steps (lower is better).
* The per-trial summary of the benchmark (paper 002): mean and sample std (ddof = 1) over
  trials, and the best trial (the paper's headline "best AUC").

Example:
    >>> auroc([0.1, 0.2], [0.3, 0.4]), auroc([1.0, 1.0], [1.0, 1.0])
    (1.0, 0.5)
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rlgauntlet.errors import UserError


def _labelled(id_scores: Sequence[float], ood_scores: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    id_scores, ood_scores = np.asarray(id_scores, dtype=np.float64), np.asarray(ood_scores, dtype=np.float64)
    if id_scores.size == 0 or ood_scores.size == 0:
        raise UserError("AUROC needs scores from both the ID and the OOD steps; one of them is empty")
    if not (np.isfinite(id_scores).all() and np.isfinite(ood_scores).all()):
        raise UserError("an uncertainty score is NaN or infinite; check the agent's outputs")
    labels = np.concatenate([np.zeros(id_scores.size), np.ones(ood_scores.size)])
    return labels, np.concatenate([id_scores, ood_scores])


def auroc(id_scores: Sequence[float], ood_scores: Sequence[float]) -> float:
    """Area under the ROC curve, OOD positive (scikit-learn's ``roc_auc_score``)."""
    from sklearn.metrics import roc_auc_score

    labels, scores = _labelled(id_scores, ood_scores)
    return float(roc_auc_score(labels, scores))


def fpr_at_tpr(id_scores: Sequence[float], ood_scores: Sequence[float], tpr: float = 0.95) -> float:
    """False-positive rate at the first ROC point whose true-positive rate reaches ``tpr``."""
    from sklearn.metrics import roc_curve

    labels, scores = _labelled(id_scores, ood_scores)
    fpr, tprs, _ = roc_curve(labels, scores)
    return float(fpr[np.searchsorted(tprs, tpr, side="left")])


def best_threshold(id_scores: Sequence[float], ood_scores: Sequence[float]) -> float:
    """The score threshold that maximises TPR − FPR (Youden's J): the line drawn in the
    per-step plots (the paper draws one without saying how it was chosen)."""
    from sklearn.metrics import roc_curve

    labels, scores = _labelled(id_scores, ood_scores)
    fpr, tprs, thresholds = roc_curve(labels, scores)
    best = int(np.argmax(tprs - fpr))
    return float(min(thresholds[best], scores.max()))


def trial_summary(values: Sequence[float]) -> dict:
    """Mean, sample std (ddof = 1; 0 for one trial), best (maximum) and every trial, as the
    paper's appendix tables give them."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("no trials")
    return {"mean": float(np.mean(values)), "std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
            "best": max(values), "trials": values}
