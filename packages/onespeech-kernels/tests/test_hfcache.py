"""hfcache.py: where the Hugging Face cache is and which of its files may be read."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from onespeech.kernels.hfcache import hub_cache_dir, locate, repo_cache_dir, snapshot_dir
from onespeech.kernels.store import FileDigest

REPO, COMMIT = "Org/model", "a" * 40


def pin(data: bytes) -> FileDigest:
    return FileDigest(len(data), hashlib.sha256(data).hexdigest())


def hf_repo(root: Path, files: dict[str, bytes]) -> Path:
    """A repository as huggingface_hub lays it out: refs/main, snapshot links into blobs/ named by
    SHA-256 for LFS files, by git blob SHA-1 for the others."""
    repo = repo_cache_dir(REPO, root)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    (repo / "blobs").mkdir()
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    for name, data in files.items():
        etag = hashlib.sha256(data).hexdigest() if name.endswith(".safetensors") else \
            hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # fmt: skip
        blob = repo / "blobs" / etag
        blob.write_bytes(data)
        (snapshot / name).symlink_to(Path("..", "..", "blobs", blob.name))
    return repo


def test_hub_cache_dir_follows_huggingface_hub(monkeypatch, tmp_path):
    for var in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    assert hub_cache_dir() == Path.home() / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub_cache_dir() == tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert hub_cache_dir() == tmp_path / "hub"


def test_locate_by_snapshot_by_branch_and_by_blob(tmp_path):
    repo = hf_repo(tmp_path, {"config.json": b"{}", "w.safetensors": b"weights"})
    pins = {"config.json": pin(b"{}"), "w.safetensors": pin(b"weights"), "absent.txt": pin(b"no")}
    found = locate(REPO, COMMIT, pins, tmp_path)
    assert sorted(found) == ["config.json", "w.safetensors"]
    assert all(path.is_relative_to(repo / "blobs") for path in found.values())
    assert snapshot_dir(REPO, "main", tmp_path) == repo / "snapshots" / COMMIT
    # another revision's snapshot lacks the file, but its blob is named by the pinned SHA-256
    assert sorted(locate(REPO, "b" * 40, pins, tmp_path)) == ["w.safetensors"]
    assert locate("Org/other", COMMIT, pins, tmp_path) == {}


@pytest.mark.parametrize("target", ["outside", "dangling", "loop"])
def test_links_leaving_the_repository_folder_are_not_followed(tmp_path, target):
    repo = hf_repo(tmp_path, {})
    link = repo / "snapshots" / COMMIT / "config.json"
    if target == "outside":
        secret = tmp_path / "secret.json"
        secret.write_text("{}")
        link.symlink_to(secret)
    elif target == "dangling":
        link.symlink_to(repo / "blobs" / "missing")
    else:
        link.symlink_to(link)
    assert locate(REPO, COMMIT, {"config.json": pin(b"{}")}, tmp_path) == {}
