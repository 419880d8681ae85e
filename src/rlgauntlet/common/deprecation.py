"""Old module names kept for one version after a module moved, with a warning.

A moved module leaves a three-line module at its old name::

    from rlgauntlet.common.deprecation import moved
    from rlgauntlet.experiments import evaluations

    __getattr__ = moved(__name__, evaluations)

so that ``from rlgauntlet.experiments.plan import checked_threats`` keeps working (PEP 562's
module ``__getattr__``) and says where the name lives now.
"""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Callable


def moved(old: str, new: ModuleType) -> Callable[[str], object]:
    """Warn (DeprecationWarning) that module ``old`` is now ``new``; return the ``__getattr__`` that
    forwards every name of ``old`` to ``new``."""
    warnings.warn(f"{old} is now {new.__name__}: import it from there (the old name goes in the next version)",
                  DeprecationWarning, stacklevel=3)

    def forward(name: str) -> object:
        return getattr(new, name)

    return forward
