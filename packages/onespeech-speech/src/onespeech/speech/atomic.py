"""Files written whole or not at all: a temporary name beside the target, then a rename.

The temporary file is created with mode 0o666 and ``O_EXCL``, so the umask (and a
folder's default ACL) decides its mode as for any file a program creates:
``tempfile.mkstemp`` would make every output ``-rw-------``. An exception, a
``KeyboardInterrupt`` too, removes the temporary file, so an interrupted write
leaves the old file or none, never part of one. Every output and batch record
is written here.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

__all__ = ["check_writable", "write_atomic"]

TEMP_SUFFIX = ".part"
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def write_atomic(path: str | os.PathLike[str], content: str | Callable[[TextIO], None]) -> None:
    """Write ``content`` (text, or a function that writes to a text file) to ``path``, atomically.

    The folder is created if missing. The file is flushed to disk before the rename,
    so after a crash the name holds either the old file or the whole new one.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(target)
    created = False
    try:
        fd = os.open(tmp, _CREATE, 0o666)
        created = True
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as file:
            if callable(content):
                content(file)
            else:
                file.write(content)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, target)
    except BaseException:
        if created:
            tmp.unlink(missing_ok=True)
        raise


def check_writable(folder: str | os.PathLike[str]) -> None:
    """Create and remove a temporary file in ``folder`` as `write_atomic` would; raises its OSError.

    ``os.access`` is not enough: it says yes to root in an immutable folder and knows
    nothing of read-only mounts or quotas.
    """
    tmp = _temp_name(Path(folder) / "write-check")
    os.close(os.open(tmp, _CREATE, 0o666))
    tmp.unlink()


def _temp_name(target: Path) -> Path:
    # hidden, beside the target (a rename never crosses file systems), unique per call
    return target.with_name(f".{target.name}.{secrets.token_hex(6)}{TEMP_SUFFIX}")
