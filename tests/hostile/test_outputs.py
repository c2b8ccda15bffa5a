"""Where `transcribe` and `batch` write: never over an input, never outside -o, never half a file.

Every output path is settled before any model loads (an unusable -o, an output on
an input, two inputs on one output, a name that leaves the folder, another input's
finished outputs), output files get the mode any new file gets, a write error later
is one file's failure, and Ctrl-C is one line and exit 130 with nothing half-written.
The refusals run no model, so each of them is quick; the cases that must show the
old behaviour (overwriting, a traceback after a transcription) run the tiny checkpoints.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onespeech.speech import Document
from onespeech.speech.atomic import TEMP_SUFFIX
from onespeech.speech.batch import expand_inputs, transcribe_corpus
from onespeech.speech.batch.records import read_record, record_path, write_atomic
from onespeech.speech.cli import main
from onespeech.speech.document import Finish, Segment, TimingMethod
from onespeech.speech.errors import OutputPathError
from onespeech.speech.writers import write_outputs

BUDGET = 256


@pytest.fixture(scope="module")
def model_args(runtime_dirs) -> list[str]:  # type: ignore[no-untyped-def]
    return ["-m", str(runtime_dirs.asr), "--aligner", "none", "-l", "en", "--max-new-tokens", str(BUDGET),
            "--threads", "1", "-q"]


@pytest.fixture(scope="module")
def batch_options(runtime_dirs, vad_path) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {"model": str(runtime_dirs.asr), "aligner": None, "max_new_tokens": BUDGET, "vad": str(vad_path),
            "language": "en", "workers": 1, "threads": 1, "progress": False}


@pytest.fixture(autouse=True)
def _vad(vad_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONESPEECH_VAD_MODEL", str(vad_path))


def _copy(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(source.read_bytes())
    return target


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


# -- #36 item 3: an output never replaces an input ------------------------------------------


@pytest.mark.parametrize("verb", ["transcribe", "batch"])
def test_refuses_to_write_a_transcript_over_its_recording(verb, model_args, clips, tmp_path,  # type: ignore[no-untyped-def]
                                                          monkeypatch, capsys) -> None:
    talk = _copy(clips["wav16"], tmp_path / "talk.json")
    before = talk.read_bytes()
    monkeypatch.chdir(tmp_path)
    code = main([verb, "talk.json", "-f", "json", "-o", ".", *model_args])
    assert code == 2
    assert "would overwrite the input talk.json" in capsys.readouterr().err
    assert talk.read_bytes() == before


def test_transcribe_refuses_an_output_that_is_a_hard_link_of_an_input(model_args, clips, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    clip = _copy(clips["wav16"], tmp_path / "in" / "clip.wav")
    (tmp_path / "out").mkdir()
    os.link(clip, tmp_path / "out" / "clip.txt")
    code = main(["transcribe", str(clip), "-f", "txt", "-o", str(tmp_path / "out"), *model_args])
    assert code == 2
    assert "would overwrite the input" in capsys.readouterr().err
    assert clip.read_bytes() == clips["wav16"].read_bytes()


# -- #36 item 4: inputs that share a stem ----------------------------------------------------


def test_transcribe_refuses_two_inputs_of_one_folder_and_stem(model_args, clips, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    x_wav = _copy(clips["wav16"], tmp_path / "x.wav")
    x_flac = _copy(clips["flac"], tmp_path / "x.flac")
    out = tmp_path / "out"
    code = main(["transcribe", str(x_wav), str(x_flac), "-f", "json", "-o", str(out), *model_args])
    assert code == 2
    err = capsys.readouterr().err
    assert str(x_wav) in err and str(x_flac) in err and "would both write" in err
    assert _files(out) == []  # refused before any work


def test_transcribe_keeps_the_folders_of_inputs_that_share_a_stem(model_args, clips, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    a = _copy(clips["wav16"], tmp_path / "a" / "y.wav")
    b = _copy(clips["flac"], tmp_path / "b" / "y.wav")
    out = tmp_path / "out"
    assert main(["transcribe", str(a), str(b), "-f", "json", "-o", str(out), *model_args]) == 0
    assert _files(out) == ["a/y.json", "b/y.json"]
    texts = {Document.from_json((out / name).read_text("utf-8")).text for name in ("a/y.json", "b/y.json")}
    assert len(texts) == 2  # one transcript per input, neither written over the other


# -- #36 item 5: every output path resolves inside -o ----------------------------------------

_NAMES = st.text(alphabet=".a-_ ", min_size=1, max_size=6).map(lambda s: s + ".wav")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(_NAMES, min_size=1, max_size=5, unique=True), nested=st.booleans())
def test_every_planned_output_and_record_resolves_inside_the_output_folder(names: list[str], nested: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        folder = corpus / "sub" if nested else corpus
        folder.mkdir(parents=True)
        for name in names:
            (folder / name).write_bytes(b"")
        out = Path(tmp) / "out"
        items = expand_inputs([corpus]).items
        assert len(items) == len(names)
        stems = [out / item.rel for item in items]
        paths = [p for s in stems for p in (s.with_name(s.name + ".json"), record_path(s))]
        assert all(p.resolve().is_relative_to(out.resolve()) and p.resolve() != out.resolve() for p in paths)
        assert len({p.resolve() for p in paths}) == len(paths)  # no two inputs share an output


def test_batch_of_a_dot_dot_wav_writes_inside_the_output_folder(batch_options, clips, tmp_path) -> None:  # type: ignore[no-untyped-def]
    corpus = tmp_path / "corpus"
    _copy(clips["wav16"], corpus / "..wav")
    _copy(clips["flac"], tmp_path / "loose" / "...wav")
    out = tmp_path / "out"
    report = transcribe_corpus([corpus, tmp_path / "loose" / "...wav"], out, formats=("json",), **batch_options)
    assert report.ok and len(report.done) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "loose", "out"]  # nothing beside -o
    assert _files(out) == sorted(["...wav.json", "..wav.json", "....wav.onespeech-record.json",
                                  "...wav.onespeech-record.json"])
    again = transcribe_corpus([corpus, tmp_path / "loose" / "...wav"], out, formats=("json",), **batch_options)
    assert len(again.skipped) == 2  # and its record is found again


# -- #36 item 6: another input claiming a finished output ------------------------------------


def test_batch_rerun_refuses_another_input_taking_a_finished_output(batch_options, clips, tmp_path) -> None:  # type: ignore[no-untyped-def]
    a = _copy(clips["wav16"], tmp_path / "a" / "x.wav")
    b = _copy(clips["flac"], tmp_path / "b" / "x.wav")
    out = tmp_path / "out"
    assert transcribe_corpus([a], out, formats=("json",), **batch_options).done == [str(a)]
    finished = (out / "x.json").read_bytes()
    record = read_record(record_path(out / "x"))
    assert record is not None and record.source == str(a.resolve())
    with pytest.raises(OutputPathError, match=f"{b} would replace x.* finished from {a.resolve()}"):
        transcribe_corpus([b], out, formats=("json",), **batch_options)
    assert (out / "x.json").read_bytes() == finished
    # the same recording moved elsewhere is not another input: it is found done
    moved = _copy(a, tmp_path / "moved" / "x.wav")
    assert transcribe_corpus([moved], out, formats=("json",), **batch_options).skipped == [str(moved)]
    # asked for explicitly, the other input takes the name over
    report = transcribe_corpus([b], out, formats=("json",), overwrite_others=True, **batch_options)
    assert report.done == [str(b)] and (out / "x.json").read_bytes() != finished
    record = read_record(record_path(out / "x"))
    assert record is not None and record.source == str(b.resolve())


# -- #36 item 13: symlinked subfolders are followed, loops are not ---------------------------


def test_batch_follows_symlinked_subfolders_and_stops_at_loops(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    (corpus / "real").mkdir(parents=True)
    (corpus / "real" / "a.wav").write_bytes(b"")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "deep").mkdir(parents=True)
    (elsewhere / "deep" / "b.flac").write_bytes(b"")
    (corpus / "linked").symlink_to(elsewhere, target_is_directory=True)
    (corpus / "real" / "loop").symlink_to(corpus, target_is_directory=True)
    (corpus / "again").symlink_to(corpus / "real", target_is_directory=True)
    items = expand_inputs([corpus]).items
    # each folder once, the first way the sorted walk reaches it (the link "again" before "real")
    assert sorted(item.rel.as_posix() for item in items) == ["again/a", "linked/deep/b"]
    assert sorted(item.path.resolve() for item in items) == sorted(
        [(corpus / "real" / "a.wav").resolve(), (elsewhere / "deep" / "b.flac").resolve()])


# -- #36 item 17 and #35: -o checked before any model loads ----------------------------------


@pytest.mark.parametrize("verb", ["transcribe", "batch"])
def test_an_output_folder_that_is_a_file_is_refused_before_any_model_loads(verb, clips, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    clip = _copy(clips["wav16"], tmp_path / "clip.wav")
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    # a model that cannot load: had it been tried first, that would be the error
    code = main([verb, str(clip), "-o", str(taken), "-m", str(tmp_path / "no-model"), "-q"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and f"output folder {taken} is a file" in err
    assert taken.read_text() == "not a folder"


def test_a_missing_output_folder_is_created_before_any_model_loads(clips, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    clip = _copy(clips["wav16"], tmp_path / "clip.wav")
    out = tmp_path / "new" / "nested"
    main(["transcribe", str(clip), "-o", str(out), "-m", str(tmp_path / "no-model"), "-q"])
    capsys.readouterr()
    assert out.is_dir()


def _immutable(folder: Path) -> bool:
    if shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0


def test_batch_into_an_unwritable_folder_is_refused_before_any_work(model_args, clips, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    clip = _copy(clips["wav16"], tmp_path / "clip.wav")
    out = tmp_path / "out"
    out.mkdir()
    if os.geteuid() != 0:
        out.chmod(0o555)
    elif not _immutable(out):
        pytest.skip("running as root without chattr +i: no folder is unwritable")
    try:
        started = time.monotonic()
        code = main(["batch", str(clip), "-o", str(out), *model_args])
        elapsed = time.monotonic() - started
    finally:
        subprocess.run(["chattr", "-i", str(out)], capture_output=True)
        out.chmod(0o755)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"output folder {out} is not a writable folder" in err
    assert elapsed < 5  # no worker started, no file transcribed


def test_a_write_error_later_is_that_files_failure_and_the_batch_goes_on(batch_options, clips, tmp_path,  # type: ignore[no-untyped-def]
                                                                         monkeypatch) -> None:
    import onespeech.speech.batch.corpus as corpus

    full = _copy(clips["wav16"], tmp_path / "in" / "full.wav")
    fine = _copy(clips["flac"], tmp_path / "in" / "fine.flac")
    real = corpus.write_outputs

    def disk_full_for_one(document, input_path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if Path(input_path).name == "full.wav":
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "full.json"))
        return real(document, input_path, *args, **kwargs)

    monkeypatch.setattr(corpus, "write_outputs", disk_full_for_one)
    report = transcribe_corpus([full, fine], tmp_path / "out", formats=("json",), **batch_options)
    assert report.done == [str(fine)]
    assert [(f.path, f.error_type) for f in report.failed] == [(str(full), "OSError")]
    assert "No space left on device" in report.failed[0].message and "full.json" in report.failed[0].message
    record = read_record(record_path(tmp_path / "out" / "full"))
    assert record is not None and record.status == "failed"


# -- #35: output files get the mode of any new file ------------------------------------------


@settings(max_examples=25, deadline=None)
@given(umask=st.integers(0, 0o777))
def test_outputs_and_records_get_0666_less_the_umask(umask: int) -> None:
    document = Document.from_segments([Segment(0.0, 1.0, "hello", "en", [], Finish.END_TOKEN, TimingMethod.NONE, "aligner disabled")], 1.0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        previous = os.umask(umask)
        try:
            written = write_outputs(document, "a.wav", folder, "all")
            write_atomic(record_path(folder / "a"), "{}")
        finally:
            os.umask(previous)
        for path in [*written, record_path(folder / "a")]:
            assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path.name
        assert not [p for p in folder.iterdir() if p.name.endswith(TEMP_SUFFIX)]


# -- #35: Ctrl-C is one line, exit 130, nothing half-written ---------------------------------


def _long_clip(clips: dict[str, Path], path: Path, repeats: int) -> Path:
    audio, rate = soundfile.read(clips["joined"], dtype="float32")
    soundfile.write(path, np.concatenate([audio] * repeats), rate)
    return path


def _maps(pid: int, directory: Path) -> bool:
    try:
        return str(directory) in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _running_in_group(pgid: int) -> list[int]:
    """Processes of the group that still run (zombies, left to an init that may not reap them, do not)."""
    running = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in "ZX":
            running.append(int(stat_file.parent.name))
    return running


def _interrupt_when_busy(process: subprocess.Popen[str], asr: Path, *, group: bool) -> None:
    """SIGINT once the recognizer's files are mapped (in the process or a worker): it is transcribing."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if any(_maps(pid, asr) for pid in [process.pid, *_children(process.pid)]):
            time.sleep(0.5)
            if group:
                os.killpg(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
            else:
                process.send_signal(signal.SIGINT)
            return
        time.sleep(0.02)
    pytest.fail("the command never started transcribing")


def _no_partial_outputs(out: Path) -> None:
    names = [p.name for p in out.rglob("*")]
    assert not [n for n in names if n.endswith(TEMP_SUFFIX) or n.endswith(".tmp")], names
    for path in out.rglob("*.json"):
        json.loads(path.read_text("utf-8"))  # every file there is whole


@pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="needs /proc to see when the command is busy")
@pytest.mark.parametrize("verb", ["transcribe", "batch"])
def test_ctrl_c_prints_one_line_exits_130_and_leaves_nothing_half_written(verb, runtime_dirs, vad_path, clips,  # type: ignore[no-untyped-def]
                                                                          tmp_path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    long = _long_clip(clips, inputs / "long0.wav", 4)
    for i in range(1, 4):
        shutil.copy(long, inputs / f"long{i}.wav")
    out, spool = tmp_path / "out", tmp_path / "spool"
    spool.mkdir()
    sources = sorted(str(p) for p in inputs.iterdir())
    command = [sys.executable, "-m", "onespeech.speech.cli", verb, *sources, "-o", str(out), "-f", "json,srt",
               "-m", str(runtime_dirs.asr), "--aligner", "none", "-l", "en", "--max-new-tokens", str(BUDGET),
               "--threads", "1", "-q"] + (["--workers", "1"] if verb == "batch" else [])
    env = {**os.environ, "ONESPEECH_VAD_MODEL": str(vad_path), "TMPDIR": str(spool)}
    # a runner started in the background (nohup, `cmd &`) ignores SIGINT, and an ignored
    # signal stays ignored across exec: the command would never see the Ctrl-C
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        _interrupt_when_busy(process, runtime_dirs.asr, group=verb == "batch")
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, err
    assert err.count("\n") == 1 and "interrupted" in err, err
    # no worker outlives the command: a killed worker may take a moment to be gone on a busy machine
    deadline = time.monotonic() + 5
    while _running_in_group(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _running_in_group(process.pid) == []
    _no_partial_outputs(out)
    assert list(spool.iterdir()) == []
