"""Inter-process lock for one model cache directory.

Fetching, verifying and converting a model directory are done by one process at a
time. A second process does not wait: it gets :class:`ConversionInProgressError`
(an ``OSError``) telling it to retry once the holder finishes.

The lock is an OS advisory lock (``fcntl.flock`` on POSIX, ``msvcrt.locking`` on
Windows) on a small file that also records the holder's pid, host and start time
for the error message. The kernel drops an advisory lock when its holder dies, so a
crashed converter never wedges the cache: a lock file left behind by a dead pid is
stale, and the next process simply takes it over (the pid recorded in it is only
used to say so). Where no OS lock is available, the pid in the file decides: a lock
whose holder pid is dead on this host is broken.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from onespeech.kernels.errors import ConversionInProgressError
from onespeech.kernels.jsonfile import loads_json

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]
try:  # Windows
    import msvcrt
except ImportError:
    msvcrt = None  # type: ignore[assignment]

LOCK_NAME = ".lock"


@dataclass(frozen=True)
class LockHolder:
    """Who holds (or last held) a lock, as recorded in the lock file."""

    pid: int
    host: str
    started: float  # seconds since the epoch

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return f"pid {self.pid} on {self.host}, since {when}"


def read_holder(path: Path) -> LockHolder | None:
    """The holder recorded in lock file ``path``, or None if absent or unreadable."""
    try:
        data = loads_json(Path(path).read_text(encoding="utf-8"))
        return LockHolder(int(data["pid"]), str(data["host"]), float(data["started"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists on this host."""
    if pid <= 0:
        return False
    if os.name == "nt":  # pragma: no cover - Windows
        import ctypes

        handle = ctypes.windll.kernel32.OpenProcess(0x1000, False, pid)  # type: ignore[attr-defined]  # QUERY_LIMITED_INFORMATION
        if not handle:
            return False
        ctypes.windll.kernel32.CloseHandle(handle)  # type: ignore[attr-defined]
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def is_stale(holder: LockHolder | None) -> bool:
    """A recorded holder is stale when it ran on this host and its pid is gone."""
    return holder is not None and holder.host == socket.gethostname() and not pid_alive(holder.pid)


class DirectoryLock:
    """Exclusive, non-blocking lock on ``directory`` (file ``directory/.lock``).

    Use as a context manager::

        with DirectoryLock(model_dir):
            ...  # fetch, verify, convert, install

    Raises
    ------
    ConversionInProgressError
        If another live process holds the lock.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self.broke_stale: LockHolder | None = None  # set when a dead holder's lock was taken over
        self._fd: int | None = None

    # -- acquire / release -------------------------------------------------
    def acquire(self) -> DirectoryLock:
        if self._fd is not None:
            raise RuntimeError(f"lock {self.path} is already held by this object")
        self.directory.mkdir(parents=True, exist_ok=True)
        for _ in range(10):  # the file can be replaced under us; see _same_file
            previous = read_holder(self.path)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            if not self._os_lock(fd, previous):
                os.close(fd)
                self._refuse(previous)
            if not self._same_file(fd):
                os.close(fd)  # released and unlinked by its holder meanwhile; take the new file
                continue
            self._fd = fd
            if previous is not None and previous.pid != os.getpid() and is_stale(previous):
                self.broke_stale = previous
            self._write_holder(fd)
            return self
        raise ConversionInProgressError(self.directory, "the lock file kept being replaced")

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            # unlink while still holding the lock, so nobody can take an orphaned inode
            if self._same_file(fd):
                os.unlink(self.path)
        except OSError:
            pass
        finally:
            self._os_unlock(fd)
            os.close(fd)

    def __enter__(self) -> DirectoryLock:
        return self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    @property
    def held(self) -> bool:
        return self._fd is not None

    # -- helpers -----------------------------------------------------------
    def _refuse(self, holder: LockHolder | None) -> None:
        raise ConversionInProgressError(self.directory, holder.describe() if holder else None)

    def _os_lock(self, fd: int, previous: LockHolder | None) -> bool:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True
        if msvcrt is not None:  # pragma: no cover - Windows
            try:
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            except OSError:
                return False
            return True
        # pragma: no cover - no OS lock: the recorded pid decides
        return previous is None or previous.pid == os.getpid() or is_stale(previous)

    def _os_unlock(self, fd: int) -> None:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
        elif msvcrt is not None:  # pragma: no cover - Windows
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

    def _same_file(self, fd: int) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)

    def _write_holder(self, fd: int) -> None:
        record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        data = json.dumps(record).encode("utf-8")
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, data)


def lock_status(directory: str | os.PathLike[str]) -> str:
    """One word for ``probe``: "free", "held (pid ...)" or "stale (pid ... is gone)"."""
    path = Path(directory) / LOCK_NAME
    if not path.exists():
        return "free"
    holder = read_holder(path)
    if fcntl is not None:
        fd = os.open(path, os.O_RDONLY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return f"held by {holder.describe() if holder else 'another process'}"
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        return f"stale (left by {holder.describe()}; taken over by the next converter)" if holder else "free"
    if holder is not None and is_stale(holder):  # pragma: no cover
        return f"stale (left by {holder.describe()})"
    return f"held by {holder.describe()}" if holder else "free"  # pragma: no cover
