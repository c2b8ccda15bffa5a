"""Models given by path are the user's files: loading them writes nothing into their folder.

The verification stamps (which files were hashed, by stat) live in the model cache, and
a folder made read-only is converted into the cache, not in place. The tests run as
root, where permission bits stop no write, so each one compares a snapshot of the whole
folder (names, sizes, mtimes, contents) before and after loading twice.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from onespeech.features.vad import SileroVad
from onespeech.kernels.store import stamp_path
from onespeech.qwen3.runtime import load_model


def snapshot(folder: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every entry under ``folder``: mode, size, mtime_ns and (files) SHA-256."""
    state = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        state[path.relative_to(folder).as_posix()] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return state


def set_writable(folder: Path, writable: bool) -> None:
    for path in [folder, *folder.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode | stat.S_IWUSR if writable else mode & ~0o222)


@pytest.fixture()
def model_folder(checkpoints, runtime_dirs, vad_path: Path, tmp_path: Path, monkeypatch) -> Iterator[Path]:
    """A read-only folder holding publisher files, runtime files and a Silero ONNX file."""
    monkeypatch.setenv("ONESPEECH_HOME", str(tmp_path / "home"))
    folder = tmp_path / "models"
    shutil.copytree(checkpoints.asr, folder / "asr-publisher")
    shutil.copytree(runtime_dirs.asr, folder / "asr-converted")
    (folder / "vad").mkdir()
    shutil.copy2(vad_path, folder / "vad" / "silero_vad.onnx")
    set_writable(folder, False)
    try:
        yield folder
    finally:
        set_writable(folder, True)


def test_read_only_folder_of_models_is_never_written(model_folder: Path, tmp_path: Path) -> None:
    before = snapshot(model_folder)
    for _ in range(2):  # the second load trusts the stamps the first one left in the cache
        SileroVad.load(model_folder / "vad" / "silero_vad.onnx")
        load_model(model_folder / "asr-publisher", "fp32").close()
        load_model(model_folder / "asr-converted", "fp32").close()
    assert snapshot(model_folder) == before
    assert (tmp_path / "home" / "local").is_dir()  # the read-only publisher folder was converted there
    for folder in ("asr-converted", "asr-publisher"):
        assert stamp_path(model_folder / folder).is_file()  # its verification is remembered in the cache
        assert stamp_path(model_folder / folder).is_relative_to(tmp_path / "home")


def test_writable_folder_gets_no_stamp_file(runtime_dirs, tmp_path: Path, monkeypatch) -> None:
    """A converted folder the user may write to is verified without a file of ours beside its files."""
    monkeypatch.setenv("ONESPEECH_HOME", str(tmp_path / "home"))
    folder = tmp_path / "asr"
    shutil.copytree(runtime_dirs.asr, folder)
    before = snapshot(folder)
    load_model(folder, "fp32").close()
    assert snapshot(folder) == before
    assert not any(p.name == ".verified.json" for p in folder.rglob("*"))
    # a changed file is noticed: its stat no longer matches the stamp kept in the cache
    tensors = sorted(folder.glob("fp32-*.ost"))[0]
    os.utime(tensors, ns=(tensors.stat().st_atime_ns, tensors.stat().st_mtime_ns + 1_000_000))
    load_model(folder, "fp32").close()  # re-hashed, still matches
