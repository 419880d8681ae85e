"""Where results go: checked before any work starts, and never over a file rlgauntlet did not write.

Every file rlgauntlet writes for a user carries a mark of what wrote it and what it is: JSON
top-level ``"generator"`` and ``"output_kind"`` fields, PNG plots ``Software`` and
``rlgauntlet-output`` text chunks, HTML pages ``<meta name="generator">`` and
``<meta name="rlgauntlet-output">`` lines, text tables (Markdown, LaTeX) a first-line comment
``generator: rlgauntlet …; rlgauntlet-output: KIND``. An output path is accepted when it is new, or when
the file there carries our mark *of the same kind* (a re-run replaces its own output). Anything
else is refused with one line, and the file is left byte-identical:

* a directory, where a file is meant;
* an existing file without our mark (someone's data, a results store, a zoo agent);
* a file of ours of another kind (a gauntlet's ``gauntlet.json`` is not a leaderboard's JSON,
  even though both are ours: a sibling output never replaces it);
* the results store of the same command (``--store x.sqlite --out x.sqlite``);
* a place that cannot be written (no permission, a read-only or virtual file system), found by
  creating and removing a probe file in the nearest existing folder, before the first episode.

Example:
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> out = check_output(folder / "report.json", kind="evaluation")
    >>> write_json(out, {"return_mean": 500.0}, kind="evaluation")
    >>> check_output(out, kind="evaluation") == out   # ours and of this kind: a re-run may replace it
    True
    >>> check_output(out, kind="leaderboard")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rlgauntlet.errors.UserError: --out ... is rlgauntlet's evaluation output, not a leaderboard; ...
    >>> (folder / "notes.json").write_text("{}")
    2
    >>> check_output(folder / "notes.json", kind="evaluation")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rlgauntlet.errors.UserError: --out ... exists and was not written by rlgauntlet; ...
"""

from __future__ import annotations

import json
import os
import re
import struct
import tempfile
from pathlib import Path
from typing import Any, Iterable

from rlgauntlet.errors import UserError

#: the value of the mark: "rlgauntlet" and the version that wrote the file
GENERATOR = "rlgauntlet"
#: PNG text chunk key matplotlib writes from ``metadata={"Software": ...}``
PNG_KEY = "Software"
#: PNG text chunk key, JSON field and HTML meta name of the file's kind
PNG_KIND_KEY = "rlgauntlet-output"
JSON_KIND_KEY = "output_kind"
HTML_MARK = '<meta name="generator" content="rlgauntlet'
HTML_KIND = re.compile(r'<meta name="rlgauntlet-output" content="([^"]*)">')
#: the first line of a marked text file: a Markdown (HTML) or LaTeX comment
TEXT_MARK = re.compile(r"^(?:<!--|%) generator: ([^;\n]*); rlgauntlet-output: ([^\n]*?)(?: -->)?\r?\n")
TEXT_COMMENTS = {"markdown": ("<!-- ", " -->"), "latex": ("% ", "")}


def generator() -> str:
    from rlgauntlet.version import __version__

    return f"{GENERATOR} {__version__}"


def _png_texts(head: bytes) -> dict[str, str]:
    """The tEXt chunks of a PNG's first bytes (keyword -> text), read by walking its chunks."""
    texts, at = {}, 8
    while at + 8 <= len(head):
        (length,) = struct.unpack(">I", head[at:at + 4])
        kind, data = head[at + 4:at + 8], head[at + 8:at + 8 + length]
        if kind == b"tEXt" and b"\x00" in data:
            key, _, text = data.partition(b"\x00")
            texts[key.decode("latin-1")] = text.decode("latin-1")
        if kind in (b"IDAT", b"IEND"):
            break
        at += 12 + length
    return texts


def _ours(mark: object) -> bool:
    # exactly our name, or our name and a version: another tool's generator field is not our mark
    return isinstance(mark, str) and (mark == GENERATOR or mark.startswith(GENERATOR + " "))


def output_kind(path: Path | str) -> str | None:
    """What the file at ``path`` is, as rlgauntlet marked it (``"evaluation"``, ``"leaderboard"``,
    ...); ``""`` for a file of ours that names no kind (an earlier version's); None when the file
    does not carry rlgauntlet's mark (or cannot be read)."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return None
    if head.startswith(b"\x89PNG"):
        texts = _png_texts(head)
        return texts.get(PNG_KIND_KEY, "") if _ours(texts.get(PNG_KEY)) else None
    text_mark = TEXT_MARK.match(head[:1024].decode("utf-8", errors="ignore"))
    if text_mark is not None:
        return text_mark.group(2) if _ours(text_mark.group(1)) else None
    if HTML_MARK.encode() in head[:4096]:
        found = HTML_KIND.search(head[:4096].decode("utf-8", errors="ignore"))
        return found.group(1) if found else ""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or not _ours(data.get("generator")):
        return None
    kind = data.get(JSON_KIND_KEY, "")
    return kind if isinstance(kind, str) else ""


def written_by_us(path: Path) -> bool:
    """Whether the file at ``path`` carries rlgauntlet's mark (JSON, PNG or HTML), of any kind."""
    return output_kind(path) is not None


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop (pathlib)
        return False


