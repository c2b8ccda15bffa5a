"""From a model name or directory to a ready runtime directory: the one install path.

``resolve("Qwen/Qwen3-ASR-0.6B")`` returns ``<cache>/models/Qwen--Qwen3-ASR-0.6B/<revision>/runtime``
holding verified FP32 runtime files; ``resolve("silero-vad")`` does the same for the
VAD (its publisher file comes out of a pinned PyPI wheel); ``resolve(directory,
kind="asr")`` converts a local directory of publisher files in place. Every route
takes the same steps, each of which can stop with a specific error:

1. an install record (``install.<precision>.json``, a store manifest listing every
   runtime file) exists, its source files are unchanged, and every file it lists
   matches -> done, no lock, no network (digests are re-hashed only for files whose
   stat changed, see ``onespeech.kernels.store``);
2. take the directory's lock (a second process gets ``ConversionInProgressError``:
   retry after the first completes);
3. catalogued models: gather the publisher files, each verified against its pin:
   those in our cache, then (Hub models) those the Hugging Face cache already holds
   (``onespeech.kernels.hfcache``; read in place, never written, a file that does
   not match its pin is refused with a warning naming it), then download the rest
   into our cache (``onespeech.kernels.fetch``, or the pinned wheel's members,
   ``onespeech.kernels.wheel``; offline mode fails naming them). A failed download
   names the ways out (a mirror, offline mode, a local directory, the caches looked
   in). BF16 never downloads: the publisher files must already be in a cache;
4. convert into a staging directory with the converter registered for the model's
   kind (``onespeech.kernels.registry``); when some files come from the Hugging Face
   cache, the converter reads a temporary folder of links to the verified files;
5. hash every output, compare with the catalog's runtime pins when they are known
   and with the converter's own manifests, write the install record (which also
   records the source files' digests);
6. install atomically (``store.install``: data files first, manifests/record last).

A file listed by the record but missing counts as "not installed" (so removing the
file named by a ``ModelIntegrityError`` and calling again reconverts it); a present
file with the wrong size or digest raises ``ModelIntegrityError`` naming it.

Local directories (a checkout, a fine-tune) are converted in place: the runtime files
are installed beside the publisher files. The record keeps the publisher files'
digests and every later resolve compares them (by stat, re-hashing a file only when
its stat changed): when a publisher file changed (a new fine-tune copied over), the
directory is converted again. A directory that already holds runtime files without
its publisher files (``qwen-convert`` output, a copied cache) is verified as it is. A
read-only directory is converted into ``<cache>/local/<key>/runtime`` instead.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import shutil
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec

from onespeech.kernels import hfcache
from onespeech.kernels.cancel import Cancel, check_cancel, raise_if_cancelled
from onespeech.kernels.catalog import CatalogEntry, get_entry, load_catalog
from onespeech.kernels.errors import (
    DownloadError,
    HFCacheMismatchWarning,
    ModelIntegrityError,
    ModelKindError,
    ModelRevisionError,
    OfflineModeError,
    PublisherFilesMissingError,
    UnknownModelError,
)
from onespeech.kernels.fetch import FetchOptions, fetch_files, hub_endpoint, missing_files
from onespeech.kernels.jsonfile import loads_json
from onespeech.kernels.lock import DirectoryLock
from onespeech.kernels.precision import Precision
from onespeech.kernels.registry import Converter, model_kind
from onespeech.kernels.store import (
    STAMP_NAME,
    FileDigest,
    cache_root,
    check_relative_name,
    forget_stamps,
    install,
    model_cache_dir,
    new_staging_dir,
    read_manifest,
    record_verified,
    remove_stale_staging,
    safe_join,
    sha256_file,
    verify_files,
    verify_manifest,
    write_manifest,
)

P = ParamSpec("P")

__all__ = [
    "PUBLISHER_DIR",
    "RUNTIME_DIR",
    "ResolvedModel",
    "catalog_entry",
    "convert_directory",
    "converted_by",
    "fetch_publisher",
    "install_record_name",
    "is_installed",
    "local_runtime_dir",
    "model_dir",
    "pinned_entry",
    "resolve",
    "resolve_local",
    "resolve_model",
]

RECORD_PREFIX = "install."
#: Subdirectories of a model's cache entry: the publisher's files as downloaded, and the converted runtime files.
PUBLISHER_DIR, RUNTIME_DIR = "publisher", "runtime"
INDEX_NAME = "model.safetensors.index.json"
IN_PLACE = "."  # the record's "source_dir" when the sources sit beside the runtime files


def install_record_name(precision: Precision | str) -> str:
    """The install record of one precision in a runtime directory, e.g. ``install.fp32.json``."""
    return f"{RECORD_PREFIX}{Precision.parse(precision).value}.json"


def converted_by(metadata: Mapping[str, Any], converter_version: str) -> bool:
    """Whether an install record's metadata names ``converter_version`` (`ModelKind.converter_version`;
    always true when that is empty: the kind does not track versions)."""
    return not converter_version or metadata.get("converter") == converter_version


# -- entry point -------------------------------------------------------------------
@dataclass(frozen=True)
class ResolvedModel:
    """A model argument (catalog id, catalog entry or local directory) and its runtime files.

    Attributes
    ----------
    name : str
        The model as the caller named it: the catalog id, or the directory's path.
    kind : str
        ``"asr"``, ``"aligner"``, ``"vad"``, ... (the entry's kind, or the one asked for).
    directory : Path
        The directory holding verified runtime files.
    revision : str or None
        The catalog's pinned revision (a commit id or package version); None for a
        local directory, which has none.
    entry : CatalogEntry or None
        The catalog entry; None for a local directory.
    """

    name: str
    kind: str
    directory: Path
    revision: str | None
    entry: CatalogEntry | None


def resolve_model(
    model: str | os.PathLike[str] | CatalogEntry,
    precision: Precision | str = Precision.FLOAT32,
    *,
    kind: str | None = None,
    revision: str | None = None,
    offline: bool | None = None,
    progress: bool | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    catalog_dir: str | os.PathLike[str] | None = None,
    fetch_options: FetchOptions | None = None,
    converter: Converter | None = None,
    cancel: Cancel = None,
) -> ResolvedModel:
    """Resolve a model argument to verified runtime files of ``precision``: the one place a
    model name (catalog id or local directory) becomes a runtime directory.

    Parameters
    ----------
    model
        A catalog id (``"Qwen/Qwen3-ASR-0.6B"``, ``"silero-vad"``), a
        :class:`CatalogEntry` (custom catalogs, tests), or a local directory
        (publisher files or runtime files). An existing directory wins over a
        catalog id of the same spelling.
    precision
        ``"fp32"`` (default), ``"bf16"`` or ``"int8"`` (or a ``Precision`` member).
        BF16 and INT8 are converted from the cached publisher files and never download.
    kind
        The kind of model the caller needs (``"asr"``, ``"aligner"``, ``"vad"``). A
        catalog entry of another kind is refused before anything is fetched; a local
        directory is converted by this kind's converter (required for directories).
    revision
        The revision the caller expects of a catalog id (the full commit id or package
        version, or a prefix of at least 7 characters). Only the catalog's pinned
        revision can be installed: its files are checked against the catalog's
        digests, and no other revision has any. None accepts the pinned one.
    offline, progress
        Override ``ONESPEECH_OFFLINE``/``HF_HUB_OFFLINE`` and the progress-bar default.
    cache_dir
        Cache root (default ``ONESPEECH_HOME`` or the per-user cache dir).
    catalog_dir
        A directory of catalog files to use instead of the shipped ones.
    fetch_options
        Endpoint, timeouts and retries (``offline``/``progress`` above take precedence).
    converter
        Replaces the kind's registered converter (same signature as ``Converter``).
    cancel
        Checked between downloaded blocks and before converting
        (``OperationCancelledError``).

    Raises
    ------
    UnknownModelError
        A name that is neither a catalog id nor an existing path.
    ModelRevisionError
        ``revision`` is not the catalog's pinned revision (the message names it), or
        was given with a local directory.
    FileNotFoundError
        A name spelled like a path (``./x``, ``/x``, ``~/x``, ``a/b/c``) that does not exist.
    ModelKindError
        The catalog entry is not of ``kind``.
    OfflineModeError, PublisherFilesMissingError
        Files needed and not cached, naming them.
    ModelIntegrityError
        A cached, downloaded or converted file does not match; names the file to remove.
    ConversionInProgressError
        Another process is fetching/converting this model; retry after it completes.
    DownloadError
        The network failed after retries, stalled or passed its deadline.
    """
    check_cancel(cancel)
    precision = Precision.parse(precision).value
    options = fetch_options or FetchOptions()
    options = FetchOptions(**{**options.__dict__, "offline": offline if offline is not None else options.offline,
                              "progress": progress if progress is not None else options.progress})  # fmt: skip
    if isinstance(model, os.PathLike) or (isinstance(model, str) and Path(model).expanduser().is_dir()):
        if kind is None:
            raise ValueError("resolving a local directory needs kind= (e.g. 'asr', 'aligner', 'vad')")
        if revision is not None:
            raise ModelRevisionError(
                f"revision {revision!r} was given with the local directory {os.fspath(model)!r}; a directory has "
                "no revision (check out the revision you want there, or pass a catalog id)"
            )
        directory = resolve_local(Path(model).expanduser(), precision, kind=kind, cache_dir=cache_dir,
                                  converter=converter, cancel=cancel)  # fmt: skip
        return ResolvedModel(os.fspath(model), kind, directory, None, None)
    entry = model if isinstance(model, CatalogEntry) else catalog_entry(str(model), catalog_dir)
    entry = pinned_entry(entry, revision)
    if kind is not None and entry.kind != kind:
        raise ModelKindError(f"{entry.id} is a model of kind {entry.kind!r}; this needs kind {kind!r}")
    directory = _resolve_entry(entry, precision, cache_dir, options, converter, cancel)
    return ResolvedModel(entry.id, entry.kind, directory, entry.revision, entry)


MIN_REVISION_PREFIX = 7  # as git's short commit ids



def _directory_of(resolver: Callable[P, ResolvedModel]) -> Callable[P, Path]:
    """``resolver`` returning only the ``directory`` of its :class:`ResolvedModel` (same parameters)."""

    @functools.wraps(resolver)
    def directory(*args: P.args, **kwargs: P.kwargs) -> Path:
        return resolver(*args, **kwargs).directory

    return directory


# one signature, written once: resolve takes exactly resolve_model's parameters
resolve = _directory_of(resolve_model)
resolve.__name__ = resolve.__qualname__ = "resolve"
resolve.__signature__ = inspect.signature(resolve_model).replace(return_annotation="Path")  # type: ignore[attr-defined]
resolve.__doc__ = """Return a directory holding verified runtime files of ``model`` at ``precision``.

    The same as :func:`resolve_model` (same parameters, errors), returning only its ``directory``.
    """

def revision_matches(given: str, revision: str | None) -> bool:
    """True if ``given`` is ``revision`` or a prefix of it of at least 7 characters."""
    if revision is None or not isinstance(given, str):
        return False
    return given == revision or (len(given) >= MIN_REVISION_PREFIX and revision.startswith(given))


def pinned_entry(entry: CatalogEntry, revision: str | None) -> CatalogEntry:
    """``entry`` if ``revision`` is None or names the entry's pinned revision.

    Raises
    ------
    ModelRevisionError
        Naming the revision asked for and the one the catalog pins.
    """
    if revision is None or revision_matches(revision, entry.revision):
        return entry
    raise ModelRevisionError(
        f"{entry.id} has no revision {revision!r} in the catalog: it pins revision {entry.revision} (give that "
        f"id, a prefix of at least {MIN_REVISION_PREFIX} characters of it, or no revision); other revisions "
        "cannot be installed because the catalog has no digests to check their files against"
    )


def _looks_like_path(name: str) -> bool:
    """A spelling that can only be meant as a file system path, never as a catalog id."""
    return (
        os.path.isabs(name)
        or name.startswith(("./", "../", "~", ".\\", "..\\"))
        or "\\" in name
        or name.count("/") > 1
        or name in (".", "..")
    )


def catalog_entry(name: str, catalog_dir: str | os.PathLike[str] | None = None) -> CatalogEntry:
    """The catalog entry of ``name``, a name that is not an existing directory.

    Raises
    ------
    FileNotFoundError
        ``name`` is spelled like a path (``./x``, ``/x``, ``~/x``, ``a/b/c``): it does not exist.
    UnknownModelError
        No catalog id ``name`` (the message lists the known ids).
    """
    if _looks_like_path(name):
        path = Path(name).expanduser()
        what = "is not a directory" if path.exists() else "does not exist"
        raise FileNotFoundError(
            f"model path {name!r} {what}; pass an existing directory of publisher or runtime files, "
            f"or a catalog id ({', '.join(sorted(load_catalog(catalog_dir)))})"
        )
    try:
        return get_entry(name, catalog_dir)
    except UnknownModelError as e:
        if "/" not in name:
            raise
        raise UnknownModelError(f"{e}; no directory {name!r} exists either") from None


# -- catalogued models --------------------------------------------------------------
def model_dir(entry: CatalogEntry, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``<cache>/models/<owner>--<name>/<revision>`` of a Hub entry; ``pypi--<package>/<version>``
    of a wheel entry."""
    if entry.source_type == "huggingface":
        return model_cache_dir(entry.repo or "", entry.revision or "", cache_dir)
    return model_cache_dir(f"pypi/{entry.package}", entry.revision or "", cache_dir)


def _fetch(
    entry: CatalogEntry,
    pins: dict[str, FileDigest],
    publisher: Path,
    options: FetchOptions,
    cancel: Cancel,
    refused: dict[str, str] | None = None,
) -> None:
    try:
        if entry.source_type == "huggingface":
            fetch_files(entry.repo or "", entry.revision or "", pins, publisher, options=options, cancel=cancel)
        else:
            from onespeech.kernels.wheel import fetch_wheel_members

            fetch_wheel_members(entry, pins, publisher, options=options, cancel=cancel)
    except (DownloadError, OfflineModeError) as e:
        raise type(e)(f"{e}\n{ways_out(entry, publisher, options, refused or {})}") from e


# how a user names a local copy instead of the catalog id, per kind (the command line's options)
_LOCAL_MODEL = {
    "asr": "directory instead of the id: -m DIR on the command line, or the directory's path in Python",
    "aligner": "directory instead of the id: --aligner DIR on the command line, or its path in Python",
    "vad": "file: ONESPEECH_VAD_MODEL=FILE, or vad=FILE in Python",
    "speaker": "file: ONESPEECH_SPEAKER_MODEL=FILE",
}


def ways_out(entry: CatalogEntry, publisher: Path, options: FetchOptions, refused: Mapping[str, str]) -> str:
    """What a user without (working) network can do instead, and where we looked."""
    lines = [f"{entry.id} needs files that no cache holds. Ways out:"]
    if entry.source_type == "huggingface":
        try:
            endpoint = hub_endpoint(options.endpoint)
        except ValueError as e:
            endpoint = str(e)
        lines.append(f"  - a mirror of the Hub: set HF_ENDPOINT (now {endpoint})")
        snapshot = hfcache.snapshot_dir(entry.repo or "", entry.revision or "")
        lines.append(f"  - the Hugging Face cache: put {entry.repo} at revision {entry.revision} there "
                     f"(looked in {snapshot}; set HF_HUB_CACHE or HF_HOME if yours is elsewhere)")
    else:
        lines.append("  - a mirror of the package files: set ONESPEECH_PYPI_FILES")
    lines += [
        f"  - a local model {_LOCAL_MODEL.get(entry.kind, 'directory: its path in Python')} "
        f"(publisher files: {model_kind(entry.kind).describe_sources})",
        f"  - copy the files into the OneSpeech cache ({publisher}; ONESPEECH_HOME moves it) and set "
        "ONESPEECH_OFFLINE=1 (or HF_HUB_OFFLINE=1) so nothing is downloaded",
    ]
    lines += [f"  (refused from the Hugging Face cache: {name}: {why})" for name, why in sorted(refused.items())]
    return "\n".join(lines)


def _publisher_files(
    entry: CatalogEntry,
    pins: dict[str, FileDigest],
    publisher: Path,
    options: FetchOptions,
    cancel: Cancel,
    *,
    download: bool,
) -> dict[str, Path]:
    """Every file of ``pins``, verified: name -> path in our cache or in the Hugging Face cache.

    Files the Hugging Face cache holds are used where they are; the rest are downloaded
    into ``publisher`` (``download``) or must be there already (else
    ``PublisherFilesMissingError``).
    """
    found, refused = _from_hf_cache(entry, {n: pins[n] for n in missing_files(publisher, pins)})
    rest = {name: pin for name, pin in pins.items() if name not in found}
    if download:
        _fetch(entry, rest, publisher, options, cancel, refused)
    else:
        _require_cached(publisher, rest, entry, refused)
        verify_files(publisher, rest, digests="once", what="publisher file")
    return {**{name: safe_join(publisher, name) for name in rest}, **found}


def _from_hf_cache(
    entry: CatalogEntry, pins: dict[str, FileDigest]
) -> tuple[dict[str, Path], dict[str, str]]:
    """The files of ``pins`` the Hugging Face cache holds and that match their pins, and
    the ones it holds that do not (name -> why; each also a warning)."""
    if entry.source_type != "huggingface" or not pins:
        return {}, {}
    repo = hfcache.repo_cache_dir(entry.repo or "")
    found, refused = {}, {}
    for name, path in hfcache.locate(entry.repo or "", entry.revision or "", pins).items():
        try:  # stamps are kept in our cache, under the repository's folder: nothing is written there
            verify_files(repo, {name: pins[name]}, paths={name: path}, what="Hugging Face cache file")
        except ModelIntegrityError as e:
            refused[name] = f"{path} {e.reason}"
            warnings.warn(HFCacheMismatchWarning(
                f"{path} (file {name} of {entry.repo}@{entry.revision} in the Hugging Face cache) does not "
                f"match the catalog's pin: {e.reason}; not used (it is left as it is), the file comes from "
                "the OneSpeech cache or the Hub instead"
            ), stacklevel=2)  # fmt: skip
            continue
        found[name] = path
    return found, refused


def _source_view(directory: Path, paths: dict[str, Path], publisher: Path) -> Path:
    """``publisher`` when it holds every file, else a staging folder of links to ``paths``
    (copies where links cannot be made) for the converter to read as one directory."""
    if all(path == safe_join(publisher, name) for name, path in paths.items()):
        return publisher
    view = new_staging_dir(directory)
    for name, path in paths.items():
        link = safe_join(view, name)
        link.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.symlink(path.resolve(), link)
        except OSError:  # no symlinks (Windows without the privilege)
            shutil.copyfile(path, link)
    return view


def fetch_publisher(
    entry: CatalogEntry,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    options: FetchOptions | None = None,
    include_optional: bool = False,
    cancel: Cancel = None,
) -> Path:
    """Download (if missing) and verify an entry's publisher files; no conversion.

    Takes the model directory's lock like :func:`resolve`. ``include_optional`` also
    fetches catalogued optional files (README) whose pins are known. Returns the
    publisher directory.
    """
    directory = model_dir(entry, cache_dir)
    pins = entry.required_pins()
    if include_optional:
        pins.update({f.name: f.pin for f in entry.files if not f.required and f.pin is not None})
    with DirectoryLock(directory):
        _fetch(entry, pins, directory / PUBLISHER_DIR, options or FetchOptions(), cancel)
    return directory / PUBLISHER_DIR


def _resolve_entry(
    entry: CatalogEntry,
    precision: str,
    cache_dir: str | os.PathLike[str] | None,
    options: FetchOptions,
    converter: Converter | None,
    cancel: Cancel,
) -> Path:
    directory = model_dir(entry, cache_dir)
    runtime = directory / RUNTIME_DIR
    record = install_record_name(precision)
    handler = model_kind(entry.kind)
    if is_installed(runtime, record, handler.converter_version):
        return runtime
    convert = converter or handler.converter
    with DirectoryLock(directory):
        if is_installed(runtime, record, handler.converter_version):  # another process finished meanwhile
            return runtime
        remove_stale_staging(directory)
        publisher = directory / PUBLISHER_DIR
        pins = entry.required_pins()
        paths = _publisher_files(entry, pins, publisher, options, cancel, download=precision == "fp32")
        sources = _source_view(directory, paths, publisher)
        try:
            _check_shard_index(sources, pins)
            metadata = {"model": entry.id, "kind": entry.kind, "revision": entry.revision, "precision": precision,
                        "converter": handler.converter_version, "found_in": found_in(paths, publisher)}  # fmt: skip
            runtime_pins = entry.runtime.get(precision)
            expected = runtime_pins.files if runtime_pins is not None and runtime_pins.status == "pinned" else None
            raise_if_cancelled(cancel, "model installation")
            _convert_and_install(sources, directory, runtime, precision, convert, entry.revision, metadata, expected)
        finally:
            if sources != publisher:
                shutil.rmtree(sources, ignore_errors=True)  # links only: the files they point at stay
    return runtime


def found_in(paths: dict[str, Path], publisher: Path) -> dict[str, str]:
    """Where each publisher file was found: ``"onespeech"`` (our cache) or ``"huggingface"``."""
    return {name: "onespeech" if path == safe_join(publisher, name) else "huggingface"
            for name, path in sorted(paths.items())}  # fmt: skip


def _check_shard_index(publisher: Path, pins: dict[str, FileDigest]) -> None:
    """The shard names inside ``model.safetensors.index.json`` come from the remote: each must be a
    safe relative name and one of the pinned (hence verified) files, or conversion would read
    something nobody checked."""
    index = publisher / INDEX_NAME
    if INDEX_NAME not in pins or not index.is_file():
        return
    try:
        weight_map = loads_json(index.read_text(encoding="utf-8"))["weight_map"]
        shards = set(weight_map.values())
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ModelIntegrityError(index, f"not a safetensors index with a weight_map ({e})") from e
    for shard in sorted(shards, key=str):
        check_relative_name(shard)
        if shard not in pins:
            raise ModelIntegrityError(index, f"names shard {shard!r}, which the catalog does not pin")


def _require_cached(
    publisher: Path, pins: dict[str, FileDigest], entry: CatalogEntry, refused: Mapping[str, str]
) -> None:
    missing = missing_files(publisher, pins)
    if missing:
        where = f"{publisher} and the Hugging Face cache lack" if entry.source_type == "huggingface" else \
            f"{publisher} lacks"  # fmt: skip
        why = "".join(f"; refused from the Hugging Face cache: {n}: {w}" for n, w in sorted(refused.items()))
        raise PublisherFilesMissingError(
            f"BF16 conversion of {entry.id} never downloads, and {where} {', '.join(missing)}{why}; "
            f"resolve the FP32 model first (or fetch its files while online)"
        )


# -- local directories -----------------------------------------------------------------
def resolve_local(
    directory: str | os.PathLike[str],
    precision: Precision | str = Precision.FLOAT32,
    *,
    kind: str,
    cache_dir: str | os.PathLike[str] | None = None,
    converter: Converter | None = None,
    cancel: Cancel = None,
) -> Path:
    """Runtime files of a local directory: verified as they are, or converted in place.

    See the module docstring. Returns ``directory`` itself, or the cache directory its
    conversion went to when ``directory`` is not writable.
    """
    precision = Precision.parse(precision).value
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"model directory {directory} does not exist")
    record = install_record_name(precision)
    handler = model_kind(kind)
    if (directory / record).is_file():
        meta = read_manifest(directory, name=record).metadata
        if meta.get("source_dir") != IN_PLACE:  # runtime files only: nothing to compare them with
            verify_manifest(directory, name=record)
            return directory
        if changed_source(directory, meta) is None and is_installed(directory, record, handler.converter_version):
            return directory
    sources = handler.sources(directory)
    if not sources and (directory / record).is_file():  # publisher files removed after conversion
        verify_manifest(directory, name=record)
        return directory
    if not sources:
        raise FileNotFoundError(
            f"{directory} holds neither {precision} runtime files ({record}) nor the publisher files of "
            f"a {kind} model ({handler.describe_sources})"
        )
    if _writable(directory):
        return convert_directory(directory, directory, precision, kind=kind, converter=converter, cancel=cancel)
    real = directory.resolve()
    target = local_runtime_dir(real, cache_dir)
    if (target / record).is_file():
        meta = read_manifest(target, name=record).metadata
        if meta.get("source_dir") == str(real) and changed_source(real, meta) is None \
                and is_installed(target, record, handler.converter_version):  # fmt: skip
            return target
    return convert_directory(real, target, precision, kind=kind, converter=converter, cancel=cancel)


