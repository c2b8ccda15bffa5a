"""Download publisher files: streamed, resumable, retried, verified.

Why ``requests`` and ``tqdm``: streaming with timeouts, redirects (the Hub sends
weights to a CDN) and proxies from the environment are what users expect from a
Python download, and ``tqdm`` is the progress bar they already know; writing either
ourselves would be more code to get wrong.

URL layout is the Hugging Face Hub's: ``{endpoint}/{repo_id}/resolve/{revision}/{name}``
with ``endpoint`` from ``HF_ENDPOINT`` (a mirror) or ``https://huggingface.co``.
A download goes to ``<name>.part``; an interrupted one resumes with an HTTP ``Range``
request. The SHA-256 is computed while the bytes arrive. Only a file whose size and
digest match its pin is renamed to its final name, so a file under its own name in
the cache is always a verified one.

A download that does not complete (or match) in time fails: a silent connection after
``read_timeout_s``, a slow one when it delivers less than ``stall_bytes`` within any
``stall_timeout_s`` (a server trickling 2 KiB/s), and any download after
``total_timeout_s`` if set. ``cancel`` is checked between received blocks. Bytes that
fail verification are discarded, so the next attempt starts afresh.

Retries are for transient failures (timeouts, stalls, dropped connections, HTTP 429/5xx).
A host that cannot be reached at all on the first attempt (its name does not resolve,
the connection is refused, no route) fails at once: waiting ~30 s of backoff for a
machine without network helps nobody.

``HF_TOKEN``, when set, is sent to the Hub endpoint as ``Authorization: Bearer`` (gated
repositories and mirrors); ``requests`` drops it on redirects to another host (the
CDN). It never appears in a message.

Offline mode (``ONESPEECH_OFFLINE=1`` or ``HF_HUB_OFFLINE=1``, or ``offline=True``)
never touches the network: it uses what the cache holds or fails naming what is missing.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

import requests
import urllib3
from tqdm import tqdm

from onespeech.kernels import __version__
from onespeech.kernels.cancel import Cancel, check_cancel, is_cancelled
from onespeech.kernels.errors import (
    CorruptDownloadError,
    DownloadError,
    OfflineModeError,
    OperationCancelledError,
    RemoteFileNotFoundError,
    UnsafeFileNameError,
)
from onespeech.kernels.store import (
    FileDigest,
    check_repo_id,
    check_revision,
    record_verified,
    safe_join,
    sha256_file,
    verify_files,
)

__all__ = [
    "DEFAULT_ENDPOINT",
    "DownloadError",
    "FetchOptions",
    "OfflineModeError",
    "RemoteFileNotFoundError",
    "UnsafeFileNameError",
    "fetch_file",
    "fetch_files",
    "file_url",
    "hub_endpoint",
    "offline_mode",
]

#: The hub address used unless ``endpoint`` or ``HF_ENDPOINT`` names another.
DEFAULT_ENDPOINT = "https://huggingface.co"
# 64 KiB per read: when a connection drops, requests discards the block being read, so
# a resumed download restarts at most this far before the point of failure
_CHUNK = 1 << 16
_TRUE = {"1", "true", "yes", "on"}
_RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}


@dataclass(frozen=True)
class FetchOptions:
    """How to download. ``None`` fields follow the environment (see each comment)."""

    endpoint: str | None = None  # None: $HF_ENDPOINT, else https://huggingface.co
    offline: bool | None = None  # None: $ONESPEECH_OFFLINE or $HF_HUB_OFFLINE
    progress: bool | None = None  # None: a bar only when stderr is a terminal
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0  # longest silence allowed between two received blocks
    stall_timeout_s: float = 60.0  # ... and at least stall_bytes must arrive within any such span
    stall_bytes: int = 1 << 20
    total_timeout_s: float | None = None  # a whole file (all attempts) must be done by then
    retries: int = 5  # attempts per file = retries + 1
    backoff_s: float = 1.0  # wait before retry k is backoff_s * 2**(k-1), at most 30 s

    def __post_init__(self) -> None:
        timeouts = (self.connect_timeout_s, self.read_timeout_s, self.stall_timeout_s)
        if any(not t > 0 for t in timeouts) or (self.total_timeout_s is not None and not self.total_timeout_s > 0):
            raise ValueError("connect_timeout_s, read_timeout_s, stall_timeout_s and total_timeout_s must be > 0 s")
        if isinstance(self.stall_bytes, bool) or not isinstance(self.stall_bytes, int) or self.stall_bytes < 1:
            raise ValueError(f"stall_bytes={self.stall_bytes!r} must be an int >= 1")
        if not isinstance(self.retries, int) or self.retries < 0:
            raise ValueError(f"retries={self.retries!r} must be an int >= 0")
        if self.backoff_s < 0:
            raise ValueError(f"backoff_s={self.backoff_s!r} must be >= 0")


# -- environment ---------------------------------------------------------------
def hub_endpoint(endpoint: str | None = None) -> str:
    """``endpoint``, else ``$HF_ENDPOINT``, else https://huggingface.co (no trailing slash)."""
    value = endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"endpoint {value!r} must start with http:// or https://")
    return value.rstrip("/")


