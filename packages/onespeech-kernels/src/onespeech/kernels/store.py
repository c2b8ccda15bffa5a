"""The model store: cache directory, file digests, manifests, staging and atomic install.

Layout under the cache root (``ONESPEECH_HOME``, default the per-user cache dir)::

    models/<owner>--<name>/<revision>/
        .lock                 DirectoryLock while fetching / verifying / converting
        publisher/            the publisher's files, each verified against its pin
        runtime/              installed runtime files + manifest(s)
        .staging-<pid>-<hex>/ conversion output before it is verified and installed

A runtime directory counts as installed only through its manifest: install moves
every data file in first and the manifest last (``os.replace``, same filesystem), so a
reader that finds a manifest finds all its files, and a crash leaves only an
unreferenced staging directory that the next converter removes. When the target does
not exist yet, the whole staging directory is renamed into place in one step.

Digest checks are expensive for multi-gigabyte files, so a successful SHA-256 check is
remembered as a *stamp*: the file's size, mtime_ns, inode and device with the digest it
matched. Later checks re-hash only files whose stamp no longer matches their stat.
``verify_manifest(..., digests="always")`` re-hashes everything. Stamps are kept in the
store, never beside the files (a directory of models given by path is the user's: the
library writes nothing there to verify it): ``<cache>/stamps/<key>.json`` per verified
directory, ``key`` derived from its resolved path. A store that cannot be written only
means the files are hashed again next time.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from onespeech.kernels.errors import ModelIntegrityError, UnsafeFileNameError
from onespeech.kernels.jsonfile import loads_json
from onespeech.kernels.lock import pid_alive

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "onespeech-manifest"
MANIFEST_VERSION = 1
STAMP_NAME = ".verified.json"  # where older versions kept stamps, beside the files; never installed
STAMPS_DIR = "stamps"
STAGING_PREFIX = ".staging-"
_HASH_BLOCK = 1 << 20  # 1 MiB reads: large enough for hashlib to run at memory speed
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_REPO_PART_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_REVISION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


# -- locations ---------------------------------------------------------------
def cache_root() -> Path:
    """The store's root: ``$ONESPEECH_HOME`` or the per-user cache directory + ``onespeech``.

    The default follows each platform's convention: ``$XDG_CACHE_HOME`` or ``~/.cache`` on
    Linux, ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows.
    """
    env = os.environ.get("ONESPEECH_HOME")
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":  # pragma: no cover - Windows
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":  # pragma: no cover - macOS
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "onespeech"


def check_repo_id(repo_id: str) -> str:
    """Validate ``owner/name`` (the Hugging Face repository id form) and return it."""
    parts = repo_id.split("/") if isinstance(repo_id, str) else []
    if len(parts) != 2 or not all(_REPO_PART_RE.match(p) and ".." not in p for p in parts):
        raise ValueError(
            f"repository id {repo_id!r} is not of the form owner/name "
            "(letters, digits, '.', '_', '-'; no '..')"
        )
    return repo_id


def check_revision(revision: str) -> str:
    """Validate a revision (a commit id, tag or branch without '/') and return it."""
    if not isinstance(revision, str) or not _REVISION_RE.match(revision) or ".." in revision:
        raise ValueError(
            f"revision {revision!r} is not allowed; use a commit id, tag or branch name "
            "(letters, digits, '.', '_', '-')"
        )
    return revision


def model_cache_dir(repo_id: str, revision: str, root: str | os.PathLike[str] | None = None) -> Path:
    """``<root>/models/<owner>--<name>/<revision>``: one model revision's directory."""
    owner, name = check_repo_id(repo_id).split("/")
    base = Path(root) if root is not None else cache_root()
    return base / "models" / f"{owner}--{name}" / check_revision(revision)


