"""From a model name to a ready runtime directory: fetch, verify, convert, verify, install.

``resolve("Qwen/Qwen3-ASR-0.6B")`` returns ``<cache>/models/Qwen--Qwen3-ASR-0.6B/<revision>/runtime``
holding verified FP32 runtime files. The steps, each of which can stop with a
specific error:

1. an install record (``install.fp32.json``) exists and every file it lists matches
   -> done, no lock, no network (digests are re-hashed only for files whose stat
   changed, see ``onespeech.kernels.store``);
2. take the model directory's lock (a second process gets
   ``ConversionInProgressError``: retry after the first completes);
3. FP32: download missing publisher files (``onespeech.kernels.fetch``; offline mode
   fails naming them) and verify each against its catalog pin.
   BF16: never downloads; the publisher files must already be in the cache;
4. convert into a staging directory with ``onespeech.qwen3.convert``;
5. hash every output, compare with the catalog's runtime pins when they are known
   and with the converter's own manifests, write the install record;
6. install atomically (``store.install``: data files first, manifests/record last).

A file listed by the record but missing counts as "not installed" (so removing the
file named by a ``ModelIntegrityError`` and calling again reconverts it); a present
file with the wrong size or digest raises ``ModelIntegrityError`` naming it.

Directories outside the catalog (a local checkout, a fine-tune) are accepted: a
directory that already holds an install record is verified and returned as is; a
directory of publisher files is converted into ``<cache>/local/<key>/runtime`` and
its files' digests are recorded then, and re-checked at every later resolve (a
changed source is converted again).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from onespeech.kernels.errors import ModelIntegrityError
from onespeech.kernels.fetch import FetchOptions, fetch_files, missing_files
from onespeech.kernels.jsonfile import loads_json
from onespeech.kernels.lock import DirectoryLock
from onespeech.kernels.precision import Precision
from onespeech.kernels.store import (
    STAMP_NAME,
    FileDigest,
    Manifest,
    cache_root,
    check_relative_name,
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
from onespeech.qwen3.catalog import CatalogEntry, get_entry

__all__ = [
    "Converter",
    "PublisherFilesMissingError",
    "fetch_publisher",
    "install_record_name",
    "model_dir",
    "resolve",
]

# (publisher_dir, staging_dir, precision "fp32"|"bf16") -> None; writes runtime files into staging
Converter = Callable[[Path, Path, str], Any]

RECORD_PREFIX = "install."
PUBLISHER_DIR, RUNTIME_DIR = "publisher", "runtime"
INDEX_NAME = "model.safetensors.index.json"


class PublisherFilesMissingError(FileNotFoundError):
    """A BF16 conversion needs publisher files that are not in the cache (it never downloads)."""


def install_record_name(precision: Precision | str) -> str:
    """The install record of one precision in a runtime directory, e.g. ``install.fp32.json``."""
    return f"{RECORD_PREFIX}{Precision.parse(precision).value}.json"


def default_converter(publisher_dir: Path, staging_dir: Path, precision: str, revision: str | None = None) -> None:
    """Run :func:`onespeech.qwen3.convert.convert` (imported on use: it needs the kernels)."""
    from onespeech.qwen3.convert import convert

    convert(publisher_dir, staging_dir, precision, revision=revision)


def _converter_manifest(precision: str) -> str:
    from onespeech.qwen3.convert import manifest_name

    return manifest_name(precision)


# -- entry point -------------------------------------------------------------------
def resolve(
    model: str | os.PathLike[str] | CatalogEntry,
    precision: Precision | str = Precision.FLOAT32,
    *,
    offline: bool | None = None,
    progress: bool | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    catalog_dir: str | os.PathLike[str] | None = None,
    fetch_options: FetchOptions | None = None,
    converter: Converter | None = None,
) -> Path:
    """Return a directory holding verified runtime files of ``model`` at ``precision``.

    Parameters
    ----------
    model
        A catalog id (``"Qwen/Qwen3-ASR-0.6B"``), a :class:`CatalogEntry` (custom
        catalogs, tests), or a local directory (publisher files or runtime files).
        An existing directory wins over a catalog id of the same spelling.
    precision
        ``"fp32"`` (default) or ``"bf16"`` (or a ``Precision`` member). BF16 is
        converted from the cached publisher files and never downloads.
    offline, progress
        Override ``ONESPEECH_OFFLINE``/``HF_HUB_OFFLINE`` and the progress-bar default.
    cache_dir
        Cache root (default ``ONESPEECH_HOME`` or the per-user cache dir).
    catalog_dir
        A directory of catalog files to use instead of the shipped one.
    fetch_options
        Endpoint, timeouts and retries (``offline``/``progress`` above take precedence).
    converter
        Replaces ``onespeech.qwen3.convert`` (same signature as :data:`Converter`).

    Raises
    ------
    UnknownModelError, ValueError
        Unknown model id or precision.
    OfflineModeError, PublisherFilesMissingError
        Files needed and not cached, naming them.
    ModelIntegrityError
        A cached, downloaded or converted file does not match; names the file to remove.
    ConversionInProgressError
        Another process is fetching/converting this model; retry after it completes.
    DownloadError
        The network failed after retries.
    """
    precision = Precision.parse(precision).value
    options = fetch_options or FetchOptions()
    options = FetchOptions(**{**options.__dict__, "offline": offline if offline is not None else options.offline,
                              "progress": progress if progress is not None else options.progress})  # fmt: skip
    if isinstance(model, os.PathLike) or (isinstance(model, str) and Path(model).is_dir()):
        return _resolve_local(Path(model), precision, cache_dir, converter or default_converter)
    entry = model if isinstance(model, CatalogEntry) else get_entry(str(model), catalog_dir)
    if converter is None:

        def converter(publisher: Path, staging: Path, precision: str) -> None:
            default_converter(publisher, staging, precision, revision=entry.revision)

    return _resolve_entry(entry, precision, cache_dir, options, converter)


# -- catalogued models --------------------------------------------------------------
def model_dir(entry: CatalogEntry, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``<cache>/models/<owner>--<name>/<revision>`` of a Hub catalog entry."""
    repo, revision = entry.hub_location
    return model_cache_dir(repo, revision, cache_dir)


