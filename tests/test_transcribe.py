"""transcribe(file) end to end on tiny ending checkpoints: the pipeline is a composition.

Each segment's text must be exactly ``Qwen3Recognizer.transcribe`` on the segment's
samples of ``load_audio(file)``, and its words' times exactly
``Qwen3ForcedAligner.align`` on that span shifted by the segment's start.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from onespeech.align import Qwen3AlignerOptions, Qwen3ForcedAligner
from onespeech.features import load_audio
from onespeech.qwen3 import Finish, Qwen3Options, Qwen3Recognizer, TimingMethod
from onespeech.speech import (
    Document,
    Transcriber,
    transcribe,
)

BUDGET = 256
S = 16000


@pytest.fixture(scope="module")
def transcriber(runtime_dirs, vad_path):  # type: ignore[no-untyped-def]
    with Transcriber(runtime_dirs.asr, aligner=runtime_dirs.aligner, max_new_tokens=BUDGET, threads=1,
                     progress=False, vad=vad_path) as t:
        yield t


@pytest.fixture(scope="module")
def documents(transcriber, clips):  # type: ignore[no-untyped-def]
    """One transcription per clip and language setting, shared by the checks below."""
    cache: dict[tuple[str, str | None], Document] = {}

    def get(clip: str, language: str | None = "en") -> Document:
        if (clip, language) not in cache:
            cache[clip, language] = transcriber.transcribe(clips[clip], language=language)
        return cache[clip, language]

    return get


def _span(pcm: np.ndarray, start: float, end: float) -> np.ndarray:
    return pcm[round(start * S) : round(end * S)]


def _check_composition(document: Document, path: Path, runtime_dirs, language: str | None) -> None:  # type: ignore[no-untyped-def]
    pcm = load_audio(path)
    assert document.duration == pcm.shape[0] / S
    with Qwen3Recognizer.load(runtime_dirs.asr, Qwen3Options(max_new_tokens=BUDGET, threads=1)) as recognizer:
        expected = [recognizer.transcribe(_span(pcm, s.start, s.end), language) for s in document.segments]
        whole = recognizer.transcribe(pcm, language) if pcm.shape[0] <= 30 * S else None
    for segment, transcript in zip(document.segments, expected, strict=True):
        assert segment.text == transcript.text and segment.text
        assert segment.language == transcript.language
        assert segment.finish is Finish.END_TOKEN
        assert round(segment.start * S) == segment.start * S  # exact sample positions
    if whole is not None:
        assert [s.text for s in document.segments] == [whole.text]
    timed = [s for s in document.segments if s.timing_method is TimingMethod.FORCED_ALIGNER]
    # the same thread count as the Transcriber: BLAS sums in a thread-count-dependent order
    with Qwen3ForcedAligner.load(runtime_dirs.aligner, Qwen3AlignerOptions(threads=1)) as aligner:
        for segment in timed:
            aligned = aligner.align(_span(pcm, segment.start, segment.end), segment.text, segment.language)
            want = [(w.text, None if w.start is None else w.start + segment.start,
                     None if w.end is None else w.end + segment.start, w.confidence, w.timing_method)
                    for w in aligned.words]
            assert [(w.text, w.start, w.end, w.confidence, w.timing_method) for w in segment.words] == want
    assert document.words == [w for s in document.segments for w in s.words]


@pytest.mark.parametrize("clip", ["flac", "wav44", "wav16", "joined"])
def test_segments_are_the_recognizer_and_aligner_on_their_spans(clip, documents, clips, runtime_dirs) -> None:  # type: ignore[no-untyped-def]
    document = documents(clip)
    _check_composition(document, clips[clip], runtime_dirs, "en")
    assert document.language == "en" and document.languages == ["en"]
    assert any(s.timing_method is TimingMethod.FORCED_ALIGNER for s in document.segments)
    assert any(w.start is not None for w in document.words), "the aligner timed nothing: the test proves little"
    assert document.model is not None and document.model.precision == "fp32"


def test_long_file_goes_through_vad_chunks_like_the_recognizer(documents, clips, runtime_dirs, vad_path) -> None:  # type: ignore[no-untyped-def]
    document = documents("joined")
    assert document.duration > 30
    assert len(document.segments) >= 2
    assert all(s.end - s.start <= 30 for s in document.segments)
    pcm = load_audio(clips["joined"])
    options = Qwen3Options(max_new_tokens=BUDGET, threads=1)
    with Qwen3Recognizer.load(runtime_dirs.asr, options, vad=vad_path) as recognizer:
        whole = recognizer.transcribe(pcm, "en")
    assert [(s.start, s.end, s.text) for s in document.segments] == [(s.start, s.end, s.text) for s in whole.segments]
    assert document.text == whole.text


def test_multilingual_mp3_with_language_identified_per_chunk(documents, clips, runtime_dirs) -> None:  # type: ignore[no-untyped-def]
    document = documents("mp3", None)
    assert len(document.segments) >= 2
    _check_composition(document, clips["mp3"], runtime_dirs, None)
    # random weights never write "language X<asr_text>": no language, so no timing stage applies
    assert all(s.language is None and s.timing_method is TimingMethod.NONE and s.untimed_reason.startswith("no language") for s in document.segments)
    assert all(w.start is None for w in document.words)


def test_catalog_ids_are_fetched_converted_and_cached(served_models, clips, vad_path, runtime_dirs) -> None:  # type: ignore[no-untyped-def]
    def run() -> Document:
        return transcribe(clips["flac"], served_models.asr_id, aligner=served_models.aligner_id, language="en", max_new_tokens=BUDGET,
                          threads=1, progress=False, vad=vad_path, catalog_dir=served_models.catalog)

    document = run()
    fetched = {r.path.rsplit("/", 1)[-1] for r in served_models.server.requests}
    assert {"model.safetensors", "config.json", "vocab.json"} <= fetched
    assert document.model.id_or_path == served_models.asr_id and document.model.revision == "e" * 40
    assert document.aligner.id_or_path == served_models.aligner_id
    _check_composition(document, clips["flac"], runtime_dirs, "en")
    n_requests = len(served_models.server.requests)
    assert run() == document  # the second run is served from the cache
    assert len(served_models.server.requests) == n_requests
