"""Hostile servers: corrupt bytes, stale partial files, trickling and stalling bodies, cancel.

Every case talks real HTTP to 127.0.0.1, downloads at most a few hundred KiB and
asserts its own deadline (a case that hangs is the bug these tests exist for).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from onespeech.kernels.errors import CorruptDownloadError
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


FETCH = """
import threading
from pathlib import Path
from onespeech.kernels.fetch import FetchOptions, fetch_file
from onespeech.kernels.store import FileDigest

cancel = None
if args["cancel_after_s"] is not None:
    cancel = threading.Event()
    threading.Timer(args["cancel_after_s"], cancel.set).start()
options = FetchOptions(progress=False, backoff_s=0.0, retries=0, read_timeout_s=5.0, **args["options"])
fetch_file(args["url"], Path(args["dest"]), FileDigest(*args["pin"]), options=options, cancel=cancel)
"""


def fetch_bounded(run_case, served, tmp_path: Path, options: dict, cancel_after_s: float | None = None):
    """The fetch in its own process, capped at 20 s of wall clock: a download that never ends
    fails the test instead of hanging the suite."""
    _, url, pin = served
    args = {"url": url, "dest": str(tmp_path / NAME), "pin": [pin.size, pin.sha256], "options": options,
            "cancel_after_s": cancel_after_s}  # fmt: skip
    return run_case(FETCH, args=args, memory_mb=1024, timeout_s=20)


def test_trickling_server_is_timed_out_by_the_stall_deadline(run_case, served, tmp_path: Path) -> None:
    server, _, _ = served
    server.misbehave(NAME, trickle_s=0.5)  # 1 KiB every 0.5 s = 2 KiB/s, never silent for long
    result = fetch_bounded(run_case, served, tmp_path, {"stall_timeout_s": 1.0, "stall_bytes": 64 * 1024})
    result.expect_error("DownloadError", match="stalled")


def test_total_deadline_bounds_a_slow_download(run_case, served, tmp_path: Path) -> None:
    server, _, _ = served
    server.misbehave(NAME, trickle_s=0.05)  # 20 KiB/s: passes the stall check, needs ~13 s in all
    result = fetch_bounded(run_case, served, tmp_path, {"stall_bytes": 1024, "total_timeout_s": 1.0})
    result.expect_error("DownloadError", match="total_timeout_s=1")
    assert (tmp_path / (NAME + ".part")).exists()  # kept: the next call resumes


def test_cancel_stops_a_download_between_blocks(run_case, served, tmp_path: Path) -> None:
    server, _, _ = served
    server.misbehave(NAME, trickle_s=0.05)
    result = fetch_bounded(run_case, served, tmp_path, {"stall_bytes": 1024}, cancel_after_s=0.5)
    result.expect_error("OperationCancelledError", match="cancelled")


def test_cancel_must_be_a_signal(served, tmp_path: Path) -> None:
    _, url, pin = served
    with pytest.raises(TypeError, match="cancel=True"):
        fetch_file(url, tmp_path / NAME, pin, options=quick(), cancel=True)  # type: ignore[arg-type]


def test_quick_start_without_network_fails_fast_naming_the_ways_out(  # type: ignore[no-untyped-def]
    clips, tmp_path: Path, monkeypatch, capsys
) -> None:
    """The README's ``onespeech transcribe jfk.flac`` on a machine that cannot reach the Hub:
    one message, in well under the ~32 s the retries once took, saying what to do."""
    import socket
    import time

    from onespeech.speech.cli import main

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{s.getsockname()[1]}"
    home, hf_cache = tmp_path / "home", tmp_path / "hf"
    monkeypatch.setenv("ONESPEECH_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_cache))
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    for var in ("ONESPEECH_OFFLINE", "HF_HUB_OFFLINE", "ONESPEECH_CATALOG_DIR", "ONESPEECH_VAD_MODEL"):
        monkeypatch.delenv(var, raising=False)
    start = time.monotonic()
    code = main(["transcribe", str(clips["flac"]), "-o", str(tmp_path / "out"), "-q"])
    elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    assert code != 0 and elapsed < 5.0, (elapsed, err)
    assert "Connection refused" in err
    for way_out in ("HF_ENDPOINT", "ONESPEECH_OFFLINE=1", "-m DIR", "Hugging Face cache",
                    str(hf_cache / "models--Qwen--Qwen3-ASR-0.6B" / "snapshots"), str(home / "models")):
        assert way_out in err, (way_out, err)
