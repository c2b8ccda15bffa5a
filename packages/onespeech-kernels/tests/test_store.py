"""store.py: cache root, names, digests, manifests, verification stamps, staging, install."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from onespeech.kernels.errors import ModelIntegrityError
from onespeech.kernels.store import (
    MANIFEST_NAME,
    FileDigest,
    UnsafeFileNameError,
    cache_root,
    check_relative_name,
    install,
    is_verified,
    model_cache_dir,
    new_staging_dir,
    read_manifest,
    remove_stale_staging,
    safe_join,
    sha256_file,
    stamp_path,
    verify_files,
    verify_manifest,
    write_manifest,
)


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch, tmp_path_factory):
    """Stamps go to the cache: give every test one of its own (tests that look at the root set theirs)."""
    monkeypatch.setenv("ONESPEECH_HOME", str(tmp_path_factory.mktemp("home")))


def test_cache_root_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("ONESPEECH_HOME", str(tmp_path / "x"))
    assert cache_root() == tmp_path / "x"


def test_cache_root_default_is_per_user(monkeypatch, tmp_path):
    monkeypatch.delenv("ONESPEECH_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    if sys.platform.startswith("linux"):
        assert cache_root() == tmp_path / "onespeech"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert str(cache_root()).startswith(str(Path.home()))


def test_model_cache_dir_layout(tmp_path):
    d = model_cache_dir("Qwen/Qwen3-ASR-0.6B", "5eb1441", tmp_path)
    assert d == tmp_path / "models" / "Qwen--Qwen3-ASR-0.6B" / "5eb1441"


@pytest.mark.parametrize("repo", ["Qwen", "a/b/c", "../x", "a/..", "a/ b", ""])
def test_model_cache_dir_refuses_bad_repo(tmp_path, repo):
    with pytest.raises(ValueError, match="owner/name"):
        model_cache_dir(repo, "abc", tmp_path)


@pytest.mark.parametrize("name", ["a.json", "onnx/model.onnx", "a..b", ".gitattributes"])
def test_safe_names_accepted(name):
    assert check_relative_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "/abs", "../up", "a/../../b", "a/./b", "a//b", "a\\b", "C:x", "~/x", "a\nb", "a/", None]
)
def test_unsafe_names_refused(name):
    with pytest.raises(UnsafeFileNameError, match="allowed"):
        check_relative_name(name)


def test_sha256_file(tmp_path):
    data = os.urandom(3 << 20)
    (tmp_path / "f").write_bytes(data)
    assert sha256_file(tmp_path / "f") == FileDigest(len(data), hashlib.sha256(data).hexdigest())


def test_file_digest_validates():
    with pytest.raises(ValueError, match="64 lowercase hex"):
        FileDigest(1, "ABC")
    with pytest.raises(ValueError, match="non-negative"):
        FileDigest(-1, "0" * 64)


def make_dir(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        path = safe_join(root, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def test_manifest_roundtrip_and_verify(tmp_path):
    make_dir(tmp_path, {"a.bin": b"a" * 10, "sub/b.bin": b"b" * 20})
    written = write_manifest(tmp_path, ["a.bin", "sub/b.bin"], metadata={"revision": "r1"})
    data = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert data["format"] == "onespeech-manifest" and data["version"] == 1 and data["revision"] == "r1"
    assert data["files"]["sub/b.bin"] == {"size": 20, "sha256": hashlib.sha256(b"b" * 20).hexdigest()}
    assert read_manifest(tmp_path) == written
    assert verify_manifest(tmp_path).metadata == {"revision": "r1"}


def test_verify_manifest_names_corrupt_file(tmp_path):
    make_dir(tmp_path, {"a.bin": b"a" * 10})
    write_manifest(tmp_path, ["a.bin"])
    (tmp_path / "a.bin").write_bytes(b"A" * 10)
    with pytest.raises(ModelIntegrityError, match="SHA-256") as exc:
        verify_manifest(tmp_path)
    assert exc.value.path == str(tmp_path / "a.bin")
    assert f"remove {tmp_path / 'a.bin'}" in str(exc.value)


def test_verify_manifest_size_mismatch_and_missing(tmp_path):
    make_dir(tmp_path, {"a.bin": b"a" * 10, "b.bin": b"b"})
    write_manifest(tmp_path, ["a.bin", "b.bin"])
    (tmp_path / "a.bin").write_bytes(b"a" * 9)
    with pytest.raises(ModelIntegrityError, match="9 bytes, expected 10"):
        verify_manifest(tmp_path, digests="never")
    (tmp_path / "a.bin").write_bytes(b"a" * 10)
    os.remove(tmp_path / "b.bin")
    with pytest.raises(ModelIntegrityError, match="missing"):
        verify_manifest(tmp_path)


def test_malformed_manifest_is_integrity_error(tmp_path):
    (tmp_path / MANIFEST_NAME).write_text('{"format": "other"}')
    with pytest.raises(ModelIntegrityError, match="not a valid onespeech-manifest"):
        read_manifest(tmp_path)
    (tmp_path / MANIFEST_NAME).write_text(
        json.dumps({"format": "onespeech-manifest", "version": 1, "files": {"../x": {"size": 1, "sha256": "0" * 64}}})
    )
    with pytest.raises(ModelIntegrityError):
        read_manifest(tmp_path)


def test_missing_manifest_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_manifest(tmp_path)


def test_digest_checked_once_per_file_state(tmp_path):
    make_dir(tmp_path, {"a.bin": b"x" * 100})
    pins = {"a.bin": sha256_file(tmp_path / "a.bin")}
    verify_files(tmp_path, pins)  # hashes and records a stamp
    st = os.stat(tmp_path / "a.bin")
    # same size, same mtime: an in-place bit flip that the stat cannot see
    with open(tmp_path / "a.bin", "r+b") as f:
        f.write(b"y")
    os.utime(tmp_path / "a.bin", ns=(st.st_atime_ns, st.st_mtime_ns))
    verify_files(tmp_path, pins)  # "once": trusted by the stamp
    with pytest.raises(ModelIntegrityError):
        verify_files(tmp_path, pins, digests="always")
    # any rewrite (new mtime) is re-hashed even in "once" mode
    (tmp_path / "a.bin").write_bytes(b"z" * 100)
    with pytest.raises(ModelIntegrityError):
        verify_files(tmp_path, pins)


def test_install_into_new_target_renames_staging(tmp_path):
    staging = new_staging_dir(tmp_path)
    make_dir(staging, {"w.bin": b"1" * 8})
    write_manifest(staging, ["w.bin"])
    verify_manifest(staging)
    install(staging, tmp_path / "runtime", [MANIFEST_NAME])
    assert not staging.exists()
    verify_manifest(tmp_path / "runtime")


def test_install_next_to_existing_files_keeps_them(tmp_path):
    target = make_dir(tmp_path / "runtime", {"fp32.bin": b"f" * 4})
    write_manifest(target, ["fp32.bin"], name="manifest.fp32.json")
    staging = new_staging_dir(tmp_path)
    make_dir(staging, {"bf16.bin": b"b" * 2})
    write_manifest(staging, ["bf16.bin"], name="manifest.bf16.json")
    install(staging, target, ["manifest.bf16.json"])
    verify_manifest(target, name="manifest.fp32.json")
    verify_manifest(target, name="manifest.bf16.json")
    assert not staging.exists()


def test_failed_install_never_exposes_manifest(tmp_path):
    target = tmp_path / "runtime"
    (target / "b.bin").mkdir(parents=True)  # a directory where a file must go: os.replace fails
    staging = new_staging_dir(tmp_path)
    make_dir(staging, {"a.bin": b"a", "b.bin": b"b"})
    write_manifest(staging, ["a.bin", "b.bin"])
    with pytest.raises(OSError):
        install(staging, target, [MANIFEST_NAME])
    assert not (target / MANIFEST_NAME).exists()


def test_install_requires_manifest(tmp_path):
    staging = new_staging_dir(tmp_path)
    with pytest.raises(FileNotFoundError, match="no manifest"):
        install(staging, tmp_path / "t", [MANIFEST_NAME])


def test_stale_staging_of_dead_process_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".staging-{dead.pid}-abc"
    stale.mkdir()
    live = tmp_path / f".staging-{os.getppid()}-abc"  # our parent is alive
    live.mkdir()
    assert remove_stale_staging(tmp_path) == [stale]
    assert live.exists() and not stale.exists()


def test_stamps_are_kept_in_the_cache_never_beside_the_files(tmp_path, monkeypatch):
    folder = tmp_path / "models"
    make_dir(folder, {"a.bin": b"x" * 100, "sub/b.bin": b"y" * 10})
    pins = {n: sha256_file(folder / n) for n in ("a.bin", "sub/b.bin")}
    before = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))
    verify_files(folder, pins)
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == before
    assert stamp_path(folder).parent == cache_root() / "stamps" and stamp_path(folder).is_file()
    assert is_verified(folder, "a.bin", pins["a.bin"])
    # the same directory through another spelling (a symlink) shares its stamps
    (tmp_path / "alias").symlink_to(folder)
    assert stamp_path(tmp_path / "alias") == stamp_path(folder)
    # a cache that cannot be written only means hashing again
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("ONESPEECH_HOME", str(blocker))
    verify_files(folder, pins)
    assert not is_verified(folder, "a.bin", pins["a.bin"])


def test_install_carries_the_stamps_to_the_target(tmp_path):
    for target in (tmp_path / "new", tmp_path / "existing"):
        if target.name == "existing":
            target.mkdir()
        staging = new_staging_dir(tmp_path)
        make_dir(staging, {"w.bin": b"w" * 64, MANIFEST_NAME: b"{}"})
        pin = sha256_file(staging / "w.bin")
        verify_files(staging, {"w.bin": pin})
        install(staging, target, [MANIFEST_NAME])
        assert is_verified(target, "w.bin", pin)
        assert not stamp_path(staging).exists()
