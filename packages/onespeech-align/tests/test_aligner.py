"""Qwen3ForcedAligner on a tiny random checkpoint: limits, errors, results, projection."""

from __future__ import annotations

import json
import shutil
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from onespeech.align import (
    AlignmentCancelledError,
    LanguageRequiredError,
    Qwen3AlignerOptions,
    Qwen3ForcedAligner,
    TooManyTokensError,
    TooManyUnitsError,
)
from onespeech.align.aligner import MAX_UNITS, _checked_units
from onespeech.align.slots import SlotPredictions
from onespeech.features import NonFiniteSampleError, PcmTooLongError, PcmTooShortError
from onespeech.kernels import ModelIntegrityError, ObjectClosedError, Precision
from onespeech.qwen3 import ModelKindError, UnsupportedLanguageError
from onespeech.qwen3.transcript import Segment, TimingMethod, Transcript, Word
from onespeech.qwen3.units import spoken_units, written_units
from onespeech.tokenizer import InvalidTextError, TextTooLongError

TEXT = "Mr. Quilter is the apostle -- of the middle classes!"


PUBLISHER_FILES = ("generation_config.json", "preprocessor_config.json", "chat_template.json",
                   "tokenizer_config.json", "vocab.json", "merges.txt", "model.safetensors")


def _copy_with_config(src: Path, dst: Path, edit) -> Path:
    """The publisher files of ``src`` with an edited config.json (no runtime files)."""
    dst.mkdir()
    for name in PUBLISHER_FILES:
        shutil.copyfile(src / name, dst / name)
    config = json.loads((src / "config.json").read_text())
    edit(config)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def test_head_size_and_step_come_from_config(tiny_aligner, tiny_aligner_dir):
    config = json.loads((tiny_aligner_dir / "config.json").read_text())
    assert tiny_aligner.classify_num == config["thinker_config"]["classify_num"] == 5000
    assert tiny_aligner.step_ms == config["timestamp_segment_time"] == 80


def test_step_follows_a_different_config(tiny_aligner_dir, tmp_path, speech):
    def halve_step(config):
        config["timestamp_segment_time"] = 40

    directory = _copy_with_config(tiny_aligner_dir, tmp_path / "step40", halve_step)
    with Qwen3ForcedAligner.load(directory, Qwen3AlignerOptions(threads=1)) as aligner:
        result = aligner.align(speech, "apostle", "en")
        slots = SlotPredictions.from_logits(aligner.timestamp_logits(speech, ["apostle"]).logits).slots
    assert aligner.step_ms == 40
    word = result.words[0]
    if word.start is not None:
        assert word.start == slots[0] * 40 / 1000


def test_head_rows_must_match_classify_num(tiny_aligner_dir, tmp_path):
    def more_classes(config):
        config["thinker_config"]["classify_num"] = 4000

    directory = _copy_with_config(tiny_aligner_dir, tmp_path / "classes", more_classes)
    # the converter checks every tensor against the config before anything is installed
    with pytest.raises(ModelIntegrityError, match=r"lm_head.weight' has shape \[5000, 64\], config needs \[4000"):
        Qwen3ForcedAligner.load(directory)


def test_asr_checkpoint_is_refused(tiny_aligner_dir, tmp_path):
    def as_asr(config):
        config["thinker_config"]["model_type"] = "qwen3_asr"

    directory = _copy_with_config(tiny_aligner_dir, tmp_path / "asr", as_asr)
    with pytest.raises(ModelKindError, match="qwen3_forced_aligner"):
        Qwen3ForcedAligner.load(directory)
    assert not list(directory.glob("manifest*"))  # refused before any conversion


def test_align_returns_written_units_with_slot_times(narrow_aligner, speech):
    tiny_aligner = narrow_aligner
    speech = speech[:40000]  # 2.5 s: some slots (up to 4.72 s) fall beyond the audio
    result = tiny_aligner.align(speech, TEXT, "en")
    units = written_units(TEXT, "en")
    assert result.text == TEXT and result.language == "en"
    # the one segment holds the timed words, and says which stage timed them
    assert result.segments == (Segment(0.0, len(speech) / 16000, TEXT, "en", result.words,
                                       timing_method=TimingMethod.FORCED_ALIGNER),)
    assert [w.text for w in result.words] == [u.text for u in units]
    raw = tiny_aligner.timestamp_logits(speech, spoken_units(units))
    pred = SlotPredictions.from_logits(raw.logits)
    duration = len(speech) / 16000
    k = 0
    n_valid = 0
    for word, unit in zip(result.words, units, strict=True):
        if not unit.spoken:  # "--": nothing to say, nothing timed
            assert (word.start, word.end, word.timing_method) == (None, None, TimingMethod.NONE)
            continue
        start, end = int(pred.slots[2 * k]), int(pred.slots[2 * k + 1])
        if start <= end and end * 80 / 1000 <= duration:
            n_valid += 1
            assert (word.start, word.end) == (start * 80 / 1000, end * 80 / 1000)
            assert word.timing_method is TimingMethod.FORCED_ALIGNER
            assert word.confidence == pytest.approx((pred.probabilities[2 * k] + pred.probabilities[2 * k + 1]) / 2)
        else:
            assert (word.start, word.end, word.confidence, word.timing_method) == (None, None, None, TimingMethod.NONE)
        k += 1
    assert k == len(spoken_units(units))
    assert 0 < n_valid < k  # both branches are exercised


