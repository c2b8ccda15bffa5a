"""A model the user already has in the Hugging Face cache is converted from there, not downloaded.

The cache is built by ``huggingface_hub`` itself (``hf_hub_download`` against the local
Hub on 127.0.0.1), so it is laid out exactly as the official toolkit leaves it:
``models--Org--Name/{refs/main, snapshots/<commit>/<file> -> ../../blobs/<etag>}``.
Every test checks the Hugging Face cache is left byte for byte as it was.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path

import pytest

from onespeech.kernels.catalog import CATALOG_ENV
from onespeech.kernels.errors import DownloadError, HFCacheMismatchWarning, OfflineModeError
from onespeech.kernels.fetch import FetchOptions
from onespeech.kernels.resolve import install_record_name, resolve
from onespeech.kernels.store import read_manifest
from onespeech.speech.cli import main
from onespeech_tools.catalogs import hub_entry, write_catalog_file
from onespeech_tools.checkpoints import make_checkpoint

ASR, COMMIT = "Demo/Qwen3-ASR-hf-cache", "c" * 40
WEIGHTS = "model.safetensors"
FAST = FetchOptions(retries=0, backoff_s=0.0, progress=False)
TOKEN = "hf_test_token_that_must_never_be_printed"


def tree_state(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: kind, mode, mtime_ns, link target or SHA-256 (links not followed)."""
    state: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            st = path.lstat()
            if path.is_symlink():
                what = ("link", os.readlink(path))
            elif path.is_file():
                what = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
            else:
                what = ("dir", "")
            state[path.relative_to(root).as_posix()] = (*what, st.st_mode, st.st_mtime_ns)
    return state


@pytest.fixture(scope="module")
def repo_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("hf-repo") / "asr", "tiny", seed=0, data_dir=shared_data)


