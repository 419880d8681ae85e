"""File checksums: the sha256 that identifies agent files, attackers, dynamics models and zoo files."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of the file at ``path``, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def git_blob_id(path: str | Path) -> str:
    """The id git gives the file's content (hex sha1 of ``blob SIZE\\0`` and the bytes), which a
    repository's tree records for every file: it identifies a released file whose sha256 was never
    published, where only the tree was readable.

    Example:
        >>> import tempfile, os
        >>> with tempfile.NamedTemporaryFile(delete=False) as f:
        ...     _ = f.write(b"hello\\n")
        >>> git_blob_id(f.name)   # `git hash-object` says the same
        'ce013625030ba8dba906f756967f9e9ca394464a'
        >>> os.unlink(f.name)
    """
    path = Path(path)
    h = hashlib.sha1(usedforsecurity=False)
    h.update(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