def test_align_chinese_uses_character_units(tiny_aligner, speech):
    text = "\u4f60\u597d\uff0c\u4e16\u754c"
    result = tiny_aligner.align(speech, text, "zh")
    assert [w.text for w in result.words] == ["\u4f60", "\u597d", "\uff0c", "\u4e16", "\u754c"]
    assert result.words[2].start is None and result.text == text


def test_transcript_overload_projects_characters_and_keeps_confidence(narrow_aligner, speech):
    tiny_aligner = narrow_aligner
    words = (Word("\u4f60\u597d", confidence=0.9), Word("\uff0c", confidence=0.5), Word("\u4e16\u754c", confidence=0.7))
    transcript = Transcript("\u4f60\u597d\uff0c\u4e16\u754c", "zh", (Segment(0.0, 5.0, "x", "zh", words),))
    result = tiny_aligner.align(speech, transcript, "zh")
    # everything but the words' times is kept; the timed words are back in their segment
    assert result.text == transcript.text
    assert [replace(s, words=()) for s in result.segments] == [replace(s, words=()) for s in transcript.segments]
    assert result.words == result.segments[0].words
    assert [(w.text, w.confidence) for w in result.words] == [(w.text, w.confidence) for w in words]
    pred = SlotPredictions.from_logits(tiny_aligner.timestamp_logits(speech, list("\u4f60\u597d\u4e16\u754c")).logits)
    duration = len(speech) / 16000
    for word, (first, last) in ((result.words[0], (0, 1)), (result.words[2], (2, 3))):
        start, end = int(pred.slots[2 * first]), int(pred.slots[2 * last + 1])
        if start <= end and end * 80 / 1000 <= duration:
            assert (word.start, word.end, word.timing_method) == (start * 80 / 1000, end * 80 / 1000, TimingMethod.FORCED_ALIGNER)
        else:
            assert (word.start, word.end) == (None, None)
    assert result.words[1].start is None


def test_transcript_without_words_gets_words_from_its_text(tiny_aligner, speech):
    result = tiny_aligner.align_transcript(speech, Transcript("the apostle", "en"))
    assert [w.text for w in result.words] == ["the", "apostle"]


def test_text_without_spoken_units_is_untimed(tiny_aligner, speech):
    result = tiny_aligner.align(speech, "-- ... !", "en")
    assert [w.start for w in result.words] == [None, None, None]


@pytest.mark.parametrize("n", [0, 1, 200])
def test_audio_of_200_samples_or_fewer_is_refused(tiny_aligner, n):
    with pytest.raises(PcmTooShortError, match="more than 200"):
        tiny_aligner.align(np.zeros(n, np.float32), "hello", "en")


def test_audio_of_201_samples_is_accepted(tiny_aligner):
    result = tiny_aligner.align(np.full(201, 0.01, np.float32), "hello", "en")
    assert [w.text for w in result.words] == ["hello"]


def test_audio_over_300_seconds_is_refused(tiny_aligner):
    with pytest.raises(PcmTooLongError, match="at most 4800000 samples"):
        tiny_aligner.align(np.zeros(300 * 16000 + 1, np.float32), "hello", "en")


def test_audio_of_300_seconds_is_aligned(tiny_aligner, speech):
    pcm = np.resize(speech, 300 * 16000).astype(np.float32)
    result = tiny_aligner.align(pcm, "the apostle", "en")
    assert len(result.words) == 2 and result.segments[0].end == 300.0


def test_nonfinite_audio_is_refused(tiny_aligner, speech):
    pcm = speech.copy()
    pcm[1234] = np.nan
    with pytest.raises(NonFiniteSampleError, match="sample 1234"):
        tiny_aligner.align(pcm, "hello", "en")


def test_text_over_1_mib_is_refused(tiny_aligner, speech):
    with pytest.raises(TextTooLongError, match="1 MiB"):
        tiny_aligner.align(speech, "a" * (1024 * 1024 + 1), "en")


def test_more_than_4096_units_is_refused(tiny_aligner, speech):
    with pytest.raises(TooManyUnitsError, match="4097 written units"):
        tiny_aligner.align(speech, "a " * 4097, "en")
    with pytest.raises(TooManyUnitsError, match="4097 written units"):
        tiny_aligner.align(speech, "\u4f60" * 4097, "zh")
    assert len(_checked_units("a " * MAX_UNITS, "en")) == MAX_UNITS


