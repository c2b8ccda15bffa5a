"""The store's public API: resolve_model with a revision, list_models, verify and remove.

A tiny publisher repository (two files) is served from 127.0.0.1 under a catalog entry
of its own; the converter is a stand-in that copies the weights, so the real fetch,
verify, install, lock and stamp code runs without any model package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onespeech.kernels.errors import (
    ConversionInProgressError,
    ModelIntegrityError,
    ModelKindError,
    ModelNotInstalledError,
    ModelRevisionError,
    UnknownModelError,
)
from onespeech.kernels.modelstore import list_models, local_conversions, remove, verify
from onespeech.kernels.resolve import pinned_entry, resolve, resolve_model
from onespeech.kernels.store import stamp_path

MODEL, REV, NEWER = "Test/store-tiny", "a" * 40, "b" * 40
LOCAL, SOURCES = "store-test", ("config.json", "weights.bin")


def copy_converter(publisher: Path, staging: Path, precision: str, revision: str | None) -> None:
    """Stand-in conversion: the weights as one runtime file per precision."""
    shutil.copyfile(publisher / "weights.bin", staging / f"weights.{precision}")


@pytest.fixture(scope="module", autouse=True)
def local_kind() -> None:
    """A kind of its own for local directories of these two files (a directory is converted
    by its kind's registered converter, and read for its kind's source files)."""
    from onespeech.kernels.registry import register_kind

    register_kind(LOCAL, copy_converter, sources=lambda d: sorted(n for n in SOURCES if (d / n).is_file()),
                  describe_sources=" and ".join(SOURCES))  # fmt: skip


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(bytes(range(256)) * 64)
    (folder / "config.json").write_text('{"model_type": "tiny"}\n')
    return folder


@pytest.fixture()
def store(repo: Path, tmp_path: Path, hub_server: Any, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The catalog directory pinning ``repo`` at REV, served; an empty OneSpeech and HF cache."""
    from onespeech_tools.catalogs import write_entry

    catalog = tmp_path / "catalog"
    write_entry(catalog, repo, MODEL, REV, kind="vad")
    hub_server.add_repo(MODEL, REV, repo)
    monkeypatch.setenv("ONESPEECH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", hub_server.endpoint)
    for var in ("ONESPEECH_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    return catalog


def install(catalog: Path, revision: str | None = None) -> Path:
    return resolve(MODEL, kind="vad", revision=revision, catalog_dir=catalog, converter=copy_converter,
                   progress=False)  # fmt: skip


# -- resolve with a revision -----------------------------------------------------------
@pytest.mark.parametrize("revision", [None, REV, REV[:7]])
def test_resolve_model_accepts_the_pinned_revision(store: Path, revision: str | None) -> None:
    found = resolve_model(MODEL, kind="vad", revision=revision, catalog_dir=store, converter=copy_converter,
                          progress=False)  # fmt: skip
    assert (found.name, found.kind, found.revision) == (MODEL, "vad", REV)
    assert found.entry is not None and found.entry.id == MODEL
    assert (found.directory / "weights.fp32").is_file() and found.directory.parent.name == REV


@pytest.mark.parametrize("revision", [NEWER, REV[:6], "main"])
def test_resolve_refuses_a_revision_the_catalog_does_not_pin(store: Path, revision: str) -> None:
    with pytest.raises(ModelRevisionError, match=f"pins revision {REV}") as info:
        install(store, revision)
    assert repr(revision) in str(info.value)
    assert isinstance(info.value, UnknownModelError)  # callers catching unknown models catch it too
    assert not (store.parent / "home" / "models").exists()  # refused before anything was fetched


def test_resolve_refuses_a_revision_with_a_local_directory(repo: Path, store: Path) -> None:
    with pytest.raises(ModelRevisionError, match="has no revision"):
        resolve_model(repo, kind=LOCAL, revision=REV)


def test_resolve_model_of_a_local_directory_has_no_revision(repo: Path, store: Path) -> None:
    found = resolve_model(str(repo), kind=LOCAL)
    assert (found.name, found.directory, found.revision, found.entry) == (str(repo), repo, None, None)


def test_resolve_model_still_checks_the_kind(store: Path) -> None:
    with pytest.raises(ModelKindError, match="this needs kind 'asr'"):
        resolve_model(MODEL, kind="asr", revision=REV, catalog_dir=store)


# -- a newer converter -----------------------------------------------------------------
@pytest.mark.parametrize("where", ["catalog", "in place"])
def test_files_of_another_converter_version_are_converted_again(
    repo: Path, store: Path, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onespeech.kernels import registry
    from onespeech.kernels.registry import register_kind
    from onespeech.kernels.store import read_manifest

    kind, calls = ("vad" if where == "catalog" else "store-versioned"), []
    if where == "catalog":  # catalogs name the known kinds: this one's registration comes back afterwards
        monkeypatch.setitem(registry._KINDS, kind, registry.model_kind(kind))

    def converter(version: str):  # type: ignore[no-untyped-def]
        def convert(publisher: Path, staging: Path, precision: str, revision: str | None) -> None:
            calls.append(version)
            (staging / f"weights.{precision}").write_bytes(version.encode() + (publisher / "weights.bin").read_bytes())
        return convert

    def load(version: str) -> Path:
        register_kind(kind, converter(version), sources=lambda d: sorted(n for n in SOURCES if (d / n).is_file()),
                      describe_sources=" and ".join(SOURCES), converter_version=f"layout {version}")  # fmt: skip
        if where == "in place":
            return resolve(str(repo), kind=kind)
        return resolve(MODEL, kind=kind, catalog_dir=store, progress=False)

    first = load("1")
    assert load("1") == first and calls == ["1"]  # the same version: verified, not converted again
    if where == "catalog":  # the list says which installs the next resolve converts again
        (state,) = list_models(catalog_dir=store)
        assert [(r.precision, r.current) for r in state.runtimes] == [("fp32", True)]
        register_kind(kind, converter("2"), sources=lambda d: [], describe_sources="-", converter_version="layout 2")
        (state,) = list_models(catalog_dir=store)
        assert [(r.precision, r.current) for r in state.runtimes] == [("fp32", False)]
    again = load("2")
    assert again == first and calls == ["1", "2"]
    if where == "catalog":
        (state,) = list_models(catalog_dir=store)
        assert [(r.precision, r.current) for r in state.runtimes] == [("fp32", True)]
    assert (again / "weights.fp32").read_bytes().startswith(b"2")
    assert read_manifest(again, name="install.fp32.json").metadata["converter"] == "layout 2"
    assert load("2") == again and calls == ["1", "2"]


# -- list ------------------------------------------------------------------------------
def test_list_models_reports_both_caches(store: Path) -> None:
    (state,) = list_models(catalog_dir=store)
    assert not state.cached and state.runtimes == () and state.hf_files == 0
    install(store)
    (state,) = list_models(catalog_dir=store)
    assert state.cached and (state.publisher_files, state.required_files) == (2, 2)
    assert [(r.precision, r.hf_files) for r in state.runtimes] == [("fp32", 0)]
    assert state.other_revisions == () and local_conversions() == []


# -- verify ----------------------------------------------------------------------------
def test_verify_hashes_every_cached_file(store: Path) -> None:
    runtime = install(store)
    report = verify(MODEL, catalog_dir=store)
    assert (report.model, report.revision, report.directory) == (MODEL, REV, runtime.parent)
    assert (report.publisher, report.hf_cache, report.runtime, report.files) == (2, 0, 1, 3)
    assert verify(MODEL, revision=REV[:8], catalog_dir=store).files == 3


def test_verify_finds_damage_a_stamp_would_hide(store: Path) -> None:
    runtime = install(store)
    target = runtime / "weights.fp32"
    st = target.stat()
    with open(target, "r+b") as f:  # same size, same inode, same mtime: only hashing sees it
        f.write(b"\xff")
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(ModelIntegrityError, match="weights.fp32") as info:
        verify(MODEL, catalog_dir=store)
    assert Path(info.value.path) == target


def test_verify_a_model_that_is_not_installed(store: Path) -> None:
    with pytest.raises(ModelNotInstalledError, match=f"onespeech models fetch {MODEL}") as info:
        verify(MODEL, catalog_dir=store)
    assert f"revision {REV} is not in the cache" in str(info.value)


def test_verify_refuses_another_revision(store: Path) -> None:
    install(store)
    with pytest.raises(ModelRevisionError, match=f"pins revision {REV}"):
        verify(MODEL, revision=NEWER, catalog_dir=store)


def test_verify_an_unknown_model_lists_the_catalog(store: Path) -> None:
    with pytest.raises(UnknownModelError, match=f"known models: {MODEL}"):
        verify("Nobody/Unknown", catalog_dir=store)


def test_verify_a_local_directory(repo: Path, store: Path) -> None:
    with pytest.raises(ModelNotInstalledError, match="holds no runtime files"):
        verify(repo)
    resolve(repo, kind=LOCAL)  # converted in place
    before = sorted(p.name for p in repo.iterdir())
    report = verify(repo)
    assert (report.directory, report.revision, report.runtime) == (repo, None, 1)
    assert sorted(p.name for p in repo.iterdir()) == before  # no lock file left in the user's folder


# -- remove ----------------------------------------------------------------------------
def test_remove_deletes_the_revision_and_its_stamps(store: Path) -> None:
    runtime = install(store)
    directory = runtime.parent
    assert stamp_path(directory / "publisher").is_file()
    assert remove(MODEL, catalog_dir=store) == directory
    assert not directory.exists() and not directory.parent.exists()  # no empty model folder left
    assert not stamp_path(directory / "publisher").exists() and not stamp_path(runtime).exists()
    (state,) = list_models(catalog_dir=store)
    assert not state.cached
    with pytest.raises(ModelNotInstalledError, match="is not in the cache"):
        remove(MODEL, catalog_dir=store)


def test_remove_a_revision_an_older_catalog_pinned(store: Path, repo: Path, tmp_path: Path) -> None:
    from onespeech_tools.catalogs import write_entry

    old = install(store).parent
    newer = tmp_path / "newer-catalog"
    write_entry(newer, repo, MODEL, NEWER, kind="vad")
    (state,) = list_models(catalog_dir=newer)
    assert not state.cached and state.other_revisions == (REV,)
    with pytest.raises(ModelNotInstalledError, match=f"other revisions: {REV}"):
        verify(MODEL, catalog_dir=newer)
    with pytest.raises(ModelRevisionError, match=f"is not one of the cached revisions \\({REV}\\)"):
        remove(MODEL, revision="c" * 40, catalog_dir=newer)
    assert remove(MODEL, revision=REV[:10], catalog_dir=newer) == old
    assert not old.exists()
    with pytest.raises(ModelRevisionError, match="cached revisions \\(none\\)"):
        remove(MODEL, revision=REV, catalog_dir=newer)


def test_remove_never_touches_a_users_directory(repo: Path, store: Path) -> None:
    resolve(repo, kind=LOCAL)
    before = sorted(p.name for p in repo.iterdir())
    with pytest.raises(ModelNotInstalledError, match="nothing of yours is ever removed"):
        remove(repo)
    assert sorted(p.name for p in repo.iterdir()) == before


def test_remove_a_read_only_directorys_conversion(repo: Path, store: Path, tmp_path: Path) -> None:
    repo.chmod(0o555)
    try:
        runtime = resolve(repo, kind=LOCAL)
        assert runtime != repo and [c.runtime for c in local_conversions()] == [runtime]
        assert verify(repo).runtime == 1
        assert remove(repo) == runtime.parent
        assert not runtime.exists() and local_conversions() == []
        assert repo.is_dir() and (repo / "weights.bin").is_file()
    finally:
        repo.chmod(0o755)



HOLDER = textwrap.dedent(
    """
    import sys
    from onespeech.kernels.lock import DirectoryLock
    with DirectoryLock(sys.argv[1]):
        print("locked", flush=True)
        sys.stdin.read()  # hold until the parent closes our stdin
    """
)


def test_verify_and_remove_refuse_while_the_model_is_locked(store: Path) -> None:
    """Another process converting the model (holding its lock): both refuse, nothing is deleted."""
    directory = install(store).parent
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(directory)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        for call in (verify, remove):
            with pytest.raises(ConversionInProgressError, match="retry after the other process completes"):
                call(MODEL, catalog_dir=store)
        assert (directory / "runtime" / "weights.fp32").is_file()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
    assert remove(MODEL, catalog_dir=store) == directory


@pytest.mark.parametrize("spelling", ["./nowhere", "~/nowhere", "a/b/c"])
def test_a_missing_path_is_not_looked_up_in_the_catalog(store: Path, spelling: str) -> None:
    for call in (verify, remove):
        with pytest.raises(FileNotFoundError, match="does not exist"):
            call(spelling, catalog_dir=store)


@given(revision=st.text(max_size=50) | st.integers(min_value=0, max_value=40).map(lambda n: REV[:n]))
def test_only_the_pinned_revision_or_a_long_prefix_of_it_is_accepted(revision: str) -> None:
    from onespeech.kernels.catalog import entry_from_data

    entry = entry_from_data({
        "schema": "onespeech-catalog/1", "id": MODEL, "kind": "vad", "license": "MIT", "provenance": "test",
        "source": {"type": "huggingface", "repo": MODEL, "revision": REV,
                   "files": {"w.bin": {"size": 1, "sha256": "0" * 64, "required": True}}},
        "runtime": {"fp32": {"status": "not-converted", "reason": "test", "files": None}},
    })  # fmt: skip
    if len(revision) >= 7 and REV.startswith(revision):
        assert pinned_entry(entry, revision) is entry
    else:
        with pytest.raises(ModelRevisionError, match=f"pins revision {REV}"):
            pinned_entry(entry, revision)
