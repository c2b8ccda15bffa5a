"""Qwen3Recognizer.recognize_chunk: the public per-chunk step of transcribe and the speech layer."""

import threading

import numpy as np
import pytest

from onespeech.features import PcmTooLongError, PcmTooShortError
from onespeech.qwen3 import (
    MaxNewTokensError,
    Qwen3Options,
    Qwen3Recognizer,
    RecognitionCancelled,
    RecognizedChunk,
    UnsupportedLanguageError,
)
from onespeech.qwen3.decoder import Generation
from onespeech_tools.signals import SAMPLE_RATE as SR
from onespeech_tools.signals import tone


def answering(rec: Qwen3Recognizer, text: str, finished: bool = True):
    def generate(*args, **kwargs):
        return Generation(rec.tokenizer.encode(text), finished)

    return generate


def test_auto_language_answer_is_parsed(recognizer, monkeypatch) -> None:
    monkeypatch.setattr(recognizer.decoder, "generate", answering(recognizer, "language Chinese<asr_text>你好。"))
    assert recognizer.recognize_chunk(tone(1.5)) == RecognizedChunk("你好。", "zh", True, "language Chinese<asr_text>你好。")


def test_forced_language_is_the_chunks_language(recognizer, monkeypatch) -> None:
    monkeypatch.setattr(recognizer.decoder, "generate", answering(recognizer, "Hello, world."))
    result = recognizer.recognize_chunk(tone(2.0), "English")
    assert (result.text, result.language, result.finished) == ("Hello, world.", "en", True)


def test_it_is_the_step_transcribe_takes_for_a_short_input(recognizer) -> None:
    # the tiny model never ends within 8 ids: recognize_chunk reports it, transcribe raises
    pcm = tone(3.0, seed=4)
    result = recognizer.recognize_chunk(pcm, "en")
    assert not result.finished
    assert result.answer == recognizer.decode_ids(recognizer.generate(pcm, "en"))
    with pytest.raises(MaxNewTokensError, match="0.00-3.00 s"):
        recognizer.transcribe(pcm, "en")


def test_transcribe_recognizes_every_chunk_through_it(model_dir, monkeypatch, fake_vad) -> None:
    vad = fake_vad([(SR, 20 * SR), (25 * SR, 40 * SR)])
    with Qwen3Recognizer.load(model_dir, Qwen3Options(max_new_tokens=8), vad=vad) as rec:
        pcm = tone(45.0)
        calls = []

        def recognize_chunk(audio, language=None, cancel=None):
            calls.append((audio.shape[0], language))
            return RecognizedChunk(f"part{len(calls)}.", "en", True, "")

        monkeypatch.setattr(rec, "recognize_chunk", recognize_chunk)
        result = rec.transcribe(pcm, "en")
    assert len(calls) == len(result.segments) >= 2
    assert [n for n, _ in calls] == [round((s.end - s.start) * SR) for s in result.segments]
    assert {language for _, language in calls} == {"English"}
    assert result.text == " ".join(f"part{k}." for k in range(1, len(calls) + 1))


@pytest.mark.parametrize(("n", "error"), [(0, PcmTooShortError), (200, PcmTooShortError),
                                          (30 * SR + 1, PcmTooLongError)])
def test_chunk_bounds_are_checked(recognizer, n, error) -> None:
    with pytest.raises(error):
        recognizer.recognize_chunk(np.zeros(n, np.float32))


def test_unsupported_language_and_cancellation(recognizer) -> None:
    with pytest.raises(UnsupportedLanguageError, match="'xx'"):
        recognizer.recognize_chunk(tone(1.0), "xx")
    event = threading.Event()
    event.set()
    with pytest.raises(RecognitionCancelled):
        recognizer.recognize_chunk(tone(1.0), cancel=event)
    with pytest.raises(TypeError, match="cancellation signal"):
        recognizer.recognize_chunk(tone(1.0), cancel=3)  # type: ignore[arg-type]
