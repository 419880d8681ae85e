"""What the benchmark scripts share."""

from __future__ import annotations

import sys

from rlgauntlet.errors import UserError
from rlgauntlet.victims import Victim, load_victim


def zoo_victim_or_exit(name: str, script: str) -> Victim:
    """The zoo agent ``name``, or exit 2 with the reason and the command that trains it."""
    try:
        return load_victim(f"zoo:{name}")
    except UserError as exc:
        print(f"{script}: {exc}; train it with `rlgauntlet train --preset {name}`", file=sys.stderr)
        sys.exit(2)