def offline_mode(offline: bool | None = None) -> bool:
    """``offline`` if given, else true when ``ONESPEECH_OFFLINE`` or ``HF_HUB_OFFLINE`` is set to 1."""
    if offline is not None:
        return bool(offline)
    return any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("ONESPEECH_OFFLINE", "HF_HUB_OFFLINE"))


def progress_enabled(progress: bool | None = None) -> bool:
    """Show a bar if asked; by default only on a terminal and unless ``HF_HUB_DISABLE_PROGRESS_BARS``."""
    if progress is not None:
        return bool(progress)
    if os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS", "").strip().lower() in _TRUE:
        return False
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


def file_url(repo_id: str, revision: str, name: str, endpoint: str | None = None) -> str:
    """``{endpoint}/{repo_id}/resolve/{revision}/{name}`` with every part validated and quoted."""
    safe_join(".", name)  # refuse traversal before it reaches a URL
    return (
        f"{hub_endpoint(endpoint)}/{check_repo_id(repo_id)}/resolve/"
        f"{quote(check_revision(revision), safe='')}/{quote(name, safe='/')}"
    )


TOKEN_ENV = "HF_TOKEN"


def _session(*, hub: bool = False) -> requests.Session:
    """A session with our User-Agent; for the Hub (``hub=True``) also ``$HF_TOKEN`` as a Bearer token."""
    session = requests.Session()
    session.headers["User-Agent"] = f"onespeech/{__version__} python-requests/{requests.__version__}"
    token = os.environ.get(TOKEN_ENV, "").strip() if hub else ""
    if token:
        session.headers["Authorization"] = f"Bearer {token}"
    return session


# -- one file -------------------------------------------------------------------
class _Retry(Exception):
    """An attempt failed in a way another attempt may fix."""


@dataclass
class _Clock:
    """The deadlines of one file's download (all attempts) and its cancellation signal."""

    url: str
    options: FetchOptions
    cancel: Cancel
    deadline: float | None

    def check(self) -> None:
        if is_cancelled(self.cancel):
            raise OperationCancelledError(f"the download of {self.url} was cancelled by the caller's signal")
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise DownloadError(
                f"downloading {self.url} did not complete within total_timeout_s={self.options.total_timeout_s:g} s"
            )


def _hash_prefix(path: Path, n_bytes: int) -> hashlib._Hash:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        remaining = n_bytes
        while remaining and (block := f.read(min(_CHUNK, remaining))):
            digest.update(block)
            remaining -= len(block)
    return digest


def unreachable_reason(exc: BaseException) -> str | None:
    """Why the host could not be reached at all (name not resolved, connection refused, no
    route), or None for failures that may pass (timeouts, dropped connections, HTTP errors)."""
    if not isinstance(exc, requests.ConnectionError) or isinstance(exc, requests.Timeout):
        return None
    cause = exc.args[0] if exc.args else None
    reason = getattr(cause, "reason", cause)
    if isinstance(reason, urllib3.exceptions.NewConnectionError):
        return str(reason).split(": ", 1)[-1]  # drop the "HTTPConnection(host=..., port=...)" prefix
    return None


def _describe(exc: BaseException | None, options: FetchOptions) -> str:
    if isinstance(exc, (requests.Timeout, urllib3.exceptions.TimeoutError)):
        return (
            f"timed out (connect timeout {options.connect_timeout_s:g} s, "
            f"read timeout {options.read_timeout_s:g} s): {exc}"
        )
    return str(exc) or type(exc).__name__


