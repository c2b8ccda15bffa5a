"""Hostile and stale model files: changed sources, the wrong kind, damaged caches, bad paths.

Tiny checkpoints (a few MB) and the real 2 MB Silero ONNX file; every case runs in
seconds.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from onespeech.align import Qwen3ForcedAligner
from onespeech.features import SileroVad, VadModelError
from onespeech.kernels.errors import ModelIntegrityError, ModelKindError
from onespeech.kernels.resolve import install_record_name
from onespeech.qwen3 import Qwen3Recognizer
from onespeech.qwen3.runtime import load_model
from onespeech_tools.checkpoints import make_checkpoint


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ONESPEECH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ONESPEECH_VAD_MODEL", raising=False)
    return tmp_path / "home"


@pytest.fixture(scope="module")
def checkpoints(
    tiny_asr_dir: Path, tiny_aligner_dir: Path, shared_data: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    asr1 = make_checkpoint(tmp_path_factory.mktemp("hostile-asr1"), "tiny", seed=1, kind="asr", data_dir=shared_data)
    return {"asr0": tiny_asr_dir, "asr1": asr1, "aligner": tiny_aligner_dir}


def copy_of(source: Path, dest: Path) -> Path:
    """The publisher files of ``source`` (never runtime files another test converted there)."""
    dest.mkdir()
    for item in source.iterdir():
        if item.is_file() and not item.name.startswith(("manifest", "fp32-", "bf16-", "install", ".")):
            shutil.copyfile(item, dest / item.name)
    return dest


def test_changed_publisher_files_are_converted_again(home, checkpoints, tmp_path: Path) -> None:
    """A new fine-tune copied over a directory converted in place once kept the old runtime files."""
    model = copy_of(checkpoints["asr0"], tmp_path / "model")
    name = "thinker.model.embed_tokens.weight"
    with load_model(model, "fp32") as first:
        old = np.array(first[name])
    shutil.copyfile(checkpoints["asr1"] / "model.safetensors", model / "model.safetensors")
    reference_dir = copy_of(checkpoints["asr1"], tmp_path / "reference")
    with load_model(model, "fp32") as second, load_model(reference_dir, "fp32") as reference:
        assert not np.array_equal(np.array(second[name]), old)
        assert np.array_equal(np.array(second[name]), np.array(reference[name]))


def test_changed_sources_drop_the_other_precisions_install(home, checkpoints, tmp_path: Path) -> None:
    model = copy_of(checkpoints["asr0"], tmp_path / "model")
    load_model(model, "fp32").close()
    load_model(model, "bf16").close()
    shutil.copyfile(checkpoints["asr1"] / "model.safetensors", model / "model.safetensors")
    load_model(model, "fp32").close()
    assert not (model / install_record_name("bf16")).exists()  # derived from the old weights
    reference_dir = copy_of(checkpoints["asr1"], tmp_path / "reference")
    with load_model(model, "bf16") as bf16, load_model(reference_dir, "bf16") as reference:
        name = "thinker.model.embed_tokens.weight"
        assert np.array_equal(np.array(bf16[name]), np.array(reference[name]))


def test_recognizer_refuses_a_forced_aligner_checkpoint(home, checkpoints, tmp_path: Path) -> None:
    aligner = copy_of(checkpoints["aligner"], tmp_path / "aligner")
    with pytest.raises(ModelKindError, match="forced aligner"):
        Qwen3Recognizer.load(aligner)
    assert not list(aligner.glob("install.*.json"))  # refused before converting anything


def test_aligner_refuses_an_asr_checkpoint(home, checkpoints, tmp_path: Path) -> None:
    asr = copy_of(checkpoints["asr0"], tmp_path / "asr")
    with pytest.raises(ModelKindError, match="qwen3_forced_aligner"):
        Qwen3ForcedAligner.load(asr)


@pytest.mark.parametrize("spelling", ["./no/such/model", "/no/such/model", "~/no-such-model-dir", "a/b/c"])
def test_mistyped_local_path_says_it_does_not_exist(home, spelling: str) -> None:
    for load in (Qwen3Recognizer.load, Qwen3ForcedAligner.load):
        with pytest.raises(FileNotFoundError, match="does not exist") as exc:
            load(spelling)
        assert "not in the catalog" not in str(exc.value)


def test_damaged_cached_vad_conversion_is_named(home, shared_data: Path, tmp_path: Path) -> None:
    """The cached Silero conversion was trusted unchecked (a flipped byte changed probabilities by 0.8)."""
    onnx = shutil.copy(shared_data / "models" / "silero_vad.onnx", tmp_path / "silero_vad.onnx")
    SileroVad.load(onnx)
    (cached,) = (home / "vad").rglob("*.tensors")
    data = bytearray(cached.read_bytes())
    data[-100] ^= 0x01
    cached.write_bytes(bytes(data))
    with pytest.raises(ModelIntegrityError, match=cached.name) as exc:
        SileroVad.load(onnx)
    assert exc.value.path == str(cached)  # the cache file, never the user's ONNX file


@pytest.mark.parametrize("content", [b"\x08\x07garbage", b"not a model at all", b""])
def test_bad_vad_file_never_asks_to_delete_the_users_file(home, tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "my_vad.onnx"
    bad.write_bytes(content)
    with pytest.raises(VadModelError) as exc:
        SileroVad.load(bad)
    assert "remove" not in str(exc.value) and "delete" not in str(exc.value)
    assert bad.read_bytes() == content
