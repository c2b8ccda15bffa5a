"""The numpy safetensors reader: layout, bf16 bits, shards, and refusal of damaged headers."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from onespeech.kernels.errors import ModelIntegrityError
from onespeech.qwen3.safetensors import (
    MAX_HEADER_BYTES,
    SafetensorsError,
    open_checkpoint,
    open_safetensors,
)


def _write(path: Path, header: dict, data: bytes) -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def _two_tensors(path: Path) -> Path:
    a = np.arange(6, dtype="<f4").reshape(2, 3)
    b = np.array([0x3F80, 0xC020, 0x0001], dtype="<u2")  # bf16 1.0, -2.5, tiny subnormal
    header = {
        "__metadata__": {"format": "pt"},
        "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "b": {"dtype": "BF16", "shape": [3], "data_offsets": [24, 30]},
    }
    return _write(path, header, a.tobytes() + b.tobytes())


def test_reads_values_dtypes_and_metadata(tmp_path: Path) -> None:
    with open_safetensors(_two_tensors(tmp_path / "m.safetensors")) as file:
        assert file.metadata == {"format": "pt"}
        np.testing.assert_array_equal(file["a"], np.arange(6, dtype=np.float32).reshape(2, 3))
        assert file["b"].dtype == np.uint16
        assert file["b"].tolist() == [0x3F80, 0xC020, 0x0001]
        assert not file["a"].flags.writeable


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 28]}, "needs 24"),
        ({"dtype": "F32", "shape": [2, 3], "data_offsets": [8, 40]}, "outside"),
        ({"dtype": "Q4", "shape": [2, 3], "data_offsets": [0, 24]}, "not supported"),
        ({"dtype": "F32", "shape": [2, -3], "data_offsets": [0, 24]}, "shape"),
        ({"dtype": "F32", "shape": [2, 3], "data_offsets": [0]}, "data_offsets"),
    ],
)
def test_bad_entries_are_refused(tmp_path: Path, entry: dict, message: str) -> None:
    path = _write(tmp_path / "m.safetensors", {"a": entry}, bytes(32))
    with pytest.raises(SafetensorsError, match=message) as info:
        open_safetensors(path)
    assert isinstance(info.value, ModelIntegrityError) and isinstance(info.value, ValueError)
    assert str(path) in str(info.value)


def test_overlap_is_refused(tmp_path: Path) -> None:
    header = {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
    }
    with pytest.raises(SafetensorsError, match="overlap"):
        open_safetensors(_write(tmp_path / "m.safetensors", header, bytes(12)))


def test_header_limits(tmp_path: Path) -> None:
    path = tmp_path / "big.safetensors"
    path.write_bytes(struct.pack("<Q", MAX_HEADER_BYTES + 1) + b"{}")
    with pytest.raises(SafetensorsError, match="limit"):
        open_safetensors(path)
    path.write_bytes(struct.pack("<Q", 100) + b"{}")
    with pytest.raises(SafetensorsError, match="past the end"):
        open_safetensors(path)
    path.write_bytes(b"\x01\x02")
    with pytest.raises(SafetensorsError, match="too short"):
        open_safetensors(path)
    raw = b"[1, 2]"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(SafetensorsError, match="object"):
        open_safetensors(path)
    raw = b"{not json"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(SafetensorsError, match="JSON"):
        open_safetensors(path)


def test_sharded_checkpoint_via_index(tmp_path: Path) -> None:
    _write(tmp_path / "s1.safetensors", {"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, bytes(4))
    _write(tmp_path / "s2.safetensors", {"y": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}, bytes(8))
    index = {"metadata": {}, "weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with open_checkpoint(tmp_path) as ckpt:
        assert sorted(ckpt) == ["x", "y"]
        assert ckpt["y"].dtype == np.int64
    index["weight_map"] = {"x": "s2.safetensors", "y": "s1.safetensors"}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(SafetensorsError, match="not where the index says"):
        open_checkpoint(tmp_path)
    index["weight_map"] = {"x": "../s1.safetensors"}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(SafetensorsError, match="plain"):
        open_checkpoint(tmp_path)


def test_missing_weights(tmp_path: Path) -> None:
    with pytest.raises(SafetensorsError, match="no model.safetensors"):
        open_checkpoint(tmp_path)


def test_generated_checkpoint_round_trip(tmp_path: Path, shared_data: Path) -> None:
    from onespeech_tools import checkpoints
    model_config, tensor_array, tensor_specs = checkpoints.model_config, checkpoints.tensor_array, checkpoints.tensor_specs
    out = checkpoints.make_checkpoint(tmp_path, "tiny", seed=3, data_dir=shared_data)
    specs = tensor_specs(model_config("tiny", "asr", shared_data))
    with open_checkpoint(out) as ckpt:
        assert len(ckpt) == len(specs)
        for spec in specs[:: max(1, len(specs) // 12)]:
            np.testing.assert_array_equal(ckpt[spec.name], tensor_array(spec, 3))