def local_runtime_dir(directory: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``<cache>/local/<key>/runtime``: where a read-only local directory is converted to
    (``key`` a digest of its resolved path)."""
    real = Path(directory).resolve()
    key = hashlib.sha256(str(real).encode("utf-8")).hexdigest()[:16]
    return (Path(cache_dir) if cache_dir is not None else cache_root()) / "local" / key / RUNTIME_DIR


def _writable(directory: Path) -> bool:
    """Whether to convert ``directory`` in place. Its permission bits count even where the
    process could write anyway (root): a folder made read-only is meant to stay as it is."""
    return os.access(directory, os.W_OK) and bool(directory.stat().st_mode & 0o222)


def changed_source(directory: Path, metadata: dict[str, Any]) -> str | None:
    """The first source file of ``directory`` that differs from the record's digests, or None.

    A file is re-hashed only when its stat changed since it was last verified.
    """
    recorded = metadata.get("source")
    if not isinstance(recorded, dict):
        return "(no source digests recorded)"
    pins = {}
    for name, value in sorted(recorded.items()):
        try:
            pins[name] = FileDigest(int(value["size"]), str(value["sha256"]))
        except (KeyError, TypeError, ValueError):
            return name
    try:
        verify_files(directory, pins, digests="once", what="source file")
    except ModelIntegrityError as e:
        return Path(e.path).relative_to(directory).as_posix()
    return None


def convert_directory(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    precision: Precision | str = Precision.FLOAT32,
    *,
    kind: str,
    converter: Converter | None = None,
    revision: str | None = None,
    cancel: Cancel = None,
) -> Path:
    """Convert the publisher files in ``source`` and install the result in ``target``.

    ``target`` may be ``source`` (in place). Under ``target``'s lock: convert into a
    staging directory beside it, verify, write the install record (with the source
    files' digests), install. Earlier records in ``target`` whose sources changed are
    dropped first (their runtime files derive from the old publisher files).
    Returns ``target``.
    """
    precision = Precision.parse(precision).value
    source, target = Path(source), Path(target)
    handler = model_kind(kind)
    convert = converter or handler.converter
    record = install_record_name(precision)
    in_place = source.resolve() == target.resolve()
    source_dir = IN_PLACE if in_place else str(source.resolve())
    target.mkdir(parents=True, exist_ok=True)
    with DirectoryLock(target):
        if (target / record).is_file():
            meta = read_manifest(target, name=record).metadata
            if meta.get("source_dir") == source_dir and changed_source(source, meta) is None \
                    and is_installed(target, record, handler.converter_version):  # fmt: skip
                return target  # converted by another process meanwhile
        remove_stale_staging(target)
        _drop_stale_records(target, source, source_dir)
        raise_if_cancelled(cancel, "model conversion")
        digests = {name: sha256_file(safe_join(source, name)) for name in handler.sources(source)}
        metadata = {
            "model": str(source.resolve()), "kind": kind, "revision": revision, "precision": precision,
            "converter": handler.converter_version, "source_dir": source_dir,
            "source": {n: {"size": d.size, "sha256": d.sha256} for n, d in digests.items()},
        }  # fmt: skip
        _convert_and_install(source, target, target, precision, convert, revision, metadata, None)
        if in_place:  # stamps let the next load compare the sources by stat, without hashing
            record_verified(source, {n: d for n, d in digests.items() if safe_join(source, n).is_file()})
    return target


def _drop_stale_records(target: Path, source: Path, source_dir: str) -> None:
    """Remove install records of ``target`` that came from another source or from older
    publisher files, so their runtime files are neither trusted nor protected."""
    if not target.is_dir():
        return
    for path in target.glob(f"{RECORD_PREFIX}*.json"):
        try:
            meta = read_manifest(target, name=path.name).metadata
        except ModelIntegrityError:
            path.unlink(missing_ok=True)
            continue
        if meta.get("source_dir") != source_dir or changed_source(source, meta) is not None:
            path.unlink(missing_ok=True)


# -- shared steps ------------------------------------------------------------------------
def is_installed(runtime: Path, record: str, converter_version: str = "") -> bool:
    """True if ``runtime/record`` exists and every file it lists is present and matches.

    A listed file that is missing, or a record written by another ``converter_version``
    (when one is given: `ModelKind.converter_version`), means "not installed": it will be
    converted again. A present file that differs raises ModelIntegrityError naming it.
    """
    if not (runtime / record).is_file():
        return False
    manifest = read_manifest(runtime, name=record)
    if not converted_by(manifest.metadata, converter_version):
        return False
    if missing_files(runtime, manifest.files):
        return False
    verify_files(runtime, manifest.files, digests="once", what="runtime file")
    return True


def _convert_and_install(
    publisher: Path,
    work_dir: Path,
    runtime: Path,
    precision: str,
    converter: Converter,
    revision: str | None,
    metadata: dict[str, Any],
    expected: dict[str, FileDigest] | None,
) -> None:
    staging = new_staging_dir(work_dir)
    try:
        converter(publisher, staging, precision, revision)
        outputs = _hash_outputs(staging)
        record_verified(staging, outputs)  # renames keep inode and mtime: the stamps move with the files
        manifests = _check_outputs(staging, outputs, expected)
        record = install_record_name(precision)
        _check_conflicts(runtime, outputs, replacing=record)
        if record in outputs:
            raise ModelIntegrityError(safe_join(staging, record), "the converter wrote a file with a reserved name")
        write_manifest(staging, outputs, name=record, metadata={**metadata, "pinned": expected is not None})
        install(staging, runtime, [*manifests, record])
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        forget_stamps(staging)


def _hash_outputs(staging: Path) -> dict[str, FileDigest]:
    names = sorted(
        p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file() and p.name != STAMP_NAME
    )
    if not names:
        raise ModelIntegrityError(staging, "the converter produced no files")
    return {name: sha256_file(safe_join(staging, name)) for name in names}


def _check_outputs(staging: Path, outputs: dict[str, FileDigest], expected: dict[str, FileDigest] | None) -> list[str]:
    """Compare outputs with the catalog pins (if any) and with the converter's manifests.

    Returns the names of the converter's manifests (installed after the data files).
    """
    if expected is not None:
        if set(outputs) != set(expected):
            extra, lacking = sorted(set(outputs) - set(expected)), sorted(set(expected) - set(outputs))
            raise ModelIntegrityError(
                staging, f"converter output files differ from the catalog pins (extra {extra}, missing {lacking})"
            )
        for name, digest in outputs.items():
            if digest != expected[name]:
                raise ModelIntegrityError(
                    safe_join(staging, name),
                    f"converter output {name} is {digest.size} bytes / SHA-256 {digest.sha256}, the catalog pins "
                    f"{expected[name].size} / {expected[name].sha256} (converter and catalog disagree)",
                )
    manifests = []
    for name in outputs:
        if "/" in name or not (name.startswith("manifest") and name.endswith(".json")):
            continue
        try:
            manifest = read_manifest(staging, name=name)
        except ModelIntegrityError:
            continue  # not in the store's manifest format: installed last, not re-verified here
        finally:
            manifests.append(name)
        for listed, digest in manifest.files.items():
            if outputs.get(listed) != digest:
                raise ModelIntegrityError(
                    safe_join(staging, listed), f"does not match the converter's manifest {name}"
                )
    return manifests


def _check_conflicts(runtime: Path, outputs: dict[str, FileDigest], replacing: str) -> None:
    """A second precision may share identical files with the first, never overwrite different ones."""
    if not runtime.is_dir():
        return
    for record_path in runtime.glob(f"{RECORD_PREFIX}*.json"):
        if record_path.name == replacing:
            continue
        installed = read_manifest(runtime, name=record_path.name).files
        for name, digest in outputs.items():
            if name in installed and installed[name] != digest:
                raise ModelIntegrityError(
                    runtime / name,
                    f"the new conversion would replace {name}, which {record_path.name} pins differently "
                    "(the converter must name each precision's files apart)",
                )
