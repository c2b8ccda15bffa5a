"""The default VAD model: env override, an installed silero-vad checked against its pin."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from onespeech.kernels.errors import ModelIntegrityError
from onespeech.qwen3.vad_model import VAD_MODEL_ENV, VadModelNotFoundError, default_vad_path


def _install_fake_dist(site: Path, onnx_bytes: bytes) -> Path:
    """Lay out an installed silero-vad 6.2.3 (dist-info + package data) under ``site``."""
    info = site / "silero_vad-6.2.3.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: silero-vad\nVersion: 6.2.3\n")
    model = site / "silero_vad" / "data" / "silero_vad.onnx"
    model.parent.mkdir(parents=True)
    model.write_bytes(onnx_bytes)
    (info / "RECORD").write_text("silero_vad/data/silero_vad.onnx,,\n")
    return model


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VAD_MODEL_ENV, raising=False)


def test_env_names_the_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "my_vad.onnx"
    model.write_bytes(b"x")
    monkeypatch.setenv(VAD_MODEL_ENV, str(model))
    assert default_vad_path() == model


def test_env_naming_no_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAD_MODEL_ENV, str(tmp_path / "absent.onnx"))
    with pytest.raises(VadModelNotFoundError, match="is not a file"):
        default_vad_path()


def test_installed_pinned_wheel_is_found(shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _install_fake_dist(tmp_path, (shared_data / "models" / "silero_vad.onnx").read_bytes())
    monkeypatch.syspath_prepend(str(tmp_path))
    assert default_vad_path() == model


def test_installed_file_not_matching_pin_is_named(shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytearray((shared_data / "models" / "silero_vad.onnx").read_bytes())
    data[1000] ^= 0xFF
    model = _install_fake_dist(tmp_path, bytes(data))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModelIntegrityError, match=str(model)):
        default_vad_path()


def test_missing_model_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    try:
        importlib.metadata.distribution("silero-vad")
    except importlib.metadata.PackageNotFoundError:
        pass
    else:
        pytest.skip("silero-vad is installed in this environment, so it cannot be missing")
    with pytest.raises(VadModelNotFoundError, match=r"pip install --no-deps silero-vad==6\.2\.3"):
        default_vad_path()


def test_recognizer_uses_the_default_vad(shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from onespeech.qwen3.recognizer import _default_vad

    shutil.copy(shared_data / "models" / "silero_vad.onnx", tmp_path / "silero_vad.onnx")
    monkeypatch.setenv(VAD_MODEL_ENV, str(tmp_path / "silero_vad.onnx"))
    monkeypatch.setenv("ONESPEECH_HOME", str(tmp_path / "home"))
    vad = _default_vad()
    assert vad.speech_probabilities(np.zeros(1024, dtype=np.float32)).shape == (2,)