def _blocks(resp: requests.Response, clock: _Clock) -> Iterator[bytes]:
    """The body in blocks as they arrive (not waiting for a full block: a slow server
    must not hide a stall or a cancellation for long), checking the clock between them."""
    read = getattr(resp.raw, "read1", None) or resp.raw.read
    options = clock.options
    window_start, window_bytes = time.monotonic(), 0
    while True:
        clock.check()
        block = read(_CHUNK)
        if not block:
            return
        now = time.monotonic()
        window_bytes += len(block)
        if window_bytes >= options.stall_bytes:
            window_start, window_bytes = now, 0
        elif now - window_start > options.stall_timeout_s:
            raise _Retry(
                f"{clock.url} stalled: {window_bytes} bytes in {now - window_start:.1f} s, less than "
                f"stall_bytes={options.stall_bytes} within stall_timeout_s={options.stall_timeout_s:g} s"
            )
        yield block


def _attempt(
    session: requests.Session, part: Path, pin: FileDigest, clock: _Clock, bar: tqdm
) -> hashlib._Hash | None:
    """One GET (ranged if ``part`` holds a prefix). Returns the digest of ``part`` when the
    response ended cleanly, None when the server says the range is past the end (416)."""
    url, options = clock.url, clock.options
    offset = part.stat().st_size if part.exists() else 0
    if offset > pin.size:  # longer than the pin can ever be: start over
        part.unlink()
        offset = 0
    # identity encoding: Range offsets must count the file's bytes, not gzip's
    headers = {"Accept-Encoding": "identity", **({"Range": f"bytes={offset}-"} if offset else {})}
    timeout = (options.connect_timeout_s, options.read_timeout_s)
    with session.get(url, stream=True, timeout=timeout, headers=headers) as resp:
        if resp.status_code == 416 and offset:
            return None
        if resp.status_code in (404, 410):
            raise RemoteFileNotFoundError(
                f"{url} answered HTTP {resp.status_code}: check the endpoint (HF_ENDPOINT), "
                "repository, revision and file name"
            )
        if resp.status_code in _RETRY_STATUS:
            raise _Retry(f"HTTP {resp.status_code} from {url}")
        if resp.status_code not in (200, 206):
            raise DownloadError(f"{url} answered HTTP {resp.status_code} {resp.reason}; not retrying")
        if resp.status_code == 206:
            start = resp.headers.get("Content-Range", "").removeprefix("bytes ").split("-")[0]
            if start != str(offset):
                raise _Retry(f"server sent range {resp.headers.get('Content-Range')!r} for bytes={offset}-")
        else:
            offset = 0  # no range support: the whole body follows
        digest = _hash_prefix(part, offset) if offset else hashlib.sha256()
        bar.reset(total=pin.size)
        bar.update(offset)
        written = offset
        with open(part, "r+b" if offset else "wb") as f:
            f.seek(offset)
            f.truncate()
            for block in _blocks(resp, clock):
                written += len(block)
                if written > pin.size:  # never fill the disk with a file larger than its pin
                    raise CorruptDownloadError(part.with_suffix(""), f"{url} sent more than the pinned {pin.size} bytes")
                f.write(block)
                digest.update(block)
                bar.update(len(block))
            f.flush()
            os.fsync(f.fileno())
    if written < pin.size:
        raise _Retry(f"{url} ended after {written} of {pin.size} bytes")
    return digest


def fetch_file(
    url: str,
    dest: str | os.PathLike[str],
    pin: FileDigest,
    *,
    options: FetchOptions = FetchOptions(),
    session: requests.Session | None = None,
    cancel: Cancel = None,
) -> Path:
    """Download ``url`` to ``dest`` and verify it against ``pin``.

    Bytes go to ``dest.part`` (resumed if present); after the size and SHA-256 match,
    it is renamed to ``dest``. Connection errors, timeouts, stalls, HTTP 429/5xx and
    short bodies are retried ``options.retries`` times with exponential backoff, each
    retry resuming where the last stopped.

    Raises
    ------
    RemoteFileNotFoundError
        HTTP 404/410 (not retried).
    DownloadError
        Any other failure after the retries, or ``options.total_timeout_s`` passed;
        the ``.part`` file is kept for resuming.
    OperationCancelledError
        ``cancel`` was set; the ``.part`` file is kept for resuming.
    CorruptDownloadError
        The complete download does not match ``pin``; the ``.part`` file is discarded.
    """
    check_cancel(cancel)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    total = options.total_timeout_s
    clock = _Clock(url, options, cancel, time.monotonic() + total if total is not None else None)
    own_session = session is None
    session = session or _session()
    bar = tqdm(
        total=pin.size, unit="B", unit_scale=True, unit_divisor=1024, desc=dest.name,
        disable=not progress_enabled(options.progress), leave=False,
    )  # fmt: skip
    stale = part.is_file() and part.stat().st_size == pin.size  # complete, yet not renamed: unverified
    try:
        digest = _download(session, part, pin, clock, bar)
        if digest is None and stale and sha256_file(part) != pin:
            # a complete .part left by an earlier run that does not match: nothing was
            # downloaded now, so discard it and download once afresh
            part.unlink()
            digest = _download(session, part, pin, clock, bar)
    except CorruptDownloadError:
        part.unlink(missing_ok=True)
        raise
    finally:
        bar.close()
        if own_session:
            session.close()
    actual = digest.hexdigest() if digest is not None else sha256_file(part).sha256
    size = part.stat().st_size
    if size != pin.size or actual != pin.sha256:
        part.unlink(missing_ok=True)
        what = f"{size} bytes" if size != pin.size else f"SHA-256 {actual}"
        expected = f"{pin.size} bytes" if size != pin.size else f"SHA-256 {pin.sha256}"
        raise CorruptDownloadError(dest, f"the bytes downloaded from {url} have {what}, the pin says {expected}")
    os.replace(part, dest)
    return dest