def fetch_publisher(
    entry: CatalogEntry,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    options: FetchOptions | None = None,
    include_optional: bool = False,
) -> Path:
    """Download (if missing) and verify a Hub entry's publisher files; no conversion.

    Takes the model directory's lock like :func:`resolve`. ``include_optional`` also
    fetches catalogued optional files (README) whose pins are known. Returns the
    publisher directory.
    """
    directory = model_dir(entry, cache_dir)
    pins = entry.required_pins()
    if include_optional:
        pins.update({f.name: f.pin for f in entry.files if not f.required and f.pin is not None})
    with DirectoryLock(directory):
        fetch_files(*entry.hub_location, pins, directory / PUBLISHER_DIR, options=options or FetchOptions())
    return directory / PUBLISHER_DIR


def _resolve_entry(
    entry: CatalogEntry, precision: str, cache_dir: Any, options: FetchOptions, converter: Converter
) -> Path:
    directory = model_dir(entry, cache_dir)
    runtime = directory / RUNTIME_DIR
    record = install_record_name(precision)
    if _installed(runtime, record):
        return runtime
    with DirectoryLock(directory):
        if _installed(runtime, record):  # another process finished between our check and the lock
            return runtime
        remove_stale_staging(directory)
        publisher = directory / PUBLISHER_DIR
        pins = entry.required_pins()
        if precision == "fp32":
            fetch_files(*entry.hub_location, pins, publisher, options=options)
        else:
            _require_cached(publisher, pins, entry)
            verify_files(publisher, pins, digests="once", what="publisher file")
        _check_shard_index(publisher, pins)
        metadata = {"model": entry.id, "repo": entry.repo, "revision": entry.revision, "precision": precision}
        runtime_pins = entry.runtime.get(precision)
        expected = runtime_pins.files if runtime_pins is not None and runtime_pins.status == "pinned" else None
        _convert_and_install(publisher, directory, runtime, precision, converter, metadata, expected)
    return runtime


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