def _probe(folder: Path) -> bool:
    """Whether a file can be created in ``folder`` (tried, then removed: os.access says yes to
    root everywhere, /proc included)."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".rlgauntlet-probe-"):
            return True
    except OSError:
        return False


def _other_name(given: Path) -> Path:
    """A name beside ``given`` with the same ending (what a refusal suggests instead); a results
    store's name becomes a JSON name (an output named like a store is a slip)."""
    suffix = ".json" if given.suffix.lower() in (".sqlite", ".sqlite3", ".db") else given.suffix
    return given.with_name(f"{given.stem}-2{suffix}")


def check_output(path: Path | str | None, option: str = "--out", protect: Iterable[Path | str | None] = (), *,
                 kind: str, given: Path | str | None = None) -> Path | None:
    """Accept ``path`` as an output file of ``kind``, or raise :class:`UserError` naming the
    problem and a fix the command accepts.

    Args:
        path: where the command will write (None: no output asked for; returned unchanged).
        option: the option's name, for the message.
        protect: files this command reads or keeps (its results store) that must not be the output.
        kind: what the command writes there (``"evaluation"``, ``"leaderboard page"``, ...): an
            existing file of ours is replaced only when it is of the same kind.
        given: the value of ``option`` when ``path`` is a file the command writes beside it (a
            plot's numbers, a page's JSON): the message then speaks of that value, and suggests
            another value of the option, not a name the option would refuse.
    """
    if path is None:
        return None
    path = Path(path)
    main = Path(given) if given is not None else path
    what = f"{option} {main}" if given is None else f"{option} {main} writes {path}, and {path}"
    fix = f"{option} {_other_name(main).as_posix() if main.parent != Path('.') else _other_name(main).name}"
    for other in protect:
        if other is not None and _same(path, Path(other)):
            raise UserError(f"{what} is the results store itself; give another file name, e.g. {fix}")
    if path.is_dir():
        if given is None:
            fix = f"{option} {(path / ('out' + (path.suffix or '.json'))).as_posix()}"
        raise UserError(f"{what} is a directory; give a file name, e.g. {fix}")
    if path.exists():
        found = output_kind(path)
        if found is None:
            raise UserError(f"{what} exists and was not written by rlgauntlet; it was left untouched: "
                            f"give a new file name (e.g. {fix}) or remove it yourself")
        if found != kind:
            was = f"rlgauntlet's {found} output" if found else "an rlgauntlet output of an earlier version"
            raise UserError(f"{what} is {was}, not a {kind}; it was left untouched: give a new file name "
                            f"(e.g. {fix}) or remove it yourself")
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


def write_text_atomic(path: Path | str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place: a kill mid-write
    leaves the previous file (or none), never half of one (a manifest or progress a resume reads)."""
    _atomic_write(Path(path), text.encode())


def write_json(path: Path | str, data: dict[str, Any], *, kind: str) -> None:
    """Write ``data`` as JSON with rlgauntlet's mark and its ``kind``, atomically (a reader never
    sees half a file)."""
    marked = {"generator": generator(), JSON_KIND_KEY: kind,
              **{k: v for k, v in data.items() if k not in ("generator", JSON_KIND_KEY)}}
    _atomic_write(Path(path), (json.dumps(marked, indent=2) + "\n").encode())


def write_text(path: Path | str, text: str, *, kind: str, syntax: str) -> None:
    """Write a text table (``syntax``: ``markdown`` or ``latex``) with rlgauntlet's mark and its
    ``kind`` as a first-line comment of that syntax, atomically."""
    start, end = TEXT_COMMENTS[syntax]
    _atomic_write(Path(path), f"{start}generator: {generator()}; rlgauntlet-output: {kind}{end}\n{text}".encode())


def save_figure(fig: Any, path: Path | str, *, kind: str, **kwargs: Any) -> Path:
    """Save a matplotlib figure as PNG with rlgauntlet's mark and its ``kind``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={PNG_KEY: generator(), PNG_KIND_KEY: kind}, **kwargs)
    return path

