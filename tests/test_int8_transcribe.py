"""precision="int8" end to end on the tiny checkpoints: transcribe() and ``onespeech transcribe --precision int8``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from onespeech.qwen3 import Qwen3Options, Qwen3Recognizer
from onespeech.qwen3.runtime import has_runtime
from onespeech.speech import Document, transcribe
from onespeech.speech.cli import main


@pytest.fixture(scope="module")
def int8_dirs(checkpoints, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    """Copies of the tiny publisher checkpoints (INT8 is converted into them on first load)."""
    root = tmp_path_factory.mktemp("int8")
    out = []
    for source in (checkpoints.asr, checkpoints.aligner):
        shutil.copytree(source, root / source.name)
        out.append(root / source.name)
    return out[0], out[1]


# The random weights end an answer where the end token first wins the greedy choice, after a
# number of tokens that depends on the precision's arithmetic (this clip's first chunk: 126
# under INT8, 174 under FP32), so the budget leaves room for it
BUDGET = 256


def test_transcribe_in_int8_is_the_int8_recognizer_with_int8_aligner(int8_dirs, clips, vad_path) -> None:  # type: ignore[no-untyped-def]
    asr, aligner = int8_dirs
    document = transcribe(clips["wav16"], asr, aligner=aligner, precision="int8", language="en", threads=1,
                          max_new_tokens=BUDGET, vad=vad_path, speakers=False, progress=False)  # fmt: skip
    assert has_runtime(asr, "int8") and has_runtime(aligner, "int8") and not has_runtime(asr, "fp32")
    assert document.model is not None and document.model.precision == "int8"
    assert document.segments and all(s.text for s in document.segments)
    assert any(w.start is not None for s in document.segments for w in s.words)  # the INT8 aligner timed them
    from onespeech.features import load_audio

    pcm = load_audio(clips["wav16"])
    with Qwen3Recognizer.load(asr, Qwen3Options(precision="int8", max_new_tokens=BUDGET, threads=1)) as recognizer:
        first = document.segments[0]
        span = pcm[round(first.start * 16000) : round(first.end * 16000)]
        assert recognizer.transcribe(span, "en").text == first.text


def test_cli_precision_int8(int8_dirs, clips, vad_path, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    asr, _ = int8_dirs
    code = main(["transcribe", str(clips["wav16"]), "-m", str(asr), "--aligner", "none", "-l", "en",
                 "--precision", "int8", "--vad", str(vad_path), "--speakers", "off", "-f", "json",
                 "-o", str(tmp_path), "-q", "--max-new-tokens", str(BUDGET)])
    assert code == 0 and capsys.readouterr().err == ""
    document = Document.from_json((tmp_path / f"{Path(clips['wav16']).stem}.json").read_text(encoding="utf-8"))
    assert document.model is not None and document.model.precision == "int8" and document.segments
