"""Where results go: checked before any work starts, and never over a file rlgauntlet did not write.

Every file rlgauntlet writes for a user carries a mark: JSON a top-level ``"generator"`` field,
PNG plots a ``Software`` text chunk, HTML reports a ``<meta name="generator">`` line. An output
path is accepted when it is new, or when the file there carries our mark (a re-run replaces its
own output). Anything else is refused with one line, and the file is left byte-identical:

* a directory, where a file is meant;
* an existing file without our mark (someone's data, a results store, a zoo agent);
* the results store of the same command (``--store x.sqlite --out x.sqlite``);
* a place that cannot be written (no permission, a read-only or virtual file system), found by
  creating and removing a probe file in the nearest existing folder, before the first episode.

Example:
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> out = check_output(folder / "report.json")
    >>> write_json(out, {"return_mean": 500.0})
    >>> check_output(out) == out   # ours: a re-run may replace it
    True
    >>> (folder / "notes.json").write_text("{}")
    2
    >>> check_output(folder / "notes.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rlgauntlet.errors.UserError: --out ... exists and was not written by rlgauntlet; ...
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

from rlgauntlet.errors import UserError

#: the value of the mark: "rlgauntlet" and the version that wrote the file
GENERATOR = "rlgauntlet"
#: PNG text chunk key matplotlib writes from ``metadata={"Software": ...}``
PNG_KEY = "Software"
HTML_MARK = '<meta name="generator" content="rlgauntlet'


def generator() -> str:
    import rlgauntlet

    return f"{GENERATOR} {rlgauntlet.__version__}"


def written_by_us(path: Path) -> bool:
    """Whether the file at ``path`` carries rlgauntlet's mark (JSON, PNG or HTML)."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return False
    if head.startswith(b"\x89PNG"):
        return f"{PNG_KEY}\x00{GENERATOR}".encode() in head
    if HTML_MARK.encode() in head[:4096]:
        return True
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    mark = data.get("generator") if isinstance(data, dict) else None
    # exactly our name, or our name and a version: another tool's generator field is not our mark
    return isinstance(mark, str) and (mark == GENERATOR or mark.startswith(GENERATOR + " "))


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def _probe(folder: Path) -> bool:
    """Whether a file can be created in ``folder`` (tried, then removed: os.access says yes to
    root everywhere, /proc included)."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".rlgauntlet-probe-"):
            return True
    except OSError:
        return False


def check_output(path: Path | str | None, option: str = "--out", protect: Iterable[Path | str | None] = ()) -> Path | None:
    """Accept ``path`` as an output file, or raise :class:`UserError` naming the problem and the fix.

    Args:
        path: where the command will write (None: no output asked for; returned unchanged).
        option: the option's name, for the message.
        protect: files this command reads or keeps (its results store) that must not be the output.
    """
    if path is None:
        return None
    path = Path(path)
    for other in protect:
        if other is not None and _same(path, Path(other)):
            raise UserError(f"{option} {path} is the results store itself; give another file name, e.g. "
                            f"{option} {path.with_suffix('.json').name if path.suffix != '.json' else 'out.json'}")
    if path.is_dir():
        raise UserError(f"{option} {path} is a directory; give a file name, e.g. {option} {path}/out{path.suffix or '.json'}")
    if path.exists() and not written_by_us(path):
        raise UserError(f"{option} {path} exists and was not written by rlgauntlet; it was left untouched: "
                        "give a new file name or remove it yourself")
    folder = path.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise UserError(f"{option} {path}: {folder} is a file, not a folder; give a path in a folder")
    if not _probe(folder) or (path.exists() and not os.access(path, os.W_OK)):
        raise UserError(f"{option} {path} cannot be written (no permission or a read-only place); "
                        "give a path in a folder you can write")
    return path


def check_run_dir(path: Path | str, option: str = "--run-dir") -> Path:
    """Accept ``path`` as a run folder (new, or an existing folder to resume); refuse a file or
    a place that cannot be written, before any work."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{option} {path} is a file; give a folder (new, or one to resume)")
    folder = path
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir() or not _probe(folder):
        raise UserError(f"{option} {path} cannot be written (no permission or a read-only place); "
                        "give a folder you can write")
    return path


def _atomic_write(path: Path, payload: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; an output is as readable as any file the user makes
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path | str, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON with rlgauntlet's mark, atomically (a reader never sees half a file)."""
    marked = {"generator": generator(), **{k: v for k, v in data.items() if k != "generator"}}
    _atomic_write(Path(path), (json.dumps(marked, indent=2) + "\n").encode())


def save_figure(fig: Any, path: Path | str, **kwargs: Any) -> Path:
    """Save a matplotlib figure as PNG with rlgauntlet's mark."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={PNG_KEY: generator()}, **kwargs)
    return path
