"""fetch.py against a real HTTP server on 127.0.0.1 (nothing mocked below requests)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from onespeech.kernels.errors import ModelIntegrityError
from onespeech.kernels.fetch import (
    DownloadError,
    FetchOptions,
    OfflineModeError,
    RemoteFileNotFoundError,
    UnsafeFileNameError,
    fetch_file,
    fetch_files,
    file_url,
    hub_endpoint,
    offline_mode,
)
from onespeech.kernels.store import FileDigest, sha256_file

REPO, REV = "Org/tiny-model", "0123456789abcdef0123456789abcdef01234567"
FAST = dict(retries=2, backoff_s=0.01, connect_timeout_s=5.0, read_timeout_s=5.0, progress=False)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    """The caller's HF_ENDPOINT / offline settings must not leak into these tests."""
    for var in ("ONESPEECH_OFFLINE", "HF_HUB_OFFLINE", "HF_ENDPOINT", "HF_HUB_DISABLE_PROGRESS_BARS"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture()
def repo(tmp_path: Path) -> tuple[Path, dict[str, FileDigest]]:
    """A publisher-layout directory: a 300 KB weight file, a config, a nested file."""
    root = tmp_path / "publisher"
    (root / "sub").mkdir(parents=True)
    (root / "model.safetensors").write_bytes(os.urandom(300_000))
    (root / "config.json").write_text('{"model_type": "tiny"}\n')
    (root / "sub" / "extra.txt").write_text("nested file\n")
    pins = {n: sha256_file(root / n) for n in ("model.safetensors", "config.json", "sub/extra.txt")}
    return root, pins


@pytest.fixture()
def served(hub_server, repo):
    root, pins = repo
    hub_server.add_repo(REPO, REV, root)
    return hub_server, root, pins


def options(server, **kw) -> FetchOptions:
    return FetchOptions(endpoint=server.endpoint, **{**FAST, **kw})


def test_fetch_all_files_success(served, tmp_path):
    server, root, pins = served
    dest = tmp_path / "cache"
    paths = fetch_files(REPO, REV, pins, dest, options=options(server))
    for name in pins:
        assert paths[name].read_bytes() == (root / name).read_bytes()
    assert not list(dest.rglob("*.part"))
    # second call: all present and verified, no request at all
    n = len(server.requests)
    fetch_files(REPO, REV, pins, dest, options=options(server))
    assert len(server.requests) == n


def test_url_layout_and_hf_endpoint(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "https://mirror.example/hf/")
    assert hub_endpoint() == "https://mirror.example/hf"
    assert file_url("Qwen/Qwen3-ASR-0.6B", "abc123", "sub/a b.json") == (
        "https://mirror.example/hf/Qwen/Qwen3-ASR-0.6B/resolve/abc123/sub/a%20b.json"
    )
    monkeypatch.delenv("HF_ENDPOINT")
    assert hub_endpoint() == "https://huggingface.co"


def test_hf_endpoint_from_environment_is_used(served, tmp_path, monkeypatch):
    server, _, pins = served
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    fetch_files(REPO, REV, pins, tmp_path / "c", options=FetchOptions(**FAST))
    assert server.requests_for("config.json")


def test_resume_after_dropped_connection(served, tmp_path):
    server, root, pins = served
    server.misbehave("model.safetensors", drop_after=100_000)
    dest = tmp_path / "c"
    fetch_files(REPO, REV, pins, dest, options=options(server))
    assert (dest / "model.safetensors").read_bytes() == (root / "model.safetensors").read_bytes()
    ranges = [r.range for r in server.requests_for("model.safetensors")]
    assert len(ranges) == 2 and ranges[0] is None
    # resumed from what was written (the block being read when the socket closed is lost)
    assert 0 < int(ranges[1].removeprefix("bytes=").rstrip("-")) <= 100_000


def test_resume_from_part_left_by_earlier_run(served, tmp_path):
    server, root, pins = served
    dest = tmp_path / "c"
    dest.mkdir()
    (dest / "model.safetensors.part").write_bytes((root / "model.safetensors").read_bytes()[:12345])
    fetch_files(REPO, REV, pins, dest, options=options(server))
    assert [r.range for r in server.requests_for("model.safetensors")] == ["bytes=12345-"]
    assert sha256_file(dest / "model.safetensors") == pins["model.safetensors"]


def test_server_without_range_support_restarts(served, tmp_path):
    server, root, pins = served
    server.misbehave("model.safetensors", drop_after=50_000, ignore_range=True)
    dest = tmp_path / "c"
    fetch_files(REPO, REV, pins, dest, options=options(server))
    assert (dest / "model.safetensors").read_bytes() == (root / "model.safetensors").read_bytes()


def test_dropped_connection_every_time_fails_and_keeps_part(served, tmp_path):
    server, _, pins = served
    server.misbehave("model.safetensors", drop_after=1000, drop_times=100, ignore_range=True)
    dest = tmp_path / "c"
    with pytest.raises(DownloadError, match="failed after 3 attempts") as exc:
        fetch_files(REPO, REV, pins, dest, options=options(server))
    assert "model.safetensors" in str(exc.value)
    assert (dest / "model.safetensors.part").exists() and not (dest / "model.safetensors").exists()


def test_corrupt_download_raises_integrity_error_naming_file(served, tmp_path):
    server, _, pins = served
    server.misbehave("model.safetensors", corrupt=True)
    dest = tmp_path / "c"
    with pytest.raises(ModelIntegrityError, match="SHA-256") as exc:
        fetch_files(REPO, REV, pins, dest, options=options(server))
    assert exc.value.path == str(dest / "model.safetensors")
    assert "were discarded" in str(exc.value)
    assert not (dest / "model.safetensors").exists()  # never under its final name
    assert not (dest / "model.safetensors.part").exists()  # discarded: it cannot block a retry
    # the mirror is fixed; the next call downloads afresh and succeeds
    server.behaviour.clear()
    fetch_files(REPO, REV, pins, dest, options=options(server))
    assert sha256_file(dest / "model.safetensors") == pins["model.safetensors"]


def test_truncated_download_raises_integrity_error(served, tmp_path):
    server, _, pins = served
    server.misbehave("model.safetensors", truncate_to=200_000)
    dest = tmp_path / "c"
    with pytest.raises(ModelIntegrityError, match="200000 bytes") as exc:
        fetch_files(REPO, REV, pins, dest, options=options(server))
    assert exc.value.path.endswith("model.safetensors") and not (dest / "model.safetensors.part").exists()
    # it asked for the rest once (the server had nothing more) before giving up
    assert [r.range for r in server.requests_for("model.safetensors")] == [None, "bytes=200000-"]


def test_cached_file_corrupted_on_disk_is_named_then_refetched(served, tmp_path):
    server, _, pins = served
    dest = tmp_path / "c"
    fetch_files(REPO, REV, pins, dest, options=options(server))
    target = dest / "model.safetensors"
    data = bytearray(target.read_bytes())
    data[10] ^= 1
    target.write_bytes(bytes(data))  # same size, new mtime: the stamp no longer vouches for it
    with pytest.raises(ModelIntegrityError, match="SHA-256") as exc:
        fetch_files(REPO, REV, pins, dest, options=options(server))
    assert exc.value.path == str(target)
    os.remove(exc.value.path)
    fetch_files(REPO, REV, pins, dest, options=options(server))
    assert sha256_file(target) == pins["model.safetensors"]


def test_cached_file_truncated_on_disk(served, tmp_path):
    server, _, pins = served
    dest = tmp_path / "c"
    fetch_files(REPO, REV, pins, dest, options=options(server))
    target = dest / "model.safetensors"
    with open(target, "r+b") as f:
        f.truncate(1000)
    with pytest.raises(ModelIntegrityError, match="1000 bytes, expected 300000"):
        fetch_files(REPO, REV, pins, dest, options=options(server))


def test_slow_server_times_out(served, tmp_path):
    server, _, pins = served
    server.misbehave("config.json", delay_s=1.5)
    with pytest.raises(DownloadError, match="timed out") as exc:
        fetch_files(REPO, REV, pins, tmp_path / "c", options=options(server, read_timeout_s=0.3, retries=1))
    assert "config.json" in str(exc.value)
    assert len(server.requests_for("config.json")) == 2  # first try + one retry


def test_stall_mid_body_times_out_then_resumes(served, tmp_path):
    server, root, pins = served
    # the first answer sends 70 kB, then goes silent for longer than the read timeout
    server.misbehave("model.safetensors", stall_after=70_000, stall_s=1.0)
    dest = tmp_path / "c"
    fetch_files(REPO, REV, pins, dest, options=options(server, read_timeout_s=0.2))
    assert (dest / "model.safetensors").read_bytes() == (root / "model.safetensors").read_bytes()
    ranges = [r.range for r in server.requests_for("model.safetensors")]
    assert ranges[0] is None and ranges[-1] is not None and ranges[-1].startswith("bytes=")


def test_slow_but_steady_server_succeeds(served, tmp_path):
    server, _, pins = served
    server.misbehave("sub/extra.txt", delay_s=0.2, trickle_s=0.05)
    fetch_files(REPO, REV, pins, tmp_path / "c", options=options(server, read_timeout_s=2.0))


def test_transient_503_is_retried(served, tmp_path):
    server, _, pins = served
    server.misbehave("config.json", status=503, status_times=2)
    fetch_files(REPO, REV, pins, tmp_path / "c", options=options(server))
    assert len(server.requests_for("config.json")) == 3


def test_404_is_not_retried_and_names_url(served, tmp_path):
    server, _, pins = served
    pins = {**pins, "missing.bin": FileDigest(3, "0" * 64)}
    with pytest.raises(RemoteFileNotFoundError, match="HTTP 404") as exc:
        fetch_files(REPO, REV, pins, tmp_path / "c", options=options(server))
    assert "missing.bin" in str(exc.value)
    assert len(server.requests_for("missing.bin")) == 1


def test_wrong_revision_is_404(served, tmp_path):
    server, _, pins = served
    with pytest.raises(RemoteFileNotFoundError):
        fetch_files(REPO, "f" * 40, pins, tmp_path / "c", options=options(server))


def test_offline_without_cache_names_missing_files(served, tmp_path, monkeypatch):
    server, _, pins = served
    monkeypatch.setenv("ONESPEECH_OFFLINE", "1")
    with pytest.raises(OfflineModeError) as exc:
        fetch_files(REPO, REV, pins, tmp_path / "c", options=options(server, offline=None))
    for name in pins:
        assert name in str(exc.value)
    assert server.requests == []


@pytest.mark.parametrize("var", ["ONESPEECH_OFFLINE", "HF_HUB_OFFLINE"])
def test_offline_with_cache_uses_it(served, tmp_path, monkeypatch, var):
    server, root, pins = served
    dest = tmp_path / "c"
    fetch_files(REPO, REV, pins, dest, options=options(server))
    n = len(server.requests)
    monkeypatch.setenv(var, "1")
    assert offline_mode()
    paths = fetch_files(REPO, REV, pins, dest, options=options(server, offline=None))
    assert len(server.requests) == n
    assert paths["config.json"].read_bytes() == (root / "config.json").read_bytes()


def test_offline_with_partial_cache_names_only_missing(served, tmp_path):
    server, _, pins = served
    dest = tmp_path / "c"
    fetch_files(REPO, REV, pins, dest, options=options(server))
    os.remove(dest / "sub" / "extra.txt")
    with pytest.raises(OfflineModeError, match=r"lacks 1 file\(s\).*sub/extra.txt"):
        fetch_files(REPO, REV, pins, dest, options=options(server, offline=True))


@pytest.mark.parametrize(
    "name", ["../evil.txt", "/etc/passwd", "sub/../../evil", "a\\b", "C:/x", "", "a//b", "./a", "a\x00b"]
)
def test_path_traversal_names_refused_before_any_request(served, tmp_path, name):
    server, _, pins = served
    with pytest.raises(UnsafeFileNameError):
        fetch_files(REPO, REV, {**pins, name: FileDigest(1, "0" * 64)}, tmp_path / "c", options=options(server))
    assert server.requests == []
    assert not (tmp_path / "evil.txt").exists()


def test_symlink_escape_refused(served, tmp_path):
    server, _, pins = served
    dest = tmp_path / "c"
    dest.mkdir()
    (tmp_path / "outside").mkdir()
    (dest / "sub").symlink_to(tmp_path / "outside")
    with pytest.raises(UnsafeFileNameError, match="outside"):
        fetch_files(REPO, REV, pins, dest, options=options(server))


def test_oversized_body_is_cut_off(served, tmp_path):
    server, root, _ = served
    url = file_url(REPO, REV, "model.safetensors", server.endpoint)
    with pytest.raises(ModelIntegrityError, match="more than the pinned 1000 bytes"):
        fetch_file(url, tmp_path / "m", FileDigest(1000, "0" * 64), options=options(server))
    assert not (tmp_path / "m.part").exists()


def test_bad_repo_and_revision_refused():
    with pytest.raises(ValueError, match="owner/name"):
        file_url("../x", "abc", "a")
    with pytest.raises(ValueError, match="revision"):
        file_url("a/b", "../x", "a")


def test_progress_bar_when_asked(served, tmp_path, capsys):
    server, _, pins = served
    fetch_files(REPO, REV, pins, tmp_path / "c", options=options(server, progress=True))
    assert "model.safetensors" in capsys.readouterr().err
    fetch_files(REPO, REV, pins, tmp_path / "d", options=options(server, progress=False))
    assert capsys.readouterr().err == ""


def test_connection_refused_fails_at_once_with_the_reason(tmp_path):
    """A host that cannot be reached is not slow: no ~30 s of backoff before saying so."""
    import socket
    import time

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    opts = FetchOptions(endpoint=f"http://127.0.0.1:{port}", progress=False)  # default retries and backoff
    start = time.monotonic()
    with pytest.raises(DownloadError, match=r"cannot connect to 127\.0\.0\.1:\d+ .*Connection refused.*not retried"):
        fetch_files(REPO, REV, {"config.json": FileDigest(3, "0" * 64)}, tmp_path / "c", options=opts)
    assert time.monotonic() - start < 2.0
    assert not (tmp_path / "c" / "config.json").exists()


def test_refused_after_the_server_answered_is_still_retried(served, tmp_path):
    """A server that answered once (HTTP 503) and then goes away may come back: that is retried."""
    import threading
    import time

    server, _, pins = served
    server.misbehave("config.json", status=503)

    def stop_after_first_request() -> None:
        while not server.requests:
            time.sleep(0.005)
        server.stop()

    watcher = threading.Thread(target=stop_after_first_request)
    watcher.start()
    opts = options(server, retries=2, backoff_s=0.2)
    with pytest.raises(DownloadError, match="failed after 3 attempts.*Connection refused"):
        fetch_files(REPO, REV, {"config.json": pins["config.json"]}, tmp_path / "c", options=opts)
    watcher.join()
