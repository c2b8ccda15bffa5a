"""Batch transcription: the local pool and Ray give what sequential transcribe gives,
resume after a killed worker and a killed driver, failures recorded per file.

Tiny ending checkpoints (tests/conftest.py) on real clips; each file takes about
a second, so these tests stay short.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from onespeech.speech import Document, Transcriber
from onespeech.speech.batch import transcribe_corpus
from onespeech.speech.batch.records import read_record, record_path

BUDGET = 256


@pytest.fixture(scope="module")
def corpus(clips: dict[str, Path], shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four short real clips in two folders, two with the same stem."""
    root = tmp_path_factory.mktemp("corpus")
    clips = {**clips, "pico": shared_data / "audio" / "picovoice_test.wav"}
    for rel, clip in (("a/jfk.flac", "flac"), ("a/libri.wav", "wav16"), ("b/jfk.wav", "wav44"), ("b/pico.wav", "pico")):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(clips[clip].read_bytes())
    return root


@pytest.fixture(scope="module")
def options(runtime_dirs, vad_path) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {"aligner": str(runtime_dirs.aligner), "max_new_tokens": BUDGET, "vad": str(vad_path), "language": "en"}


@pytest.fixture(scope="module")
def sequential(corpus: Path, runtime_dirs, options: dict[str, object]) -> dict[str, Document]:  # type: ignore[no-untyped-def]
    with Transcriber(str(runtime_dirs.asr), threads=1, progress=False, **options) as t:  # type: ignore[arg-type]
        return {p.relative_to(corpus).with_suffix("").as_posix(): t.transcribe(p) for p in sorted(corpus.rglob("*.*"))}


def _outputs(out: Path) -> dict[str, Document]:
    return {p.relative_to(out).with_suffix("").as_posix(): Document.from_dict(json.loads(p.read_text("utf-8")))
            for p in sorted(out.rglob("*.json")) if not p.name.startswith(".")}


def _mtimes(out: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in out.rglob("*")}


def test_local_pool_matches_sequential_and_reruns_skip(corpus, runtime_dirs, options, sequential, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    events: list[tuple[str, float, float]] = []
    report = transcribe_corpus([corpus], out, model=str(runtime_dirs.asr), formats=("json", "srt"), workers=2,
                               threads=1, progress=lambda *e: events.append(e), **options)
    assert report.ok and len(report.done) == 4 and not report.skipped
    assert _outputs(out) == sequential
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.srt")) == [
        "a/jfk.srt", "a/libri.srt", "b/jfk.srt", "b/pico.srt"]
    assert len(report.workers) == 2 and sum(w.files for w in report.workers.values()) == 4
    assert report.audio_seconds == pytest.approx(sum(d.duration for d in sequential.values()), rel=1e-3)
    assert events[-1][0] == "batch" and events[-1][1] == pytest.approx(events[-1][2])
    before = _mtimes(out)
    again = transcribe_corpus([corpus], out, model=str(runtime_dirs.asr), formats=("json", "srt"), workers=2,
                              threads=1, progress=False, **options)
    assert again.ok and not again.done and len(again.skipped) == 4
    assert _mtimes(out) == before  # finished outputs are not rewritten
    # other options decide other outputs: nothing is skipped
    third = transcribe_corpus([corpus / "a" / "jfk.flac"], out / "a", model=str(runtime_dirs.asr),
                              formats=("json", "srt"), workers=1, threads=1, progress=False,
                              **{**options, "max_new_tokens": BUDGET + 1})
    assert len(third.done) == 1


def test_corrupt_file_is_recorded_and_retry_failed_redoes_only_it(corpus, runtime_dirs, options, sequential,  # type: ignore[no-untyped-def]
                                                                  tmp_path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    good = inputs / "jfk.flac"
    good.write_bytes((corpus / "a" / "jfk.flac").read_bytes())
    bad = inputs / "broken.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEnot really audio" * 10)
    out = tmp_path / "out"
    run = dict(model=str(runtime_dirs.asr), workers=1, threads=1, progress=False, **options)
    report = transcribe_corpus([good, bad], out, **run)  # type: ignore[arg-type]
    assert report.done == [str(good)] and [f.path for f in report.failed] == [str(bad)]
    assert report.failed[0].error_type and report.failed[0].message and not report.ok
    record = read_record(record_path(out / "broken"))
    assert record is not None and record.status == "failed" and record.error is not None
    assert _outputs(out) == {"jfk": sequential["a/jfk"]}
    bad.write_bytes((corpus / "a" / "libri.wav").read_bytes())  # the user fixes the file
    retry = transcribe_corpus([good, bad], out, retry_failed=True, **run)  # type: ignore[arg-type]
    assert retry.done == [str(bad)] and retry.skipped == [str(good)] and retry.ok
    assert _outputs(out)["broken"] == sequential["a/libri"]


