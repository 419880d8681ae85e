"""Nested Python state written as data: one ``.npz`` of arrays and JSON, read without unpickling.

A training run's state at a checkpoint (envs' wrapper attributes, random generators, rollout
buffers) is a tree of dicts, lists, tuples, deques, numbers, strings, bytes, NumPy arrays and
torch tensors. :func:`save_plain` writes such a tree to one compressed ``.npz``: every array (and every
bytes value, every NumPy scalar, every tensor) as an entry of its own, the tree itself as JSON
with typed references to them. :func:`load_plain` reads it back with ``allow_pickle=False``,
so a file someone else wrote can hold numbers, never code. Floats keep every bit: JSON writes a
Python float as its shortest round-tripping repr, NumPy scalars keep their dtype.

Example:
    >>> import io, numpy as np
    >>> tree = {"steps": 3, "obs": np.arange(4.0), "key": (b"ab", np.float32(0.5))}
    >>> buffer = io.BytesIO(); save_plain(buffer, tree); _ = buffer.seek(0)
    >>> back = load_plain(buffer)
    >>> back["key"], back["obs"].tolist()
    ((b'ab', np.float32(0.5)), [0.0, 1.0, 2.0, 3.0])
"""

from __future__ import annotations

import json
import os
import zipfile
from collections import deque
from typing import IO, Any

import numpy as np
import torch

#: the npz entry holding the tree (the others are its arrays, named a0, a1, ...)
TREE = "tree"


class NotPlainData(TypeError):
    """A value in the tree that is not data this format writes (an object, a function)."""


def _encode(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    def ref(kind: str, array: np.ndarray) -> dict:
        name = f"a{len(arrays)}"
        arrays[name] = array
        return {kind: name}

    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int) and not isinstance(value, np.generic):
        return value
    if isinstance(value, float) and not isinstance(value, np.generic):
        return value
    if isinstance(value, np.generic):
        return ref("__scalar__", np.asarray(value))
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise NotPlainData("an array of Python objects")
        return ref("__array__", value)
    if isinstance(value, torch.Tensor):
        return ref("__tensor__", value.detach().cpu().numpy())
    if isinstance(value, bytes):
        return ref("__bytes__", np.frombuffer(value, dtype=np.uint8))
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, arrays) for v in value]}
    if isinstance(value, deque):
        return {"__deque__": [_encode(v, arrays) for v in value], "maxlen": value.maxlen}
    if isinstance(value, list):
        return [_encode(v, arrays) for v in value]
    if isinstance(value, dict):
        return {"__dict__": [[_encode(k, arrays), _encode(v, arrays)] for k, v in value.items()]}
    raise NotPlainData(f"a {type(value).__name__}")


def _decode(value: Any, arrays) -> Any:
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    if not isinstance(value, dict):
        return value
    if "__scalar__" in value:
        return arrays[value["__scalar__"]][()]
    if "__array__" in value:
        return np.array(arrays[value["__array__"]])
    if "__tensor__" in value:
        return torch.from_numpy(np.array(arrays[value["__tensor__"]]))
    if "__bytes__" in value:
        return arrays[value["__bytes__"]].tobytes()
    if "__tuple__" in value:
        return tuple(_decode(v, arrays) for v in value["__tuple__"])
    if "__deque__" in value:
        return deque((_decode(v, arrays) for v in value["__deque__"]), maxlen=value["maxlen"])
    if "__dict__" in value:
        pairs = [(_decode(k, arrays), _decode(v, arrays)) for k, v in value["__dict__"]]
        decoded = dict(pairs)
        if len(decoded) != len(pairs):  # never written so: one of two values would be dropped silently
            raise ValueError("a key given twice in one mapping")
        return decoded
    raise ValueError(f"an entry of unknown kind {sorted(value)[:3]}")


def save_plain(file: str | os.PathLike | IO[bytes], tree: Any) -> None:
    """Write ``tree`` (dicts, lists, tuples, deques, None, bools, ints, floats, strings, bytes,
    NumPy arrays and scalars, torch tensors) to ``file`` as one ``.npz``; anything else raises
    :class:`NotPlainData` before a byte is written."""
    arrays: dict[str, np.ndarray] = {}
    encoded = json.dumps(_encode(tree, arrays))
    np.savez_compressed(file, **{TREE: np.array(encoded)}, **arrays)


def load_plain(file: str | os.PathLike | IO[bytes]) -> Any:
    """The tree :func:`save_plain` wrote to ``file``. A file that holds pickled objects or is not
    such a tree raises ``ValueError`` (never unpickled)."""
    position = None if isinstance(file, (str, os.PathLike)) else file.tell()
    if not zipfile.is_zipfile(file):  # np.load would call any other file "pickled data"
        raise ValueError("not an npz file")
    if position is not None:
        file.seek(position)
    try:
        with np.load(file, allow_pickle=False) as saved:
            arrays = {name: saved[name] for name in saved.files}
    except OSError as exc:
        raise ValueError(f"not an npz file ({exc})") from None
    if TREE not in arrays or arrays[TREE].dtype.kind != "U":
        raise ValueError("no tree entry: not a file of plain data")
    try:
        return _decode(json.loads(str(arrays[TREE])), arrays)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"a malformed tree ({type(exc).__name__}: {exc})") from None
