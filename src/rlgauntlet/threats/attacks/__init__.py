"""White-box and baseline attacks on observations, one per file.

``fgsm:objective=X`` and ``pgd:objective=X`` are spec shorthands for the attack ``X``
(minbest, minq, maxdiff, momentum, targeted, cw) with one step of size ε, or with PGD
defaults (10 steps); see ``threats.spec``.
"""

from rlgauntlet.threats.attacks import cw, maxdiff, minbest, minq, momentum, push, random_sign, targeted  # noqa: F401
from rlgauntlet.threats.base import objectives

OBJECTIVES = objectives()  # from the registry: each attack declares ``objective = True``