def check_relative_name(name: str) -> str:
    """Return ``name`` if it is a safe relative POSIX path inside a directory.

    Refused: empty names, absolute paths, drive letters, backslashes, NUL and control
    characters, and ``.``/``..``/empty components.

    Raises
    ------
    UnsafeFileNameError
        Naming the offending file name and what is allowed.
    """
    allowed = "relative POSIX paths like 'model.safetensors' or 'onnx/model.onnx'"
    if not isinstance(name, str) or not name:
        raise UnsafeFileNameError(f"file name {name!r} is empty or not a string; allowed: {allowed}")
    if name.startswith("/") or "\\" in name or ":" in name or name.startswith("~"):
        raise UnsafeFileNameError(f"file name {name!r} is absolute or platform-specific; allowed: {allowed}")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise UnsafeFileNameError(f"file name {name!r} contains control characters; allowed: {allowed}")
    if any(part in ("", ".", "..") for part in name.split("/")):
        raise UnsafeFileNameError(f"file name {name!r} has an empty, '.' or '..' component; allowed: {allowed}")
    return name


def safe_join(directory: str | os.PathLike[str], name: str) -> Path:
    """``directory / name`` after :func:`check_relative_name`, and provably inside ``directory``."""
    base = Path(directory)
    path = base.joinpath(*check_relative_name(name).split("/"))
    # symlinked components could still point outside; compare resolved paths
    if not path.resolve().is_relative_to(base.resolve()):
        raise UnsafeFileNameError(f"file name {name!r} resolves outside {base}")
    return path


# -- digests -----------------------------------------------------------------
@dataclass(frozen=True)
class FileDigest:
    """A file's pin: its size in bytes and lowercase hex SHA-256."""

    size: int
    sha256: str

    def __post_init__(self) -> None:
        if not isinstance(self.size, int) or self.size < 0:
            raise ValueError(f"size {self.size!r} must be a non-negative int")
        if not isinstance(self.sha256, str) or not _SHA256_RE.match(self.sha256):
            raise ValueError(f"sha256 {self.sha256!r} must be 64 lowercase hex digits")


def sha256_file(path: str | os.PathLike[str]) -> FileDigest:
    """Size and SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while block := f.read(_HASH_BLOCK):
            digest.update(block)
            size += len(block)
    return FileDigest(size, digest.hexdigest())


def check_size(path: Path, expected: FileDigest, *, what: str = "file") -> None:
    """Raise :class:`ModelIntegrityError` unless ``path`` is a file of ``expected.size`` bytes."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ModelIntegrityError(path, f"{what} is missing") from None
    if size != expected.size:
        raise ModelIntegrityError(path, f"{what} has {size} bytes, expected {expected.size}")


def verify_file(path: str | os.PathLike[str], expected: FileDigest, *, what: str = "file") -> None:
    """Check one file's size, then SHA-256, against ``expected``.

    Raises
    ------
    ModelIntegrityError
        If the file is missing, has the wrong size or the wrong digest; the message
        names the file to remove.
    """
    path = Path(path)
    check_size(path, expected, what=what)
    actual = sha256_file(path).sha256
    if actual != expected.sha256:
        raise ModelIntegrityError(path, f"{what} has SHA-256 {actual}, expected {expected.sha256}")


# -- verification stamps -------------------------------------------------------
def _stat_key(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev]


def stamp_path(directory: str | os.PathLike[str]) -> Path:
    """Where the stamps of the files in ``directory`` are kept: ``<cache>/stamps/<key>.json``,
    ``key`` a digest of the directory's resolved path."""
    real = os.path.realpath(directory)
    key = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return cache_root() / STAMPS_DIR / f"{key}.json"


