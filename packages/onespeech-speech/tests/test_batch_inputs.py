"""Corpus expansion (files, folders, manifests) and the resume record."""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath

import pytest

from onespeech.speech.batch import ManifestError, expand_inputs
from onespeech.speech.batch.records import (
    InputStamp,
    Record,
    is_current,
    read_record,
    record_path,
    write_atomic,
)


def _touch(path: Path, data: bytes = b"RIFF") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_folder_is_searched_recursively_for_audio_only(tmp_path: Path) -> None:
    _touch(tmp_path / "in" / "a.wav")
    _touch(tmp_path / "in" / "deep" / "b.FLAC")
    _touch(tmp_path / "in" / "notes.txt")
    items = expand_inputs([tmp_path / "in"]).items
    assert [i.rel for i in items] == [PurePosixPath("a"), PurePosixPath("deep/b")]


def test_same_stem_in_different_folders_keeps_relative_folders(tmp_path: Path) -> None:
    a = _touch(tmp_path / "x" / "talk.wav")
    b = _touch(tmp_path / "y" / "talk.mp3")
    c = _touch(tmp_path / "y" / "other.wav")
    items = expand_inputs([a, b, c]).items
    assert {i.path.name: str(i.rel) for i in items} == {"talk.wav": "x/talk", "talk.mp3": "y/talk", "other.wav": "other"}


def test_same_stem_in_one_folder_is_refused(tmp_path: Path) -> None:
    a = _touch(tmp_path / "talk.wav")
    b = _touch(tmp_path / "talk.flac")
    with pytest.raises(ValueError, match="both write 'talk"):
        expand_inputs([a, b])


def test_a_file_reached_twice_is_kept_once(tmp_path: Path) -> None:
    a = _touch(tmp_path / "in" / "a.wav")
    assert len(expand_inputs([a, tmp_path / "in"]).items) == 1


def test_missing_input_raises_at_once(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.wav"):
        expand_inputs([tmp_path / "nope.wav"])
    with pytest.raises(ValueError, match="no inputs"):
        expand_inputs([])


def test_text_manifest_resolves_relative_to_itself_and_reports_bad_lines(tmp_path: Path) -> None:
    _touch(tmp_path / "audio" / "a.wav")
    manifest = tmp_path / "list.txt"
    manifest.write_text("# corpus\naudio/a.wav\n\naudio/missing.wav\n", encoding="utf-8")
    expansion = expand_inputs([manifest])
    assert [i.path for i in expansion.items] == [tmp_path / "audio" / "a.wav"]
    assert [(e.line, "not a file" in e.reason) for e in expansion.errors] == [(4, True)]


def test_jsonl_manifest_carries_language_and_context(tmp_path: Path) -> None:
    _touch(tmp_path / "a.wav")
    _touch(tmp_path / "b.wav")
    lines = [
        json.dumps({"path": "a.wav", "language": "de", "context": "Namen: Anke"}),
        json.dumps({"path": "b.wav"}),
        "{not json",
        json.dumps(["a.wav"]),
        json.dumps({"path": "a.wav", "speed": 2}),
        json.dumps({"path": "a.wav", "language": 3}),
        json.dumps({"language": "en"}),
    ]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    expansion = expand_inputs([manifest])
    assert [(i.path.name, i.language, i.context) for i in expansion.items] == [
        ("a.wav", "de", "Namen: Anke"),
        ("b.wav", None, None),
    ]
    reasons = {e.line: e.reason for e in expansion.errors}
    assert sorted(reasons) == [3, 4, 5, 6, 7]
    assert "JSON object" in reasons[3] and "JSON object" in reasons[4]
    assert "unknown keys ['speed']" in reasons[5]
    assert "'language' must be a string" in reasons[6]
    assert "no 'path'" in reasons[7]
    assert all(isinstance(e, ManifestError) and str(e).startswith(str(manifest)) for e in expansion.errors)


def _record(path: Path, options: dict[str, object], outputs: list[str]) -> Record:
    return Record(InputStamp.of(path), options, "done", outputs=outputs, audio_seconds=1.0)


def test_record_round_trip_and_currency(tmp_path: Path) -> None:
    audio = _touch(tmp_path / "a.wav", b"0123456789")
    out = tmp_path / "out" / "a"
    write_atomic(out.with_name("a.json"), "{}")
    record = _record(audio, {"model": "m"}, ["a.json"])
    write_atomic(record_path(out), record.to_json())
    assert record_path(out).name == ".a.onespeech-record.json"
    loaded = read_record(record_path(out))
    assert loaded == record
    assert is_current(loaded, audio, {"model": "m"}, out.parent)
    assert not is_current(loaded, audio, {"model": "other"}, out.parent)
    # touched but identical content: the SHA-256 settles it
    os.utime(audio, ns=(1, 1))
    assert is_current(loaded, audio, {"model": "m"}, out.parent)
    # same size, other content, other time: redone
    audio.write_bytes(b"9876543210")
    os.utime(audio, ns=(2, 2))
    assert not is_current(loaded, audio, {"model": "m"}, out.parent)


def test_record_needs_its_outputs_and_a_done_status(tmp_path: Path) -> None:
    audio = _touch(tmp_path / "a.wav")
    record = _record(audio, {}, ["a.json"])
    assert not is_current(record, audio, {}, tmp_path)  # a.json missing
    failed = Record(record.input, {}, "failed", error={"type": "E", "message": "m"})
    assert not is_current(failed, audio, {}, tmp_path)


@pytest.mark.parametrize("text", ["", "not json", "[]", '{"version": 99}', '{"version": 1}', "[" * 100000])
def test_unreadable_record_means_redo(tmp_path: Path, text: str) -> None:
    path = tmp_path / ".a.onespeech-record.json"
    path.write_text(text, encoding="utf-8")
    assert read_record(path) is None


def test_write_atomic_leaves_nothing_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    with pytest.raises(TypeError):
        write_atomic(target, None)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
