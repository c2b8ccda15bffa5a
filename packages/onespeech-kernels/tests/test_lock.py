"""DirectoryLock: one converter per model directory, stale locks taken over."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from onespeech.kernels.errors import ConversionInProgressError
from onespeech.kernels.lock import LOCK_NAME, DirectoryLock, lock_status, read_holder

HOLDER = textwrap.dedent(
    """
    import sys
    from onespeech.kernels.lock import DirectoryLock
    with DirectoryLock(sys.argv[1]):
        print("locked", flush=True)
        sys.stdin.read()  # hold until the parent closes our stdin (or kills us)
    """
)


def start_holder(directory: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(directory)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_lock_acquire_release(tmp_path):
    with DirectoryLock(tmp_path) as lock:
        assert lock.held
        holder = read_holder(tmp_path / LOCK_NAME)
        assert holder.pid == os.getpid() and holder.host == socket.gethostname()
        assert lock_status(tmp_path).startswith("held by pid")
    assert not (tmp_path / LOCK_NAME).exists()
    assert lock_status(tmp_path) == "free"


def test_second_process_is_refused_with_retry_message(tmp_path):
    proc = start_holder(tmp_path)
    try:
        with pytest.raises(ConversionInProgressError, match="retry after the other process completes") as exc:
            DirectoryLock(tmp_path).acquire()
        assert isinstance(exc.value, OSError)
        assert f"pid {proc.pid}" in str(exc.value)
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    with DirectoryLock(tmp_path) as lock:  # free again once the holder is done
        assert lock.broke_stale is None


def test_lock_of_killed_holder_is_taken_over(tmp_path):
    proc = start_holder(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert (tmp_path / LOCK_NAME).exists()  # left behind by the dead process
    assert lock_status(tmp_path).startswith("stale")
    with DirectoryLock(tmp_path) as lock:
        assert lock.broke_stale is not None and lock.broke_stale.pid == proc.pid


def test_lock_file_with_dead_pid_is_stale(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    record = {"pid": dead.pid, "host": socket.gethostname(), "started": time.time() - 60}
    (tmp_path / LOCK_NAME).write_text(json.dumps(record))
    with DirectoryLock(tmp_path) as lock:
        assert lock.broke_stale.pid == dead.pid
        assert read_holder(tmp_path / LOCK_NAME).pid == os.getpid()


def test_same_object_cannot_acquire_twice(tmp_path):
    lock = DirectoryLock(tmp_path).acquire()
    try:
        with pytest.raises(RuntimeError, match="already held"):
            lock.acquire()
        with pytest.raises(ConversionInProgressError):  # a second lock in the same process too
            DirectoryLock(tmp_path).acquire()
    finally:
        lock.release()