def _require_cached(publisher: Path, pins: dict[str, FileDigest], entry: CatalogEntry) -> None:
    missing = missing_files(publisher, pins)
    if missing:
        raise PublisherFilesMissingError(
            f"BF16 conversion of {entry.id} never downloads, and {publisher} lacks {', '.join(missing)}; "
            "load the FP32 model once first (Precision.FLOAT32 downloads them)"
        )


# -- local directories -----------------------------------------------------------------
def _resolve_local(directory: Path, precision: str, cache_dir: Any, converter: Converter) -> Path:
    if not directory.is_dir():
        raise FileNotFoundError(f"model directory {directory} does not exist")
    record = install_record_name(precision)
    if (directory / record).is_file():  # a runtime directory installed by resolve()
        verify_manifest(directory, name=record)
        return directory
    if converter is default_converter and (directory / _converter_manifest(precision)).is_file():
        verify_manifest(directory, name=_converter_manifest(precision))  # converted in place by the runtime
        return directory
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(
            f"{directory} holds neither runtime files ({record}) nor publisher files (config.json + weights)"
        )
    real = directory.resolve()
    key = hashlib.sha256(str(real).encode("utf-8")).hexdigest()[:16]
    local_dir = (Path(cache_dir) if cache_dir is not None else cache_root()) / "local" / key
    runtime = local_dir / RUNTIME_DIR
    if _installed(runtime, record) and _source_unchanged(real, read_manifest(runtime, name=record)):
        return runtime
    with DirectoryLock(local_dir):
        remove_stale_staging(local_dir)
        if runtime.exists():  # converted from an older state of the source: start afresh
            old = new_staging_dir(local_dir)
            os.replace(runtime, old / RUNTIME_DIR)
            shutil.rmtree(old, ignore_errors=True)
        source = _source_files(real)
        metadata = {"model": str(real), "precision": precision, "source": source}
        _convert_and_install(real, local_dir, runtime, precision, converter, metadata, None)
    return runtime


def _source_files(directory: Path) -> dict[str, list]:
    """Every visible top-level file of a local publisher directory: [size, mtime_ns, ino, sha256]."""
    out = {}
    for path in sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith(".")):
        st = path.stat()
        out[path.name] = [st.st_size, st.st_mtime_ns, st.st_ino, sha256_file(path).sha256]
    return out


def _source_unchanged(directory: Path, manifest: Manifest) -> bool:
    recorded = manifest.metadata.get("source") or {}
    names = {p.name for p in directory.iterdir() if p.is_file() and not p.name.startswith(".")}
    if names != set(recorded):
        return False
    for name, (size, mtime_ns, ino, sha) in recorded.items():
        st = (directory / name).stat()
        if [st.st_size, st.st_mtime_ns, st.st_ino] == [size, mtime_ns, ino]:
            continue  # same file state as when its digest was recorded
        if st.st_size != size or sha256_file(directory / name).sha256 != sha:
            return False
    return True


# -- shared steps ------------------------------------------------------------------------
def _installed(runtime: Path, record: str) -> bool:
    """True if ``runtime/record`` exists and every file it lists is present and matches.

    A listed file that is missing means "not installed" (it will be converted again);
    a present file that differs raises ModelIntegrityError naming it.
    """
    if not (runtime / record).is_file():
        return False
    manifest = read_manifest(runtime, name=record)
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
    metadata: dict[str, Any],
    expected: dict[str, FileDigest] | None,
) -> None:
    staging = new_staging_dir(work_dir)
    try:
        converter(publisher, staging, precision)
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
