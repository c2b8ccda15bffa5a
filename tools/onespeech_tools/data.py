"""Where the shared real data lives (tokenizer files, configs, clips, small models).

The data stays outside git. It is ``ONESPEECH_TEST_DATA`` when set, else a
``shared/data`` folder beside the checkout. "Beside the checkout" is looked up
from the working directory upwards and from this file upwards, because this
module runs both from the checkout and installed into a tox env's site-packages
(where its own location says nothing about the checkout).
"""

from __future__ import annotations

import os
from pathlib import Path

MARKER = "SOURCES.md"
NEEDS = "needs shared/data (set ONESPEECH_TEST_DATA or place shared/ beside the checkout)"


class SharedDataNotFound(FileNotFoundError):
    """The shared real-data folder is not on this machine."""


def find_shared_data() -> Path | None:
    """The shared data folder, or None when this machine has none."""
    env = os.environ.get("ONESPEECH_TEST_DATA")
    if env:
        # An explicit setting that is wrong must not silently fall back to another copy.
        return Path(env) if (Path(env) / MARKER).is_file() else None
    starts = (Path.cwd().resolve(), Path(__file__).resolve().parent)
    for start in starts:
        for folder in (start, *start.parents):
            candidate = folder / "shared" / "data"
            if (candidate / MARKER).is_file():
                return candidate
    return None


def shared_data_dir() -> Path:
    """The shared data folder; raises :class:`SharedDataNotFound` naming what to set."""
    path = find_shared_data()
    if path is None:
        env = os.environ.get("ONESPEECH_TEST_DATA")
        where = f"ONESPEECH_TEST_DATA={env} has no {MARKER}" if env else "no shared/data above the working directory"
        raise SharedDataNotFound(f"{NEEDS}: {where}")
    return path


# Exit status of an oracle or benchmark that had nothing to run on (automake's "skipped").
SKIP_STATUS = 77


def shared_data_or_skip(what: str) -> Path:
    """For scripts: the shared data folder, or exit with :data:`SKIP_STATUS` saying why.

    A clone without the data runs the suite with the data-bound tests skipped; the
    scripts that record reference observations skip the same way instead of failing.
    """
    path = find_shared_data()
    if path is None:
        print(f"{what} skipped: {NEEDS}", flush=True)
        raise SystemExit(SKIP_STATUS)
    return path
