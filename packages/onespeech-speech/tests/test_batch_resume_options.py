"""A batch record keys on every TranscribeOptions field but the run-only ones: other options redo a file."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path, PurePosixPath

import pytest

from onespeech.speech.batch.corpus import _record_options
from onespeech.speech.batch.inputs import CorpusItem
from onespeech.speech.batch.records import InputStamp, Record, is_current, write_atomic
from onespeech.speech.options import RUN_ONLY, TranscribeOptions

BASE = TranscribeOptions(model="m", aligner=None, threads=2)
CHANGED = {"model": "other", "language": "de", "aligner": "a", "threads": 7, "precision": "bf16", "context": "x",
           "max_new_tokens": 9, "decode_batch": 1, "decode_memory_mb": 64, "vad": "v.onnx", "speakers": False, "max_pause": 0.5, "catalog_dir": "c"}


def test_every_field_is_covered() -> None:
    assert set(CHANGED) | {"vad_options"} == {f.name for f in fields(TranscribeOptions)}


@pytest.mark.parametrize("name", sorted(CHANGED))
def test_another_option_is_another_record_key_but_the_run_only_ones(name: str) -> None:
    item = CorpusItem(Path("a.wav"), PurePosixPath("a"), None, None)
    same = _record_options(BASE, ["json"], item) == _record_options(replace(BASE, **{name: CHANGED[name]}), ["json"],
                                                                    item)
    assert same == (name in RUN_ONLY)


def test_a_record_with_other_options_is_not_current(tmp_path: Path) -> None:
    source = tmp_path / "a.wav"
    source.write_bytes(b"audio")
    (tmp_path / "a.json").write_text("{}")
    item = CorpusItem(source, PurePosixPath("a"), None, None)
    key = _record_options(BASE, ["json"], item)
    record = Record(InputStamp.of(source), key, "done", outputs=["a.json"], source=str(source))
    write_atomic(tmp_path / "r.json", record.to_json())
    assert is_current(Record.from_json((tmp_path / "r.json").read_text()), source, key, tmp_path)
    other = _record_options(replace(BASE, language="de"), ["json"], item)
    assert not is_current(record, source, other, tmp_path)
