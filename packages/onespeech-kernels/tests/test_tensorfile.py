from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from onespeech.kernels.errors import ModelIntegrityError, TensorFileError
from onespeech.kernels.tensorfile import ALIGNMENT, MAGIC, read_tensor_file, write_tensor_file


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "w": rng.standard_normal((3, 5)).astype(np.float32),
        "w_bf16": rng.integers(0, 1 << 16, (7,), dtype=np.uint16),
        "ids": np.arange(4, dtype=np.int32),
        "big": np.array([1 << 40, -3], dtype=np.int64),
        "empty": np.zeros((0, 4), np.float32),
        "scalar": np.array(2.5, np.float32),
    }


def test_roundtrip_aligned_readonly(tmp_path) -> None:
    path = tmp_path / "t.bin"
    tensors = _tensors()
    write_tensor_file(path, tensors, {"format": "test", "layers": [0, 1]})
    with read_tensor_file(path) as tf:
        assert list(tf) == list(tensors)
        assert tf.metadata == {"format": "test", "layers": [0, 1]}
        assert tf.dtype_tag("w_bf16") == "bf16" and tf.dtype_tag("w") == "float32"
        for name, a in tensors.items():
            got = tf[name]
            assert got.dtype == a.dtype and got.shape == a.shape and np.array_equal(got, a)
            assert not got.flags.writeable
            if got.size:
                assert got.ctypes.data % ALIGNMENT == 0
    with pytest.raises(ValueError, match="closed"):
        tf["w"]


def test_deterministic_bytes(tmp_path) -> None:
    write_tensor_file(tmp_path / "a", _tensors(), {"x": 1})
    write_tensor_file(tmp_path / "b", _tensors(), {"x": 1})
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_rejects_unsupported_dtypes_and_metadata(tmp_path) -> None:
    with pytest.raises(ValueError, match="float64"):
        write_tensor_file(tmp_path / "x", {"a": np.zeros(2)}, {})
    with pytest.raises(ValueError, match="JSON"):
        write_tensor_file(tmp_path / "x", {}, {"a": object()})


def _write(tmp_path):
    path = tmp_path / "t.bin"
    write_tensor_file(path, _tensors(), {})
    return path


def test_truncated_file(tmp_path) -> None:
    path = _write(tmp_path)
    data = path.read_bytes()
    for cut in (len(data) - 1, 100, 20, 0):
        path.write_bytes(data[:cut])
        with pytest.raises(TensorFileError, match=f"remove {path}"):
            read_tensor_file(path)


def test_bad_magic_version_and_index(tmp_path) -> None:
    path = _write(tmp_path)
    data = bytearray(path.read_bytes())
    path.write_bytes(b"X" + data[1:])
    with pytest.raises(ModelIntegrityError, match="not a OneSpeech tensor file"):
        read_tensor_file(path)
    path.write_bytes(data[:8] + struct.pack("<I", 99) + data[12:])
    with pytest.raises(TensorFileError, match="version 99"):
        read_tensor_file(path)
    path.write_bytes(data[:16] + struct.pack("<Q", 1 << 40) + data[24:])
    with pytest.raises(TensorFileError, match="index length"):
        read_tensor_file(path)
    n = struct.unpack("<Q", data[16:24])[0]
    corrupt = data[:24] + b"{" * n + data[24 + n :]
    path.write_bytes(corrupt)
    with pytest.raises(TensorFileError, match="not valid JSON"):
        read_tensor_file(path)


@pytest.mark.parametrize(
    "edit,match",
    [
        (lambda d: d["tensors"][0].update(nbytes=4), "records 4 bytes"),
        (lambda d: d["tensors"][0].update(dtype="float16"), "unknown dtype"),
        (lambda d: d["tensors"][1].update(offset=d["tensors"][1]["offset"] + 1), "aligned"),
        (lambda d: d["tensors"][1].update(offset=d["tensors"][0]["offset"]), "overlapping"),
        (lambda d: d["tensors"][0].update(shape=[3, -5]), "invalid shape"),
        (lambda d: d["tensors"][1].update(name="w"), "repeated"),
        (lambda d: d["tensors"][-2].update(shape=[1 << 20, 4], nbytes=16 << 20), "past the end"),
    ],
)
def test_index_validation(tmp_path, edit, match) -> None:
    path = _write(tmp_path)
    data = path.read_bytes()
    n = struct.unpack("<Q", data[16:24])[0]
    doc = json.loads(data[24 : 24 + n])
    edit(doc)
    raw = json.dumps(doc, separators=(",", ":")).encode()
    first = doc["tensors"][0]["offset"]
    assert 24 + len(raw) <= first  # still fits the padding before the first tensor
    raw = raw.ljust(first - 24, b" ")
    path.write_bytes(MAGIC + data[8:16] + struct.pack("<Q", len(raw)) + raw + data[first:])
    with pytest.raises(TensorFileError, match=match):
        read_tensor_file(path)
