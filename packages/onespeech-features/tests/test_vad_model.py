"""The default VAD model: fetched from its pinned wheel on first use, converted, verified.

A wheel holding the real ``silero_vad.onnx`` is served from 127.0.0.1 under a test
catalog entry (``ONESPEECH_CATALOG_DIR``); the runtime pin is the shipped entry's,
so the conversion must reproduce the shipped runtime file byte for byte.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from onespeech.features import SileroVad, VadModelNotFoundError, load_vad
from onespeech.features.vad_model import VAD_MODEL_ENV, default_vad_path
from onespeech.kernels.catalog import CATALOG_ENV, get_entry
from onespeech.kernels.errors import ModelIntegrityError, OfflineModeError
from onespeech_tools.catalogs import build_silero_wheel, wheel_entry, write_catalog_file


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (VAD_MODEL_ENV, "ONESPEECH_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ONESPEECH_HOME", str(tmp_path / "home"))


@pytest.fixture()
def served_wheel(shared_data: Path, tmp_path: Path, hub_server_cls, monkeypatch: pytest.MonkeyPatch):
    onnx = shared_data / "models" / "silero_vad.onnx"
    wheel = build_silero_wheel(onnx, tmp_path / "wheels")
    server = hub_server_cls().start()
    url = server.add_file(f"packages/ab/cd/{wheel.name}", wheel)
    shipped = get_entry("silero-vad").runtime["fp32"].files
    runtime = {name: {"size": pin.size, "sha256": pin.sha256} for name, pin in shipped.items()}
    write_catalog_file(tmp_path / "catalog", wheel_entry(wheel, url, onnx, runtime))
    monkeypatch.setenv(CATALOG_ENV, str(tmp_path / "catalog"))
    yield server, wheel
    server.stop()


def test_env_names_the_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "my_vad.onnx"
    model.write_bytes(b"x")
    monkeypatch.setenv(VAD_MODEL_ENV, str(model))
    assert default_vad_path() == model


def test_env_naming_no_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAD_MODEL_ENV, str(tmp_path / "absent.onnx"))
    with pytest.raises(VadModelNotFoundError, match="is not a file"):
        default_vad_path()


def test_first_use_fetches_the_wheel_then_never_again(served_wheel, tmp_path: Path) -> None:
    server, wheel = served_wheel
    path = default_vad_path()
    assert path.name == "silero_vad-1a153a22f4509e29.tensors"  # the shipped runtime pin, reproduced
    assert [r.path.rsplit("/", 1)[-1] for r in server.requests] == [wheel.name]
    assert not list((tmp_path / "home").rglob("*.whl"))  # only the member is kept
    vad = SileroVad.load(path)
    assert vad.speech_probabilities(np.zeros(1024, dtype=np.float32)).shape == (2,)
    assert default_vad_path(offline=True) == path and len(server.requests) == 1


def test_offline_and_not_cached_names_the_file(served_wheel) -> None:
    with pytest.raises(OfflineModeError, match="silero_vad.onnx"):
        default_vad_path(offline=True)


def test_corrupt_wheel_is_discarded_and_never_converted(served_wheel, tmp_path: Path) -> None:
    server, wheel = served_wheel
    server.misbehave(wheel.name, corrupt=True)
    with pytest.raises(ModelIntegrityError, match="discarded"):
        default_vad_path()
    assert not list((tmp_path / "home").rglob("*.tensors"))
    server.behaviour.clear()
    assert default_vad_path().is_file()  # the retry downloads afresh


def test_damaged_cached_conversion_is_named(served_wheel) -> None:
    """A corrupted cache once changed speech probabilities silently; now it is verified at load."""
    path = default_vad_path()
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ModelIntegrityError, match=path.name):
        default_vad_path()


def test_load_vad_takes_a_loaded_vad_a_path_or_nothing(shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    onnx = shared_data / "models" / "silero_vad.onnx"
    from_path = load_vad(onnx)
    assert load_vad(from_path) is from_path
    assert load_vad(str(onnx)).source == from_path.source  # the conversion is cached by SHA-256
    monkeypatch.setenv(VAD_MODEL_ENV, str(onnx))
    default = load_vad()
    block = np.random.default_rng(0).uniform(-0.5, 0.5, 4096).astype(np.float32)
    np.testing.assert_array_equal(default.speech_probabilities(block), from_path.speech_probabilities(block))


def test_load_vad_refuses_a_missing_path(tmp_path: Path) -> None:
    with pytest.raises(VadModelNotFoundError, match="does not exist"):
        load_vad(tmp_path / "absent.onnx")