def _read_stamps(directory: Path) -> dict[str, Any]:
    try:
        data = loads_json(stamp_path(directory).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    # the key is a digest: the recorded path guards against two directories sharing one
    if not isinstance(data, dict) or data.get("directory") != os.path.realpath(directory):
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _save_stamps(directory: Path, stamps: dict[str, Any]) -> None:
    path = stamp_path(directory)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_json_atomic(path, {"directory": os.path.realpath(directory), "files": stamps})
    except OSError:  # a read-only store: we just hash again next time
        pass


def forget_stamps(directory: str | os.PathLike[str]) -> None:
    """Drop the stamps of ``directory`` (it was removed, or renamed and its stamps moved)."""
    try:
        stamp_path(directory).unlink(missing_ok=True)
    except OSError:
        pass


def is_verified(directory: str | os.PathLike[str], name: str, pin: FileDigest) -> bool:
    """True if ``directory/name`` was verified against ``pin`` and has not changed since
    (by its stamp; nothing is hashed). For reports such as ``probe``."""
    directory = Path(directory)
    path = safe_join(directory, name)
    return path.is_file() and _read_stamps(directory).get(name) == [*_stat_key(path), pin.sha256]


def record_verified(directory: str | os.PathLike[str], files: Mapping[str, FileDigest]) -> None:
    """Remember that ``files`` (name -> pin) in ``directory`` were just verified (e.g. hashed
    while downloading), so the next :func:`verify_files` with ``digests="once"`` skips them."""
    directory = Path(directory)
    stamps = _read_stamps(directory)
    for name, pin in files.items():
        stamps[name] = [*_stat_key(safe_join(directory, name)), pin.sha256]
    _save_stamps(directory, stamps)


def verify_files(
    directory: str | os.PathLike[str],
    files: Mapping[str, FileDigest],
    *,
    digests: Literal["once", "always", "never"] = "once",
    what: str = "file",
    paths: Mapping[str, Path] | None = None,
) -> None:
    """Verify ``files`` (name -> pin) inside ``directory``.

    ``digests="once"`` hashes a file only if it was not already verified with the same
    stat (see module docstring); ``"always"`` hashes every file; ``"never"`` checks sizes.
    ``paths`` gives the file of a name when it is not ``directory/name`` (a file the
    caller located and checked itself, such as a Hugging Face cache snapshot's link
    into its ``blobs/``); its stamp is still kept under ``directory``.

    Raises
    ------
    ModelIntegrityError
        For the first missing or mismatching file, naming the file to remove.
    """
    directory = Path(directory)
    stamps = _read_stamps(directory) if digests == "once" else {}
    changed = False
    for name, pin in files.items():
        path = paths[name] if paths is not None and name in paths else safe_join(directory, name)
        if digests == "never":
            check_size(path, pin, what=what)
            continue
        if path.is_file() and stamps.get(name) == [*_stat_key(path), pin.sha256]:
            continue
        verify_file(path, pin, what=what)
        stamps[name] = [*_stat_key(path), pin.sha256]
        changed = True
    if changed:
        _save_stamps(directory, stamps)


# -- manifests -----------------------------------------------------------------
@dataclass(frozen=True)
class Manifest:
    """A runtime directory's manifest: every file's pin plus free-form metadata."""

    files: dict[str, FileDigest]
    metadata: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        files = {n: {"size": d.size, "sha256": d.sha256} for n, d in sorted(self.files.items())}
        return {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, **self.metadata, "files": files}


def write_manifest(
    directory: str | os.PathLike[str],
    files: Iterable[str] | Mapping[str, FileDigest],
    *,
    name: str = MANIFEST_NAME,
    metadata: Mapping[str, Any] | None = None,
) -> Manifest:
    """Write ``directory/name`` listing ``files`` (names, hashed now, or name -> pin).

    The manifest is written to a temporary file and renamed, so it is never seen half
    written. Returns the :class:`Manifest` written.
    """
    directory = Path(directory)
    if isinstance(files, Mapping):
        pins = {check_relative_name(n): d for n, d in files.items()}
    else:
        pins = {check_relative_name(n): sha256_file(safe_join(directory, n)) for n in files}
    meta = dict(metadata or {})
    for reserved in ("format", "version", "files"):
        if reserved in meta:
            raise ValueError(f"manifest metadata may not use the reserved key {reserved!r}")
    manifest = Manifest(pins, meta)
    _write_json_atomic(safe_join(directory, check_relative_name(name)), manifest.to_json())
    return manifest


def read_manifest(directory: str | os.PathLike[str], *, name: str = MANIFEST_NAME) -> Manifest:
    """Parse ``directory/name``.

    Raises
    ------
    FileNotFoundError
        If there is no manifest (the directory is not installed).
    ModelIntegrityError
        If the manifest is unreadable or malformed (names the manifest to remove).
    """
    path = safe_join(directory, name)
    text = path.read_text(encoding="utf-8")
    try:
        data = loads_json(text)
        if data.get("format") != MANIFEST_FORMAT or data.get("version") != MANIFEST_VERSION:
            raise ValueError(f"format/version {data.get('format')!r}/{data.get('version')!r}")
        files = {
            check_relative_name(n): FileDigest(int(v["size"]), str(v["sha256"]))
            for n, v in data["files"].items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ModelIntegrityError(path, f"not a valid {MANIFEST_FORMAT} v{MANIFEST_VERSION} file ({e})") from e
    meta = {k: v for k, v in data.items() if k not in ("format", "version", "files")}
    return Manifest(files, meta)


def verify_manifest(
    directory: str | os.PathLike[str],
    *,
    name: str = MANIFEST_NAME,
    digests: Literal["once", "always", "never"] = "once",
) -> Manifest:
    """Read the manifest and verify every file it lists; return it.

    Raises
    ------
    FileNotFoundError
        If the manifest is absent.
    ModelIntegrityError
        If any listed file is missing or differs; the message names the file to remove.
    """
    manifest = read_manifest(directory, name=name)
    verify_files(directory, manifest.files, digests=digests, what="runtime file")
    return manifest


# -- staging and install -------------------------------------------------------
def new_staging_dir(parent: str | os.PathLike[str]) -> Path:
    """Create an empty staging directory under ``parent`` (same filesystem as the target)."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    path = parent / f"{STAGING_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
    path.mkdir()
    return path


def remove_stale_staging(parent: str | os.PathLike[str]) -> list[Path]:
    """Delete staging directories under ``parent`` whose creating process is gone.

    Call it while holding the directory lock. Returns the directories removed.
    """
    removed: list[Path] = []
    parent = Path(parent)
    if not parent.is_dir():
        return removed
    for path in parent.glob(f"{STAGING_PREFIX}*"):
        try:
            pid = int(path.name[len(STAGING_PREFIX) :].split("-")[0])
        except ValueError:
            continue
        if pid == os.getpid() or not pid_alive(pid):
            shutil.rmtree(path, ignore_errors=True)
            forget_stamps(path)
            removed.append(path)
    return removed


def install(staging: str | os.PathLike[str], target: str | os.PathLike[str], manifests: Iterable[str]) -> None:
    """Move a verified staging directory's files into ``target``, manifests last.

    If ``target`` does not exist, the staging directory itself is renamed (one atomic
    step). Otherwise each data file replaces its namesake, then each manifest in
    ``manifests`` is moved, so a manifest is only ever visible with all its files.
    Files in ``target`` that staging does not hold are left alone (a BF16 install
    next to FP32 files keeps them). The staging directory is removed afterwards.
    """
    staging, target = Path(staging), Path(target)
    manifests = list(manifests)
    for name in manifests:
        if not safe_join(staging, name).is_file():
            raise FileNotFoundError(f"staging directory {staging} has no manifest {name!r} to install")
    target.parent.mkdir(parents=True, exist_ok=True)
    stamps = _read_stamps(staging)
    if not target.exists():
        os.replace(staging, target)  # a rename keeps inodes and mtimes: the stamps stay valid
        _save_stamps(target, stamps)
        forget_stamps(staging)
        return
    names = sorted(
        p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file() and p.name != STAMP_NAME
    )
    ordered = [n for n in names if n not in manifests] + [n for n in names if n in manifests]
    target_stamps = _read_stamps(target)
    for name in ordered:
        dest = safe_join(target, name)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(safe_join(staging, name), dest)
        if name in stamps:  # rename keeps inode and mtime, so the stamp stays valid
            target_stamps[name] = stamps[name]
        else:
            target_stamps.pop(name, None)
    _save_stamps(target, target_stamps)
    shutil.rmtree(staging, ignore_errors=True)
    forget_stamps(staging)