_RETRIED = (
    _Retry,
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
    urllib3.exceptions.HTTPError,  # raised by the raw body reads
)


def _download(
    session: requests.Session, part: Path, pin: FileDigest, clock: _Clock, bar: tqdm
) -> hashlib._Hash | None:
    options = clock.options
    last: BaseException | None = None
    for attempt in range(options.retries + 1):
        if attempt:
            pause = min(options.backoff_s * 2 ** (attempt - 1), 30.0)
            end = time.monotonic() + pause
            while (left := end - time.monotonic()) > 0:  # cancel and deadline apply while waiting too
                clock.check()
                time.sleep(min(left, 0.1))
        clock.check()
        try:
            return _attempt(session, part, pin, clock, bar)
        except _RETRIED as e:
            last = e
            reason = unreachable_reason(e)
            if attempt == 0 and reason is not None:  # never reached: no network, wrong host or port
                host = urlsplit(clock.url).netloc
                raise DownloadError(
                    f"cannot connect to {host} to download {clock.url}: {reason} (not retried: the host "
                    "cannot be reached at all)"
                ) from e
    kept = f"; {part.stat().st_size} bytes kept in {part} to resume" if part.exists() else ""
    raise DownloadError(
        f"downloading {clock.url} failed after {options.retries + 1} attempts: {_describe(last, options)}{kept}"
    ) from last


# -- a repository's files ---------------------------------------------------------
def missing_files(directory: str | os.PathLike[str], files: Mapping[str, FileDigest]) -> list[str]:
    """Names in ``files`` with no file (of any content) in ``directory``."""
    return [name for name in files if not safe_join(directory, name).is_file()]


def fetch_files(
    repo_id: str,
    revision: str,
    files: Mapping[str, FileDigest],
    directory: str | os.PathLike[str],
    *,
    options: FetchOptions = FetchOptions(),
    cancel: Cancel = None,
) -> dict[str, Path]:
    """Make ``directory`` hold every file in ``files`` (name -> pin), verified.

    Files already present are verified (digests once per file, see
    :func:`onespeech.kernels.store.verify_files`); missing ones are downloaded from
    ``file_url(repo_id, revision, name)``. All names are validated first, so a bad name
    fails before any request.

    Raises
    ------
    UnsafeFileNameError
        A name could escape ``directory``.
    OfflineModeError
        Offline mode and files are missing (all of them are named).
    ModelIntegrityError
        A present file does not match its pin (names the file to remove); a downloaded
        one raises ``CorruptDownloadError`` (discarded, load again to retry).
    DownloadError
        A download failed.
    OperationCancelledError
        ``cancel`` was set.
    """
    directory = Path(directory)
    check_repo_id(repo_id)
    check_revision(revision)
    paths = {name: safe_join(directory, name) for name in files}
    missing = missing_files(directory, files)
    if missing and offline_mode(options.offline):
        raise OfflineModeError(
            f"offline mode (ONESPEECH_OFFLINE / HF_HUB_OFFLINE) is on and {directory} lacks "
            f"{len(missing)} file(s) of {repo_id}@{revision}: {', '.join(missing)}; "
            "load the model once while online (it fetches them) or copy them there"
        )
    present = {name: pin for name, pin in files.items() if name not in missing}
    verify_files(directory, present, digests="once", what="publisher file")
    if missing:
        with _session(hub=True) as session:
            for name in missing:
                url = file_url(repo_id, revision, name, options.endpoint)
                fetch_file(url, paths[name], files[name], options=options, session=session, cancel=cancel)
                record_verified(directory, {name: files[name]})
    return paths
