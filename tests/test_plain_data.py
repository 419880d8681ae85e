"""Plain data files: every kind of value a run's state holds comes back bit for bit, and a file
that holds code (a pickle) or is not ours is refused without being unpickled."""

import io
import pickle
import struct
from collections import deque

import numpy as np
import pytest
import torch

from rlgauntlet.common.plain_data import NotPlainData, load_plain, save_plain


def _round_trip(tree):
    buffer = io.BytesIO()
    save_plain(buffer, tree)
    buffer.seek(0)
    return load_plain(buffer)


def test_every_kind_of_value_comes_back_with_its_type_and_every_bit():
    rng = np.random.default_rng(0)
    tree = {
        "floats": [0.1 + 0.2, -0.0, 5e-324, 1e308, float("inf")],  # shortest repr, signed zero, subnormal
        "pcg64": {"state": 2**127 + 12345, "inc": 2**128 - 1},  # a generator's state: ints beyond 64 bits
        "scalars": (np.float32(1 / 3), np.int64(-7), np.bool_(True), np.uint8(255)),
        "array": rng.normal(size=(3, 4)), "ints": np.arange(5, dtype=np.int16),
        "tensor": torch.tensor([1.5, -2.25], dtype=torch.float32), "bytes": b"\x00ab\x00",
        "window": deque([{"r": 1.25, "l": 3}], maxlen=100), 3: None, "nested": ((1, (2,)), [True, "s"]),
    }
    back = _round_trip(tree)
    assert [struct.pack("<d", x) for x in back["floats"]] == [struct.pack("<d", x) for x in tree["floats"]]
    assert back["pcg64"] == tree["pcg64"]
    assert [type(x) for x in back["scalars"]] == [type(x) for x in tree["scalars"]]
    assert back["scalars"][0].tobytes() == tree["scalars"][0].tobytes() and back["scalars"][1:] == tree["scalars"][1:]
    assert back["array"].dtype == np.float64 and back["array"].tobytes() == tree["array"].tobytes()
    assert back["ints"].dtype == np.int16 and back["ints"].tolist() == list(range(5))
    # bit-exactness is the property under test: a file must give back the very bits it was given
    assert isinstance(back["tensor"], torch.Tensor) and torch.equal(back["tensor"], tree["tensor"])
    assert back["bytes"] == b"\x00ab\x00" and back[3] is None
    assert isinstance(back["window"], deque) and back["window"].maxlen == 100 and list(back["window"]) == [{"r": 1.25, "l": 3}]
    assert back["nested"] == ((1, (2,)), [True, "s"]) and isinstance(back["nested"][0][1], tuple)


def test_an_object_is_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "state.npz"
    for value in (object(), np.array([object()]), {"f": len}):
        with pytest.raises(NotPlainData):
            save_plain(path, {"ok": 1, "bad": value})
        assert not path.exists()


def test_a_file_that_holds_a_pickle_is_never_unpickled(tmp_path):
    class Boom:
        def __reduce__(self):
            return (exec, ("raise SystemExit('unpickled')",))

    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, tree=np.array([Boom()], dtype=object))
    with pytest.raises(ValueError):
        load_plain(pickled)
    raw = tmp_path / "raw.npz"
    raw.write_bytes(pickle.dumps(Boom()))
    with pytest.raises(ValueError, match="not an npz file"):
        load_plain(raw)
    other = tmp_path / "other.npz"
    np.savez(other, weights=np.zeros(3))  # an npz we did not write
    with pytest.raises(ValueError, match="not a file of plain data"):
        load_plain(other)


def test_a_mapping_with_a_key_given_twice_is_refused(tmp_path):
    """Written by hand (save_plain never writes one): the reader refuses it rather than keep one value."""
    import json

    path = tmp_path / "twice.npz"
    tree = {"__dict__": [["steps", 1], ["steps", 2]]}
    np.savez(path, tree=np.array(json.dumps(tree)))
    with pytest.raises(ValueError, match="a key given twice"):
        load_plain(path)
    np.savez(path, tree=np.array(json.dumps({"__dict__": [["steps", 1], ["seed", 2]]})))
    assert load_plain(path) == {"steps": 1, "seed": 2}
