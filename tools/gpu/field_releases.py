"""Copy one board's release files (each agent's model and its authors' attacker) from
``$RLGAUNTLET_RELEASES`` into ``.releases/`` (ignored by git), laid out as the clones are, so that a
lent machine's field chunk carries only what its board reads (docs/gpu.md, "A field's chunk").

Run: python tools/gpu/field_releases.py BOARD   (for example field-halfcheetah)
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(board_name: str) -> None:
    from rlgauntlet.gauntlet.board import load_board
    from rlgauntlet.published import local_file, release, releases_root

    board = load_board(ROOT / "boards" / f"{board_name}.yaml")
    source, target, total = releases_root(), ROOT / ".releases", 0
    for entry in board.agents:
        if not entry.agent.startswith("published:"):
            continue
        item = release(entry.agent.split(":", 1)[1])
        for which in ("agent", "attacker") if item.get("attacker") else ("agent",):
            found = local_file(item, which)  # checked against the catalogue: a missing or changed file is refused here
            copy = target / found.relative_to(source)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(found, copy)
            total += copy.stat().st_size
    print(f"{board_name}: {total / 1e6:.1f} MB of release files in {target}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("give one board, for example: python tools/gpu/field_releases.py field-halfcheetah", file=sys.stderr)
        raise SystemExit(2)
    from rlgauntlet.errors import UserError

    try:
        main(sys.argv[1])
    except UserError as err:  # a board, release or clone that is not there: one line
        print(f"field_releases: {err}", file=sys.stderr)
        raise SystemExit(2) from None
