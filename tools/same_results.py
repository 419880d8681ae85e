"""Compare two result files (``evaluate --out`` JSON, ``gauntlet.json``) field by field, but for
paths and seconds: the check that a refactor changed no number.

    python tools/same_results.py before/gauntlet.json after/gauntlet.json

Prints every differing field (dotted path) and exits 1 when any differs beyond a path (a string
holding either file's folder) or a time (a key naming seconds or a wall time).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TIME_KEYS = ("seconds", "wall_seconds", "train_seconds", "per_second")


def flat(value, prefix: str = ""):
    """(dotted path, leaf) for every leaf of a JSON value."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from flat(item, f"{prefix}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from flat(item, f"{prefix}[{index}]")
    else:
        yield prefix, value


def differences(before: Path, after: Path) -> list[tuple[str, object, object]]:
    a, b = dict(flat(json.loads(before.read_text()))), dict(flat(json.loads(after.read_text())))
    folders = (str(before.parent), str(after.parent))
    out = []
    for key in sorted(set(a) | set(b)):
        old, new = a.get(key, "<missing>"), b.get(key, "<missing>")
        if old == new or key.rsplit(".", 1)[-1] in TIME_KEYS:
            continue
        if isinstance(old, str) and isinstance(new, str) and any(f in old or f in new for f in folders):
            continue
        out.append((key, old, new))
    return out


if __name__ == "__main__":
    found = differences(Path(sys.argv[1]), Path(sys.argv[2]))
    for key, old, new in found:
        print(f"{key}: {old!r} -> {new!r}")
    print(f"{len(found)} field(s) differ beyond paths and seconds")
    sys.exit(1 if found else 0)
