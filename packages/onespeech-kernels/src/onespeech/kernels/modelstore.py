"""What the model cache holds, checked again or removed: the store's public operations.

``resolve`` (``onespeech.kernels.resolve``) installs models; this module answers the
questions a user asks of the cache afterwards, each taking the model directory's
lock where it reads or deletes files a conversion could be writing:

- :func:`list_models`: every catalog id with what the OneSpeech cache and the Hugging
  Face cache hold of it (and cached revisions the catalog no longer pins);
- :func:`local_conversions`: read-only local directories converted into the cache;
- :func:`verify`: hash every cached file of a model again, against the catalog's pins
  (publisher files, also those in the Hugging Face cache a conversion would read)
  and its install records (runtime files);
- :func:`remove`: delete a model revision from the cache. Nothing is ever removed from
  the Hugging Face cache or from a directory of the user's.

``onespeech models list|verify|remove`` only calls these.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onespeech.kernels import hfcache
from onespeech.kernels.catalog import CatalogEntry, load_catalog
from onespeech.kernels.errors import ModelIntegrityError, ModelNotInstalledError, ModelRevisionError
from onespeech.kernels.lock import LOCK_NAME, DirectoryLock
from onespeech.kernels.precision import Precision
from onespeech.kernels.registry import model_kind
from onespeech.kernels.resolve import (
    PUBLISHER_DIR,
    RECORD_PREFIX,
    RUNTIME_DIR,
    catalog_entry,
    converted_by,
    install_record_name,
    local_runtime_dir,
    model_dir,
    pinned_entry,
    revision_matches,
)
from onespeech.kernels.store import cache_root, forget_stamps, read_manifest, verify_files, verify_manifest

__all__ = [
    "InstalledRuntime",
    "LocalConversion",
    "ModelState",
    "VerifyReport",
    "list_models",
    "local_conversions",
    "remove",
    "verify",
]

PRECISIONS = tuple(p.value for p in Precision)


@dataclass(frozen=True)
class InstalledRuntime:
    """One installed precision of a model: ``hf_files`` of its publisher files were read
    from the Hugging Face cache (the rest from the OneSpeech cache). ``current`` is False
    when an earlier converter wrote it (another ``ModelKind.converter_version``): the next
    resolve converts it again."""

    precision: str
    hf_files: int
    current: bool = True


@dataclass(frozen=True)
class ModelState:
    """What the caches hold of one catalog entry (its pinned revision).

    Attributes
    ----------
    entry : CatalogEntry
    directory : Path
        The pinned revision's directory in the OneSpeech cache (it may not exist).
    publisher_files, required_files : int
        Required publisher files present in the OneSpeech cache, and how many there are.
    runtimes : tuple of InstalledRuntime
        The precisions installed (each with an install record).
    hf_files : int
        Required files of the pinned revision the Hugging Face cache holds (not
        verified here: the next resolve or :func:`verify` hashes them).
    hf_snapshot : Path or None
        Where in the Hugging Face cache (None when it holds none).
    other_revisions : tuple of str
        Revisions cached beside the pinned one (pinned by an older catalog);
        :func:`remove` with ``revision=`` deletes them.
    """

    entry: CatalogEntry
    directory: Path
    publisher_files: int
    required_files: int
    runtimes: tuple[InstalledRuntime, ...]
    hf_files: int
    hf_snapshot: Path | None
    other_revisions: tuple[str, ...]

    @property
    def cached(self) -> bool:
        """True if the OneSpeech cache holds anything of the pinned revision."""
        return self.directory.is_dir()


@dataclass(frozen=True)
class LocalConversion:
    """A read-only local model directory (``source``) converted into the cache (``runtime``)."""

    source: Path
    runtime: Path


@dataclass(frozen=True)
class VerifyReport:
    """Files :func:`verify` hashed, all of which matched.

    ``publisher``: publisher files in the OneSpeech cache; ``hf_cache``: publisher
    files in the Hugging Face cache; ``runtime``: runtime files of every installed
    precision.
    """

    model: str
    revision: str | None
    directory: Path
    publisher: int
    hf_cache: int
    runtime: int

    @property
    def files(self) -> int:
        return self.publisher + self.hf_cache + self.runtime


# -- list ------------------------------------------------------------------------------
def list_models(
    *, catalog_dir: str | os.PathLike[str] | None = None, cache_dir: str | os.PathLike[str] | None = None
) -> list[ModelState]:
    """The state of every catalog entry, in catalog order. Reads only (no lock, no hashing):
    install records are written whole (renamed into place), so a reader never sees half of one."""
    return [_state(entry, cache_dir) for entry in load_catalog(catalog_dir).values()]


def _state(entry: CatalogEntry, cache_dir: str | os.PathLike[str] | None) -> ModelState:
    directory = model_dir(entry, cache_dir)
    required = [f for f in entry.files if f.required]
    present = sum(1 for f in required if (directory / PUBLISHER_DIR / f.name).is_file())
    try:
        version = model_kind(entry.kind).converter_version
    except LookupError:  # no installed package converts this kind: nothing to compare with
        version = ""
    runtimes = []
    for precision in PRECISIONS:
        meta = _record_metadata(directory / RUNTIME_DIR, install_record_name(precision))
        if meta is not None:
            found = meta.get("found_in")
            found = found if isinstance(found, dict) else {}
            current = not meta or converted_by(meta, version)  # a damaged record: see verify
            runtimes.append(InstalledRuntime(precision, sum(1 for where in found.values() if where == "huggingface"),
                                             current))  # fmt: skip
    hf_files, snapshot = 0, None
    if entry.source_type == "huggingface":
        pins = {f.name: f.pin for f in required if f.pin is not None}
        hf_files = len(hfcache.locate(entry.repo or "", entry.revision or "", pins))
        snapshot = hfcache.snapshot_dir(entry.repo or "", entry.revision or "") if hf_files else None
    others = tuple(r for r in _cached_revisions(entry, cache_dir) if r != entry.revision)
    return ModelState(entry, directory, present, len(required), tuple(runtimes), hf_files, snapshot, others)


def _record_metadata(runtime: Path, record: str) -> dict[str, Any] | None:
    """The metadata of an installed precision's record (``found_in``: where each publisher
    file came from; ``converter``), or None when it is not installed. A damaged record still
    counts as installed here, with nothing known: :func:`verify` names it."""
    if not (runtime / record).is_file():
        return None
    try:
        return dict(read_manifest(runtime, name=record).metadata)
    except (OSError, ModelIntegrityError):
        return {}


def _cached_revisions(entry: CatalogEntry, cache_dir: str | os.PathLike[str] | None) -> list[str]:
    parent = model_dir(entry, cache_dir).parent
    return sorted(p.name for p in parent.iterdir() if p.is_dir()) if parent.is_dir() else []


def local_conversions(cache_dir: str | os.PathLike[str] | None = None) -> list[LocalConversion]:
    """Every read-only local directory converted into ``<cache>/local/``, by source path."""
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    out = []
    for runtime in sorted((root / "local").glob(f"*/{RUNTIME_DIR}")):
        for record in sorted(runtime.glob(f"{RECORD_PREFIX}*.json")):
            try:
                source = read_manifest(runtime, name=record.name).metadata.get("source_dir")
            except (OSError, ModelIntegrityError):
                continue
            if isinstance(source, str):
                out.append(LocalConversion(Path(source), runtime))
                break
    return out


# -- verify ----------------------------------------------------------------------------
def verify(
    model: str | os.PathLike[str],
    *,
    revision: str | None = None,
    catalog_dir: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> VerifyReport:
    """Hash every cached file of ``model`` again (never trusting a stamp), under its lock.

    ``model`` is a catalog id or a local model directory. For a catalog id: the
    publisher files in the OneSpeech cache and the pinned revision's files in the
    Hugging Face cache against the catalog's pins, and the runtime files of every
    installed precision against their install records. For a directory: the runtime
    files of every install record in it, or in its conversion in the cache when it was
    read-only.

    Raises
    ------
    UnknownModelError
        Neither a catalog id nor an existing directory.
    FileNotFoundError
        A name spelled like a path that does not exist.
    ModelRevisionError
        ``revision`` is not the catalog's pinned revision (only pinned files can be checked).
    ModelNotInstalledError
        Nothing of the model is cached.
    ModelIntegrityError
        The first file that does not match, naming it (remove it; the next resolve
        fetches or converts it again).
    ConversionInProgressError
        Another process is fetching or converting the model; retry after it completes.
    """
    if Path(model).expanduser().is_dir():
        if revision is not None:
            raise ModelRevisionError(f"revision {revision!r} was given with the local directory {model!r}, "
                                     "which has no revision")  # fmt: skip
        return _verify_directory(Path(model).expanduser(), cache_dir)
    entry = pinned_entry(catalog_entry(os.fspath(model), catalog_dir), revision)
    directory = model_dir(entry, cache_dir)
    hf = _verify_hf_cache(entry, directory)
    if not directory.is_dir():
        if hf:
            return VerifyReport(entry.id, entry.revision, directory, 0, hf, 0)
        raise _not_installed(entry, cache_dir)
    with DirectoryLock(directory):  # a conversion could be replacing the files being hashed
        publisher = directory / PUBLISHER_DIR
        pins = {f.name: f.pin for f in entry.files if f.pin is not None and (publisher / f.name).is_file()}
        verify_files(publisher, pins, digests="always", what="publisher file")
        runtime = _verify_records(directory / RUNTIME_DIR)
    if not (pins or hf or runtime):
        raise _not_installed(entry, cache_dir)
    return VerifyReport(entry.id, entry.revision, directory, len(pins), hf, runtime)


def _verify_hf_cache(entry: CatalogEntry, directory: Path) -> int:
    """Hash the files of the pinned revision a conversion would take from the Hugging Face
    cache (those our cache lacks); nothing is written there, stamps go to our store."""
    if entry.source_type != "huggingface":
        return 0
    publisher = directory / PUBLISHER_DIR
    rest = {f.name: f.pin for f in entry.files if f.required and f.pin is not None
            and not (publisher / f.name).is_file()}  # fmt: skip
    found = hfcache.locate(entry.repo or "", entry.revision or "", rest)
    verify_files(hfcache.repo_cache_dir(entry.repo or ""), {n: rest[n] for n in found}, paths=found,
                 digests="always", what="Hugging Face cache file")  # fmt: skip
    return len(found)


def _verify_records(runtime: Path) -> int:
    """Hash the files of every install record in ``runtime``; the number of files."""
    count = 0
    for precision in PRECISIONS:
        record = install_record_name(precision)
        if (runtime / record).is_file():
            count += len(verify_manifest(runtime, name=record, digests="always").files)
    return count


def _verify_directory(directory: Path, cache_dir: str | os.PathLike[str] | None) -> VerifyReport:
    if any((directory / install_record_name(p)).is_file() for p in PRECISIONS):
        # the user's directory: no lock file is written there just to read it
        return VerifyReport(str(directory), None, directory, 0, 0, _verify_records(directory))
    runtime = local_runtime_dir(directory, cache_dir)
    if any((runtime / install_record_name(p)).is_file() for p in PRECISIONS):
        with DirectoryLock(runtime):
            return VerifyReport(str(directory), None, runtime, 0, 0, _verify_records(runtime))
    raise ModelNotInstalledError(
        f"{directory} holds no runtime files ({' or '.join(install_record_name(p) for p in PRECISIONS)}) "
        "and was not converted into the cache; loading it converts it"
    )


def _not_installed(entry: CatalogEntry, cache_dir: str | os.PathLike[str] | None) -> ModelNotInstalledError:
    others = [r for r in _cached_revisions(entry, cache_dir) if r != entry.revision]
    also = f" (the cache holds other revisions: {', '.join(others)})" if others else ""
    return ModelNotInstalledError(
        f"{entry.id} revision {entry.revision} is not in the cache{also}; `onespeech models fetch {entry.id}` "
        "installs it (or the first use of the model does)"
    )


# -- remove ----------------------------------------------------------------------------
def remove(
    model: str | os.PathLike[str],
    *,
    revision: str | None = None,
    catalog_dir: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Delete a model revision from the OneSpeech cache, under its lock; return the
    directory removed.

    ``model`` is a catalog id (``revision``: the pinned one by default, or any revision
    the cache holds, e.g. one an older catalog pinned; a prefix of at least 7
    characters will do), or a read-only local directory whose conversion in the cache
    is removed (the directory itself is never touched). The Hugging Face cache is
    never touched either. The stamps of the removed files are dropped.

    Raises
    ------
    UnknownModelError
        Neither a catalog id nor an existing directory.
    FileNotFoundError
        A name spelled like a path that does not exist.
    ModelRevisionError
        ``revision`` matches no cached revision (the message lists those cached).
    ModelNotInstalledError
        Nothing of the model (or of the directory) is cached.
    ConversionInProgressError
        Another process is fetching or converting the model; retry after it completes.
    """
    if Path(model).expanduser().is_dir():
        runtime = local_runtime_dir(Path(model).expanduser(), cache_dir)
        if not runtime.is_dir():
            raise ModelNotInstalledError(f"{model} has no conversion in the cache (a directory converted in place "
                                         "keeps its runtime files; nothing of yours is ever removed)")  # fmt: skip
        _delete(runtime.parent, [runtime])
        return runtime.parent
    entry = catalog_entry(os.fspath(model), catalog_dir)
    directory = model_dir(entry, cache_dir)
    if revision is not None:
        cached = _cached_revisions(entry, cache_dir)
        matches = [r for r in cached if revision_matches(revision, r)]
        if len(matches) != 1:
            what = "matches several" if matches else "is not one"
            raise ModelRevisionError(f"{entry.id} revision {revision!r} {what} of the cached revisions "
                                     f"({', '.join(cached) or 'none'})")  # fmt: skip
        directory = directory.parent / matches[0]
    elif not directory.is_dir():
        raise _not_installed(entry, cache_dir)
    _delete(directory, [directory / PUBLISHER_DIR, directory / RUNTIME_DIR])
    try:
        directory.parent.rmdir()  # the model's last revision: no empty folder left behind
    except OSError:  # other revisions remain (or another process just created one)
        pass
    return directory


def _delete(directory: Path, stamped: list[Path]) -> None:
    with DirectoryLock(directory):  # never delete under a running fetch or conversion
        for sub in stamped:
            forget_stamps(sub)
        for child in directory.iterdir():
            if child.name != LOCK_NAME:
                shutil.rmtree(child) if child.is_dir() else child.unlink()
    shutil.rmtree(directory, ignore_errors=True)
