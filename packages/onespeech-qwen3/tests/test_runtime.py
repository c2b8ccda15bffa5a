"""Runtime loading: in-place conversion, verification, integrity errors, the conversion lock."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from onespeech.kernels.errors import ConversionInProgressError, ModelIntegrityError
from onespeech.qwen3 import convert as convert_module
from onespeech.qwen3.runtime import ensure_runtime, has_runtime, load_model, load_runtime
from onespeech.qwen3.safetensors import open_checkpoint
from onespeech_tools import checkpoints


@pytest.fixture(scope="module")
def pristine(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkpoints.make_checkpoint(tmp_path_factory.mktemp("pub"), "tiny", seed=7, data_dir=shared_data)


@pytest.fixture(scope="module")
def converted(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("conv") / "model"
    shutil.copytree(pristine, directory)
    ensure_runtime(directory, "fp32")
    return directory


@pytest.fixture()
def model_dir(pristine: Path, tmp_path: Path) -> Path:
    directory = tmp_path / "model"
    shutil.copytree(pristine, directory)
    return directory


@pytest.fixture()
def converted_copy(converted: Path, tmp_path: Path) -> Path:
    directory = tmp_path / "model"
    shutil.copytree(converted, directory)
    return directory


def test_load_converts_in_place_and_maps_publisher_names(converted: Path) -> None:
    assert has_runtime(converted, "fp32") and not has_runtime(converted, "bf16")
    assert not list(converted.glob(".staging-*")) and not (converted / ".lock").exists()
    with load_model(converted, "fp32") as model, open_checkpoint(converted) as ckpt:
        assert model.config.text.num_layers == 5 and model.precision == "fp32"
        assert set(model) == set(ckpt)
        name = "thinker.audio_tower.layers.1.fc2.weight"
        array = model[name]
        assert array.dtype == np.float32 and not array.flags.writeable
        np.testing.assert_array_equal(array.view(np.uint32), ckpt[name].astype(np.uint32) << 16)
        np.testing.assert_array_equal(model["thinker.lm_head.weight"], model["thinker.model.embed_tokens.weight"])


def test_second_ensure_is_a_no_op(converted_copy: Path) -> None:
    ensure_runtime(converted_copy, "fp32")  # the copy has new inodes: its digests are checked once
    before = {p.name: p.stat().st_mtime_ns for p in converted_copy.iterdir()}
    ensure_runtime(converted_copy, "fp32")
    assert {p.name: p.stat().st_mtime_ns for p in converted_copy.iterdir()} == before


def test_bf16_installs_beside_fp32(converted_copy: Path) -> None:
    with load_model(converted_copy, "bf16") as model:
        assert model["thinker.model.norm.weight"].dtype == np.uint16
    with load_runtime(converted_copy, "fp32") as model:
        assert model["thinker.model.norm.weight"].dtype == np.float32


def test_runtime_only_directory_loads_without_publisher_weights(converted_copy: Path) -> None:
    (converted_copy / "model.safetensors").unlink()
    with load_model(converted_copy, "fp32") as model:
        assert len(model) == 119


def _flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))
    time.sleep(0.01)
    os.utime(path)  # a new mtime even on coarse-clock filesystems


def test_corrupt_file_is_named(converted_copy: Path) -> None:
    load_runtime(converted_copy, "fp32").close()  # digests checked once, stamp written
    target = converted_copy / "fp32-decoder-01.ost"
    _flip_byte(target, target.stat().st_size - 100)
    with pytest.raises(ModelIntegrityError) as info:
        load_runtime(converted_copy, "fp32")
    assert info.value.path == str(target)
    assert "remove" in str(info.value)


def test_truncated_file_is_named(converted_copy: Path) -> None:
    target = converted_copy / "fp32-embed.ost"
    with open(target, "r+b") as handle:
        handle.truncate(target.stat().st_size - 64)
    with pytest.raises(ModelIntegrityError, match="fp32-embed.ost"):
        load_runtime(converted_copy, "fp32")


def test_removed_runtime_file_after_integrity_error_reconverts(model_dir: Path) -> None:
    ensure_runtime(model_dir, "fp32")
    (model_dir / "manifest.fp32.json").unlink()
    (model_dir / "fp32-head.ost").unlink()
    with load_model(model_dir, "fp32") as model:
        assert model["thinker.lm_head.weight"].shape == (151936, 64)


def test_missing_everything(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="neither fp32 runtime files"):
        ensure_runtime(tmp_path, "fp32")
    with pytest.raises(FileNotFoundError, match="manifest.fp32.json"):
        load_runtime(tmp_path, "fp32")


def test_failed_conversion_leaves_nothing_installed(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = convert_module.write_tensor_file

    def failing(path, tensors, metadata=None):
        calls.append(path)
        if len(calls) == 3:
            raise OSError("disk full (simulated)")
        real(path, tensors, metadata)

    monkeypatch.setattr(convert_module, "write_tensor_file", failing)
    before = sorted(p.name for p in model_dir.iterdir())
    with pytest.raises(OSError, match="disk full"):
        ensure_runtime(model_dir, "fp32")
    assert sorted(p.name for p in model_dir.iterdir()) == before
    assert not has_runtime(model_dir, "fp32")


_HOLD_LOCK = """
import sys, time
from onespeech.kernels.lock import DirectoryLock
with DirectoryLock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(60)
"""


def test_second_process_gets_conversion_in_progress(model_dir: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(model_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConversionInProgressError, match="retry after the other process completes"):
            ensure_runtime(model_dir, "fp32")
    finally:
        holder.kill()
        holder.wait()
    assert not has_runtime(model_dir, "fp32")
    ensure_runtime(model_dir, "fp32")  # the dead holder's lock does not wedge the directory
    assert has_runtime(model_dir, "fp32")
