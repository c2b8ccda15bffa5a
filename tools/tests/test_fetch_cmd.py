"""qwen-fetch against a real HTTP server on 127.0.0.1 serving a tiny publisher-layout repo."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import onespeech.kernels.resolve  # noqa: F401  (plain import: a broken module fails, it is not skipped)
from onespeech_tools.cli import main

REPO, REV = "Test/Qwen3-ASR-tiny", "2" * 40



def write_catalog(catalog_dir: Path, repo_dir: Path) -> None:
    from onespeech.kernels.store import sha256_file

    files = {}
    for path in sorted(repo_dir.iterdir()):
        d = sha256_file(path)
        files[path.name] = {"size": d.size, "sha256": d.sha256, "required": path.name != "README.md"}
    unrep = {"status": "unreproducible", "reason": "test entry", "files": None}
    data = {
        "schema": "onespeech-catalog/1", "id": REPO, "kind": "asr", "license": "Apache-2.0",
        "provenance": "test", "source": {"type": "huggingface", "repo": REPO, "revision": REV, "files": files},
        "runtime": {"fp32": unrep, "bf16": unrep},
    }  # fmt: skip
    catalog_dir.mkdir(parents=True, exist_ok=True)
    (catalog_dir / "tiny.json").write_text(json.dumps(data))


@pytest.fixture(scope="module")
def tiny_repo(tmp_path_factory, shared_data) -> Path:
    from onespeech_tools.checkpoints import make_checkpoint

    out = make_checkpoint(tmp_path_factory.mktemp("repo") / "tiny", "tiny", data_dir=shared_data)
    (out / "README.md").write_text("optional file\n")
    return out


@pytest.fixture()
def hub(tiny_repo, tmp_path, monkeypatch, hub_server_cls):
    monkeypatch.setenv("ONESPEECH_HOME", str(tmp_path / "home"))
    for var in ("ONESPEECH_OFFLINE", "HF_HUB_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    write_catalog(tmp_path / "catalog", tiny_repo)
    server = hub_server_cls().start()
    server.add_repo(REPO, REV, tiny_repo)
    try:
        yield server, tmp_path / "catalog", tmp_path / "home"
    finally:
        server.stop()


def test_fetch_downloads_and_verifies(hub, tiny_repo, capsys):
    server, catalog, home = hub
    args = ["qwen-fetch", REPO, "--catalog-dir", str(catalog), "--endpoint", server.endpoint, "-q"]
    assert main(args) == 0
    publisher = home / "models" / "Test--Qwen3-ASR-tiny" / REV / "publisher"
    assert f"publisher files verified: {publisher}" in capsys.readouterr().out
    assert (publisher / "model.safetensors").read_bytes() == (tiny_repo / "model.safetensors").read_bytes()
    assert not (publisher / "README.md").exists()
    assert not (publisher.parent / "runtime").exists()  # fetch only: no conversion
    n = len(server.requests)
    assert main([*args, "--all"]) == 0  # optional files too; the rest is already there
    assert (publisher / "README.md").is_file() and len(server.requests) == n + 1


def test_fetch_offline_names_missing_files(hub, capsys):
    server, catalog, _ = hub
    assert main(["qwen-fetch", REPO, "--catalog-dir", str(catalog), "--endpoint", server.endpoint, "--offline"]) == 1
    err = capsys.readouterr().err
    assert "offline" in err and "model.safetensors" in err and server.requests == []


def test_fetch_corrupt_download_names_file(hub, capsys):
    server, catalog, home = hub
    server.misbehave("config.json", corrupt=True)
    assert main(["qwen-fetch", REPO, "--catalog-dir", str(catalog), "--endpoint", server.endpoint, "-q"]) == 1
    err = capsys.readouterr().err
    assert "SHA-256" in err and "config.json" in err and "discarded" in err
    assert not list(home.rglob("config.json.part"))


def test_fetch_404_and_unknown_model(hub, tmp_path, capsys):
    server, catalog, _ = hub
    server.add_repo(REPO, REV, tmp_path / "empty")
    assert main(["qwen-fetch", REPO, "--catalog-dir", str(catalog), "--endpoint", server.endpoint,
                 "--retries", "0", "-q"]) == 1  # fmt: skip
    assert "HTTP 404" in capsys.readouterr().err
    assert main(["qwen-fetch", "Nobody/none", "--catalog-dir", str(catalog)]) == 1
    assert "not in the catalog" in capsys.readouterr().err


def test_fetch_while_locked_says_retry(hub, capsys):
    from onespeech.kernels.lock import DirectoryLock

    server, catalog, home = hub
    with DirectoryLock(home / "models" / "Test--Qwen3-ASR-tiny" / REV):
        code = main(["qwen-fetch", REPO, "--catalog-dir", str(catalog), "--endpoint", server.endpoint])
    err = capsys.readouterr().err
    assert code == 75 and "retry after the other process completes" in err and f"pid {os.getpid()}" in err


def test_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["qwen-fetch", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--offline" in out and "--endpoint" in out and "--convert" in out


def test_fetch_and_convert(hub, capsys):
    server, catalog, home = hub
    base = ["qwen-fetch", REPO, "--catalog-dir", str(catalog), "--endpoint", server.endpoint, "-q", "--convert"]
    assert main(base) == 0
    runtime = home / "models" / "Test--Qwen3-ASR-tiny" / REV / "runtime"
    assert f"runtime files (fp32) installed: {runtime}" in capsys.readouterr().out
    assert (runtime / "manifest.fp32.json").is_file() and not (runtime / "manifest.bf16.json").exists()
    n = len(server.requests)
    assert main([*base, "--precision", "bf16"]) == 0
    assert (runtime / "manifest.bf16.json").is_file() and len(server.requests) == n
