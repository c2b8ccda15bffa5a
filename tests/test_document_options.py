"""A Document records the TranscribeOptions it was made with (plain JSON), and older documents still load."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from onespeech.speech import Document, TranscribeOptions, Transcriber, transcribe


def test_the_document_records_its_options(runtime_dirs, vad_path: Path, clips: dict[str, Path]) -> None:  # type: ignore[no-untyped-def]
    options = TranscribeOptions(model=str(runtime_dirs.asr), aligner=str(runtime_dirs.aligner), language="en",
                                vad=str(vad_path), threads=1, max_new_tokens=64, speakers=False)
    document = transcribe(clips["flac"], options=options, progress=False)
    assert document.options == options.record() and "threads" not in document.options
    assert TranscribeOptions.from_dict(document.options) == replace(options, threads=None)
    again = Document.from_json(document.to_json())
    assert again == document and again.options == options.record()
    json.dumps(document.options, allow_nan=False)  # plain JSON


def test_per_call_settings_are_what_is_recorded(runtime_dirs, vad_path: Path, clips: dict[str, Path]) -> None:  # type: ignore[no-untyped-def]
    with Transcriber(runtime_dirs.asr, aligner=runtime_dirs.aligner, vad=vad_path, threads=1, max_new_tokens=64,
                     speakers=False, progress=False) as transcriber:
        document = transcriber.transcribe(clips["flac"], language="en", context="names", align=False)
        made_with = TranscribeOptions.from_dict(document.options)  # type: ignore[arg-type]
    assert made_with == replace(transcriber.options, language="en", context="names", aligner=None, threads=None)
    assert document.aligner is None


def test_a_document_without_options_still_loads() -> None:
    document = Document.from_segments([], 1.0)
    current = document.to_dict()
    del current["options"]  # as documents were written before the options were kept
    assert Document.from_dict(current).options is None
    # and a version 1 file of that time (words stored beside the segments)
    older = {**current, "version": 1, "words": []}
    assert Document.from_dict(older).options is None