def test_manifest_with_bad_lines(corpus, runtime_dirs, options, sequential, tmp_path) -> None:  # type: ignore[no-untyped-def]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("\n".join([
        json.dumps({"path": str(corpus / "a" / "libri.wav"), "language": "en"}),
        "{broken",
        json.dumps({"path": str(tmp_path / "missing.wav")}),
    ]) + "\n", encoding="utf-8")
    report = transcribe_corpus([manifest], tmp_path / "out", model=str(runtime_dirs.asr), workers=1, threads=1,
                               progress=False, **options)
    assert len(report.done) == 1 and [e.line for e in report.manifest_errors] == [2, 3] and not report.ok
    assert _outputs(tmp_path / "out") == {"libri": sequential["a/libri"]}


def _maps(pid: int, directory: Path) -> bool:
    try:
        return str(directory) in Path(f"/proc/{pid}/maps").read_text()
    except OSError:  # gone, or no /proc on this system
        return False


def _worker_pids() -> set[int]:
    import multiprocessing

    return {p.pid for p in multiprocessing.active_children() if p.pid is not None}


def test_a_worker_killed_mid_file_is_replaced_and_its_file_redone(corpus, runtime_dirs, options, sequential,  # type: ignore[no-untyped-def]
                                                                   tmp_path) -> None:
    if not Path("/proc/self/maps").is_file():
        pytest.skip("needs /proc/<pid>/maps to see when a worker is inside its first file")
    killed: list[int] = []

    def kill_first_worker() -> None:
        # a worker loads the recognizer for its first file, so the moment its runtime files
        # are mapped it is inside that file; a fixed delay is too late on a fast machine
        deadline = time.monotonic() + 60
        while not killed and time.monotonic() < deadline:
            for pid in sorted(_worker_pids()):
                if _maps(pid, runtime_dirs.asr):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    break
            time.sleep(0.01)

    killer = threading.Thread(target=kill_first_worker)
    killer.start()
    report = transcribe_corpus([corpus / "b"], tmp_path / "out", model=str(runtime_dirs.asr), workers=1, threads=1,
                               progress=False, **options)
    killer.join()
    assert killed and report.ok and len(report.done) == 2
    assert all(not name.endswith(f":{killed[0]}") for name in report.workers)  # its replacement finished
    assert _outputs(tmp_path / "out") == {k.removeprefix("b/"): v for k, v in sequential.items() if k.startswith("b/")}


def test_a_killed_driver_loses_only_files_in_flight(corpus, runtime_dirs, options, sequential, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    command = [sys.executable, "-m", "onespeech.speech.cli", "batch", str(corpus), "-o", str(out), "-f", "json",
               "-m", str(runtime_dirs.asr), "--aligner", str(options["aligner"]), "-l", "en",
               "--max-new-tokens", str(BUDGET), "--workers", "1", "--threads", "1", "-q"]
    env = {**os.environ, "ONESPEECH_VAD_MODEL": str(options["vad"])}
    driver = subprocess.Popen(command, env=env, start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(out.rglob(".*.onespeech-record.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(driver.pid, signal.SIGKILL)  # the driver and its workers, mid-batch
    driver.wait()
    recorded = {p for p in out.rglob(".*.onespeech-record.json")}
    assert 1 <= len(recorded) < 4
    finished = {p: p.stat().st_mtime_ns for p in out.rglob("*.json") if not p.name.startswith(".")}
    rerun = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert _outputs(out) == sequential
    assert all(p.stat().st_mtime_ns == t for p, t in finished.items() if record_path(p.with_suffix("")) in recorded)


def test_ray_local_cluster_matches_sequential(corpus, runtime_dirs, options, sequential, tmp_path) -> None:  # type: ignore[no-untyped-def]
    ray = pytest.importorskip("ray", reason="the [ray] extra (ray) is not installed")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        report = transcribe_corpus([corpus], tmp_path / "out", model=str(runtime_dirs.asr), workers=2, threads=1,
                                   ray_address="auto", progress=False, **options)
    finally:
        ray.shutdown()
    assert report.ok and len(report.done) == 4 and len(report.workers) == 2
    assert _outputs(tmp_path / "out") == sequential


def test_cli_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from onespeech.speech.cli import main

    assert main(["batch", str(tmp_path / "missing.wav"), "-o", str(tmp_path / "out")]) == 2
    assert "missing.wav does not exist" in capsys.readouterr().err
    (tmp_path / "a.wav").write_bytes(b"RIFF")
    assert main(["batch", str(tmp_path / "a.wav"), "-o", str(tmp_path / "out"), "-f", "docx"]) == 2
    assert "unknown output format 'docx'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:  # refused by the option's parser, as every numeric option
        main(["batch", str(tmp_path / "a.wav"), "-o", str(tmp_path / "out"), "--workers", "0"])
    assert usage.value.code == 2 and "argument --workers: '0' is not allowed" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
