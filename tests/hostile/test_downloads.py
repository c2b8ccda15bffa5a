"""Hostile servers: corrupt bytes, stale partial files, trickling and stalling bodies, cancel.

Every case talks real HTTP to 127.0.0.1, downloads at most a few hundred KiB and
asserts its own deadline (a case that hangs is the bug these tests exist for).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from onespeech.kernels.errors import CorruptDownloadError, DownloadError, OperationCancelledError
from onespeech.kernels.fetch import FetchOptions, fetch_file, file_url
from onespeech.kernels.store import sha256_file

REPO, REV, NAME = "Test/hostile", "2" * 40, "weights.bin"
SIZE = 256 * 1024


@pytest.fixture()
def served(tmp_path: Path, hub_server_cls):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / NAME).write_bytes(bytes(range(256)) * (SIZE // 256))
    server = hub_server_cls().start()
    server.add_repo(REPO, REV, repo)
    yield server, file_url(REPO, REV, NAME, server.endpoint), sha256_file(repo / NAME)
    server.stop()


def quick(**kwargs) -> FetchOptions:
    return FetchOptions(progress=False, backoff_s=0.0, **{"retries": 0, "read_timeout_s": 5.0, **kwargs})


def test_corrupt_download_is_discarded_and_the_retry_downloads_afresh(served, tmp_path: Path) -> None:
    server, url, pin = served
    dest = tmp_path / "out" / NAME
    server.misbehave(NAME, corrupt=True)
    with pytest.raises(CorruptDownloadError, match="discarded") as exc:
        fetch_file(url, dest, pin, options=quick())
    assert exc.value.path == str(dest)
    assert not dest.with_name(NAME + ".part").exists() and not dest.exists()
    server.behaviour.clear()
    before = len(server.requests)
    fetch_file(url, dest, pin, options=quick())
    assert sha256_file(dest) == pin
    assert [r.range for r in server.requests[before:]] == [None]  # a fresh download, not a resume


def test_a_stale_complete_part_file_is_replaced_not_reported_as_a_download(served, tmp_path: Path) -> None:
    """A complete but wrong ``.part`` (left by an older version or a crash) once blocked every
    retry with a message claiming a download had happened; now it is discarded and fetched."""
    server, url, pin = served
    dest = tmp_path / NAME
    dest.with_name(NAME + ".part").write_bytes(b"\0" * SIZE)
    fetch_file(url, dest, pin, options=quick())
    assert sha256_file(dest) == pin
    assert [r.range for r in server.requests] == [f"bytes={SIZE}-", None]


def test_trickling_server_is_timed_out_by_the_stall_deadline(served, tmp_path: Path) -> None:
    server, url, pin = served
    server.misbehave(NAME, trickle_s=0.5)  # 1 KiB every 0.5 s = 2 KiB/s, never silent for long
    start = time.monotonic()
    with pytest.raises(DownloadError, match="stalled"):
        fetch_file(url, tmp_path / NAME, pin, options=quick(stall_timeout_s=1.0, stall_bytes=64 * 1024))
    assert time.monotonic() - start < 10


def test_total_deadline_bounds_a_slow_download(served, tmp_path: Path) -> None:
    server, url, pin = served
    server.misbehave(NAME, trickle_s=0.05)  # 20 KiB/s: passes the stall check, needs ~13 s in all
    start = time.monotonic()
    with pytest.raises(DownloadError, match="total_timeout_s=1"):
        fetch_file(url, tmp_path / NAME, pin, options=quick(stall_bytes=1024, total_timeout_s=1.0))
    assert time.monotonic() - start < 10
    assert (tmp_path / (NAME + ".part")).exists()  # kept: the next call resumes


def test_cancel_stops_a_download_between_blocks(served, tmp_path: Path) -> None:
    server, url, pin = served
    server.misbehave(NAME, trickle_s=0.05)
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    start = time.monotonic()
    with pytest.raises(OperationCancelledError, match="cancelled"):
        fetch_file(url, tmp_path / NAME, pin, options=quick(stall_bytes=1024), cancel=cancel)
    assert time.monotonic() - start < 5


def test_cancel_must_be_a_signal(served, tmp_path: Path) -> None:
    _, url, pin = served
    with pytest.raises(TypeError, match="cancel=True"):
        fetch_file(url, tmp_path / NAME, pin, options=quick(), cancel=True)  # type: ignore[arg-type]
