"""probe: cache contents, verification state and missing pins, on a fresh and a filled cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from onespeech_tools.cli import main

REPO, REV = "Test/Qwen3-ASR-tiny", "3" * 40



@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for var in ("ONESPEECH_OFFLINE", "HF_HUB_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)


def probe(capsys, *args: str) -> str:
    assert main(["probe", *args]) == 0
    return capsys.readouterr().out


def test_fresh_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ONESPEECH_HOME", str(tmp_path / "fresh"))
    out = probe(capsys)
    assert f"cache: {tmp_path / 'fresh'} (ONESPEECH_HOME) - empty, nothing fetched yet" in out
    for model in ("Qwen/Qwen3-ASR-0.6B", "Qwen/Qwen3-ASR-1.7B", "Qwen/Qwen3-ForcedAligner-0.6B"):
        assert f"{model} (" in out
    assert out.count("publisher: 0/8 required files present") == 2  # 0.6B and the aligner
    assert "publisher: 0/10 required files present" in out  # 1.7B: two shards + index
    assert out.count("runtime fp32: not installed") == 5 and out.count("runtime bf16: not installed") == 3
    # the runtime pins that cannot be reproduced here are reported, per model and precision
    assert out.count("runtime fp32: unreproducible") == 3 and out.count("runtime bf16: unreproducible") == 3
    assert "silero-vad (vad, MIT) silero-vad 6.2.3 (silero_vad-6.2.3-py3-none-any.whl)" in out
    assert "publisher: 0/1 required files present" in out
    assert "other cache contents:\n  none" in out
    assert not (tmp_path / "fresh").exists()  # probing wrote nothing


@pytest.fixture(scope="module")
def tiny_repo(tmp_path_factory, shared_data) -> Path:
    from onespeech_tools.checkpoints import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("repo") / "tiny", "tiny", data_dir=shared_data)


def write_catalog(catalog_dir: Path, repo_dir: Path) -> None:
    from onespeech.kernels.store import sha256_file

    files = {}
    for path in sorted(repo_dir.iterdir()):
        d = sha256_file(path)
        files[path.name] = {"size": d.size, "sha256": d.sha256, "required": True}
    files["README.md"] = {"size": None, "sha256": None, "required": False, "unknown_reason": "not published"}
    data = {
        "schema": "onespeech-catalog/1", "id": REPO, "kind": "asr", "license": "Apache-2.0", "provenance": "test",
        "source": {"type": "huggingface", "repo": REPO, "revision": REV, "files": files},
        "runtime": {"fp32": {"status": "unreproducible", "reason": "test entry", "files": None},
                    "bf16": {"status": "unreproducible", "reason": "test entry", "files": None}},
    }  # fmt: skip
    catalog_dir.mkdir(parents=True, exist_ok=True)
    (catalog_dir / "tiny.json").write_text(json.dumps(data))


def copy_converter(publisher: Path, staging: Path, precision: str, revision: str | None) -> None:
    from onespeech.kernels.store import write_manifest

    (staging / f"weights.{precision}.bin").write_bytes((publisher / "model.safetensors").read_bytes())
    write_manifest(staging, [f"weights.{precision}.bin"], name=f"manifest.{precision}.json")


def test_after_fetch_from_local_server(tiny_repo, tmp_path, monkeypatch, capsys, hub_server_cls):
    from onespeech.kernels.catalog import get_entry
    from onespeech.kernels.fetch import FetchOptions
    from onespeech.kernels.resolve import resolve

    home, catalog = tmp_path / "home", tmp_path / "catalog"
    monkeypatch.setenv("ONESPEECH_HOME", str(home))
    write_catalog(catalog, tiny_repo)
    server = hub_server_cls().start()
    server.add_repo(REPO, REV, tiny_repo)
    try:
        assert main(["qwen-fetch", REPO, "--catalog-dir", str(catalog), "--endpoint", server.endpoint, "-q"]) == 0
        capsys.readouterr()
        out = probe(capsys, "--catalog-dir", str(catalog))
        assert "publisher: 8/8 required files present" in out and "8 verified, 0 not yet verified, 0 bad" in out
        assert "runtime fp32: not installed" in out and "lock: free" in out
        assert "pins missing/unreproducible: 3" in out and "README.md: not published" in out
        # convert FP32 (stand-in converter), then probe again
        entry = get_entry(REPO, catalog)
        resolve(entry, fetch_options=FetchOptions(endpoint=server.endpoint, progress=False), converter=copy_converter)
    finally:
        server.stop()
    out = probe(capsys, "--catalog-dir", str(catalog))
    assert "runtime fp32: installed, 2 files" in out and "digests recorded at conversion; verified" in out
    assert "runtime bf16: not installed" in out
    # a file damaged on disk: same size -> "not yet verified" until --verify hashes it and calls it BAD
    runtime = home / "models" / "Test--Qwen3-ASR-tiny" / REV / "runtime"
    data = bytearray((runtime / "weights.fp32.bin").read_bytes())
    data[0] ^= 1
    (runtime / "weights.fp32.bin").write_bytes(bytes(data))
    out = probe(capsys, "--catalog-dir", str(catalog))
    assert "NOT fully verified (1 verified, 1 unverified, 0 missing, 0 bad)" in out
    out = probe(capsys, "--catalog-dir", str(catalog), "--verify")
    assert "BAD: weights.fp32.bin (runtime file has SHA-256" in out
    # the shipped catalog does not know this model: listed under other contents
    out = probe(capsys)
    assert f"Test/Qwen3-ASR-tiny @ {REV} (not in the catalog)" in out


def test_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["probe", "--help"])
    assert exc.value.code == 0
    assert "--verify" in capsys.readouterr().out


def test_vad_fetched_into_the_cache(tmp_path, monkeypatch, capsys, shared_data, hub_server_cls):
    from onespeech.features.vad_model import default_vad_path
    from onespeech.kernels.catalog import CATALOG_ENV, get_entry
    from onespeech_tools.catalogs import build_silero_wheel, wheel_entry, write_catalog_file

    monkeypatch.setenv("ONESPEECH_HOME", str(tmp_path / "home"))
    onnx = shared_data / "models" / "silero_vad.onnx"
    wheel = build_silero_wheel(onnx, tmp_path / "wheels")
    pins = get_entry("silero-vad").runtime["fp32"].files
    runtime = {n: {"size": p.size, "sha256": p.sha256} for n, p in pins.items()}
    server = hub_server_cls().start()
    try:
        write_catalog_file(tmp_path / "cat", wheel_entry(wheel, server.add_file(wheel.name, wheel), onnx, runtime))
        monkeypatch.setenv(CATALOG_ENV, str(tmp_path / "cat"))
        path = default_vad_path()
    finally:
        server.stop()
    out = probe(capsys)
    assert "publisher: 1/1 required files present" in out
    assert "runtime fp32: installed, 1 files" in out and "matches catalog pins; verified" in out
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(bytes(data))
    assert f"BAD: {path.name} (runtime file has SHA-256" in probe(capsys, "--verify")