@pytest.fixture()
def hub(repo_dir: Path, tmp_path: Path, hub_server_cls, monkeypatch: pytest.MonkeyPatch):
    """The checkpoint on a local Hub (as ``main`` = COMMIT), its catalog entry, empty caches."""
    server = hub_server_cls().start()
    server.add_repo(ASR, COMMIT, repo_dir)
    server.add_repo(ASR, "main", repo_dir, commit=COMMIT)
    catalog = tmp_path / "catalog"
    write_catalog_file(catalog, hub_entry(ASR, COMMIT, repo_dir, "asr"))
    monkeypatch.setenv(CATALOG_ENV, str(catalog))
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.setenv("ONESPEECH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    for var in ("ONESPEECH_OFFLINE", "HF_HUB_OFFLINE", "HF_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    yield server
    server.stop()


def fill_hf_cache(server, repo_dir: Path, hf: Path, skip: tuple[str, ...] = ()) -> None:
    """What ``from_pretrained`` leaves: every file of ``main`` fetched by huggingface_hub itself."""
    huggingface_hub = pytest.importorskip("huggingface_hub", reason="needs huggingface_hub to lay out the cache (tox.ini py env)")
    for path in sorted(repo_dir.iterdir()):
        if path.name not in skip:
            huggingface_hub.hf_hub_download(ASR, path.name, revision="main", cache_dir=hf, endpoint=server.endpoint)
    assert (hf / "models--Demo--Qwen3-ASR-hf-cache" / "refs" / "main").read_text() == COMMIT
    assert (hf / "models--Demo--Qwen3-ASR-hf-cache" / "snapshots" / COMMIT / WEIGHTS).is_symlink()
    server.requests.clear()


def gets(server) -> list[str]:
    return sorted(r.path.rsplit("/", 1)[-1] for r in server.requests if r.method == "GET")


def test_a_model_in_the_hf_cache_is_converted_from_it_without_any_download(
    hub, repo_dir: Path, tmp_path: Path, capsys
) -> None:
    hf = tmp_path / "hf"
    fill_hf_cache(hub, repo_dir, hf)
    before = tree_state(hf)
    runtime = resolve(ASR, kind="asr", fetch_options=FAST)
    assert gets(hub) == [] and hub.requests == []
    record = read_manifest(runtime, name=install_record_name("fp32"))
    assert set(record.metadata["found_in"].values()) == {"huggingface"}
    assert not (runtime.parent / "publisher" / WEIGHTS).exists()  # read where it is, not copied
    assert tree_state(hf) == before
    # the same runtime files as from a download into an empty cache
    fresh = resolve(ASR, kind="asr", cache_dir=tmp_path / "other-home", fetch_options=FAST)
    assert read_manifest(fresh, name=install_record_name("fp32")).files == record.files
    # bf16 never downloads, and needs nothing it does not find in the Hugging Face cache
    hub.requests.clear()
    resolve(ASR, "bf16", kind="asr")
    assert hub.requests == [] and tree_state(hf) == before
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert f"Hugging Face cache: {len(list(repo_dir.iterdir()))}/{len(list(repo_dir.iterdir()))} files in " \
        f"{hf / 'models--Demo--Qwen3-ASR-hf-cache' / 'snapshots' / COMMIT}" in out
    assert "fp32 runtime installed (from" in out


def test_a_file_missing_from_the_hf_cache_is_the_only_one_downloaded(hub, repo_dir: Path, tmp_path: Path) -> None:
    hf = tmp_path / "hf"
    fill_hf_cache(hub, repo_dir, hf, skip=("config.json",))
    before = tree_state(hf)
    runtime = resolve(ASR, kind="asr", fetch_options=FAST)
    assert gets(hub) == ["config.json"]
    found = read_manifest(runtime, name=install_record_name("fp32")).metadata["found_in"]
    assert found["config.json"] == "onespeech" and found[WEIGHTS] == "huggingface"
    assert tree_state(hf) == before


def test_a_wrong_file_in_the_hf_cache_is_refused_named_and_downloaded(hub, repo_dir: Path, tmp_path: Path) -> None:
    """A blob that does not match the pin is never read for conversion and never repaired (it is
    not ours): the warning names it, the file comes from the Hub; offline, the error names it."""
    hf = tmp_path / "hf"
    fill_hf_cache(hub, repo_dir, hf)
    blob = (hf / "models--Demo--Qwen3-ASR-hf-cache" / "snapshots" / COMMIT / WEIGHTS).resolve()
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))  # the same size, other bytes
    before = tree_state(hf)
    with pytest.warns(HFCacheMismatchWarning), pytest.raises(
        OfflineModeError, match=rf"(?s){WEIGHTS}.*refused from the Hugging Face cache: {WEIGHTS}: {blob}.*SHA-256"
    ):
        resolve(ASR, kind="asr", offline=True, fetch_options=FAST)
    with pytest.warns(HFCacheMismatchWarning, match=rf"{blob} \(file {WEIGHTS} of {ASR}@{COMMIT}"):
        runtime = resolve(ASR, kind="asr", fetch_options=FAST)
    assert gets(hub) == [WEIGHTS]
    assert read_manifest(runtime, name=install_record_name("fp32")).metadata["found_in"][WEIGHTS] == "onespeech"
    assert tree_state(hf) == before


def test_hf_token_is_sent_to_the_hub_and_never_shown(hub, repo_dir: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub.misbehave("config.json", status=403)  # a gated repository refusing this token
    with warnings.catch_warnings(record=True) as caught, pytest.raises(DownloadError) as error:
        resolve(ASR, kind="asr", fetch_options=FAST)
    requests = [r for r in hub.requests if r.method == "GET"]
    assert requests and all(r.headers.get("Authorization") == f"Bearer {TOKEN}" for r in requests)
    shown = [str(error.value), repr(error.value), *(str(w.message) for w in caught), *capsys.readouterr()]
    assert "403" in str(error.value) and not any(TOKEN in text for text in shown)
    # without the variable no Authorization header is sent at all
    monkeypatch.delenv("HF_TOKEN")
    hub.behaviour.clear()
    hub.requests.clear()
    resolve(ASR, kind="asr", fetch_options=FAST)
    assert hub.requests and all("Authorization" not in r.headers for r in hub.requests)