def test_lone_surrogate_is_refused(tiny_aligner, speech):
    with pytest.raises(InvalidTextError, match="lone surrogate"):
        tiny_aligner.align(speech, "ok \ud800", "en")


@pytest.mark.parametrize("language", [None, ""])
def test_language_is_required(tiny_aligner, speech, language):
    with pytest.raises(LanguageRequiredError, match="needs a language"):
        tiny_aligner.align(speech, "hello", language)


@pytest.mark.parametrize("language", ["nl", "ar", "en-", "Klingon"])
def test_other_languages_are_refused(tiny_aligner, speech, language):
    with pytest.raises(UnsupportedLanguageError, match=r"zh, en, yue, fr, de, it, ja, ko, pt, ru, es \(or a name"):
        tiny_aligner.align(speech, "hello", language)


@pytest.mark.parametrize("language", ["EN", "English", "en-US", " en "])
def test_language_tags_are_parsed_as_the_recognizer_parses_them(tiny_aligner, speech, language):
    assert tiny_aligner.align(speech[:8000], "ok", language).language == "en"


@pytest.mark.parametrize("language", ["zh", "en", "yue", "fr", "de", "it", "ja", "ko", "pt", "ru", "es"])
def test_all_eleven_languages_are_accepted(tiny_aligner, speech, language):
    # character languages make every character a unit, Latin letters included
    expected = ["o", "k"] if language in ("zh", "yue", "ja") else ["ok"]
    assert [w.text for w in tiny_aligner.align(speech[:8000], "ok", language).words] == expected


def test_cancelled_alignment_raises(tiny_aligner, speech):
    event = threading.Event()
    event.set()
    with pytest.raises(AlignmentCancelledError):
        tiny_aligner.align(speech, "hello", "en", cancel=event)


def test_closed_aligner_releases_weights(tiny_aligner_dir):
    aligner = Qwen3ForcedAligner.load(tiny_aligner_dir, Qwen3AlignerOptions(threads=1))
    with aligner:
        pass
    assert aligner._backbone is None and aligner._head is None
    with pytest.raises(ObjectClosedError, match="closed"):
        aligner.align(np.zeros(16000, np.float32), "hello", "en")


@pytest.mark.parametrize(("threads", "error"), [(0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_threads_must_be_positive(threads, error):
    with pytest.raises(error, match="threads"):
        Qwen3AlignerOptions(threads=threads)


def test_options_defaults_and_precision_strings():
    assert Qwen3AlignerOptions() == Qwen3AlignerOptions(Precision.FLOAT32, None)
    assert Qwen3AlignerOptions(precision="bf16").precision is Precision.BFLOAT16
    with pytest.raises(ValueError, match="Precision.BFLOAT16"):
        Qwen3AlignerOptions(precision="int4")


def test_units_that_tokenize_to_too_many_ids_are_refused(tiny_aligner, speech):
    # one "word" of 20,000 digits: one unit, but every digit is its own token
    with pytest.raises(TooManyTokensError, match="more than 16384 ids"):
        tiny_aligner.align(speech, "1" * 20000, "en")


def test_bf16_aligner_rounds_like_the_recognizer(tiny_aligner_dir, tmp_path, speech):
    directory = tmp_path / "bf16"
    shutil.copytree(tiny_aligner_dir, directory)
    with Qwen3ForcedAligner.load(directory, Qwen3AlignerOptions(precision="bf16", threads=2)) as aligner:
        assert (directory / "manifest.bf16.json").is_file()
        logits = aligner.timestamp_logits(speech, ["the", "apostle"]).logits
        result = aligner.align(speech, "the apostle", "en")
    # every logit is a bfloat16 value (the head's output is rounded at its boundary)
    bits = logits.view(np.uint32)
    assert logits.dtype == np.float32 and not np.any(bits & 0xFFFF)
    assert [w.text for w in result.words] == ["the", "apostle"]


def test_cancellation_during_the_forward_pass_raises(tiny_aligner, speech):
    calls = []

    def cancel_on_fourth_check():
        calls.append(1)
        return len(calls) >= 4

    with pytest.raises(AlignmentCancelledError, match="cancelled"):
        tiny_aligner.align(speech, "the apostle", "en", cancel=cancel_on_fourth_check)
    assert len(calls) == 4


def test_runtime_only_directory_loads_and_aligns_the_same(tiny_aligner, tiny_aligner_dir, tmp_path, speech):
    """After the first load converted the publisher files, the runtime files alone suffice."""
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    for item in tiny_aligner_dir.iterdir():
        if item.is_file() and item.name != "model.safetensors":
            shutil.copyfile(item, runtime / item.name)
    assert (runtime / "manifest.fp32.json").is_file()
    with Qwen3ForcedAligner.load(runtime, Qwen3AlignerOptions(threads=2)) as aligner:
        got = aligner.timestamp_logits(speech, ["the", "apostle"]).logits
    np.testing.assert_array_equal(got, tiny_aligner.timestamp_logits(speech, ["the", "apostle"]).logits)
