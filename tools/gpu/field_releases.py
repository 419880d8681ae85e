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
    from rlgauntlet.published import local_problem, release, releases_root

    board = load_board(ROOT / "boards" / f"{board_name}.yaml")
    source, target, total = releases_root(), ROOT / ".releases", 0
    for entry in board.agents:
        if not entry.agent.startswith("published:"):
            continue
        item = release(entry.agent.split(":", 1)[1])
        repo = item["repository"].split("/", 1)[1]
        for which in ("agent", "attacker") if item.get("attacker") else ("agent",):
            problem = local_problem(item, which)  # a missing or changed file is refused here, not there
            if problem:
                print(f"field_releases: {problem[1]}", file=sys.stderr)
                raise SystemExit(2)
        for path in [item["path"]] + ([item["attacker"]["path"]] if item.get("attacker") else []):
            copy = target / repo / path
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / repo / path, copy)
            total += copy.stat().st_size
    print(f"{board_name}: {total / 1e6:.1f} MB of release files in {target}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("give one board, for example: python tools/gpu/field_releases.py field-halfcheetah", file=sys.stderr)
        raise SystemExit(2)
    main(sys.argv[1])
