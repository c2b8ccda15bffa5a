import threading

import numpy as np
import pytest

from onespeech.features import NonFiniteSampleError, PcmPowerOverflowError, PcmTooShortError
from onespeech.kernels.threads import get_threads
from onespeech.qwen3.decoder import Generation
from onespeech.qwen3.errors import (
    ContextError,
    MaxNewTokensError,
    RecognitionCancelled,
    UnsupportedLanguageError,
)
from onespeech.qwen3.recognizer import Precision, Qwen3Options, Qwen3Recognizer
from onespeech.qwen3.transcript import Segment, TimingMethod, Transcript, Word
from onespeech_tools.signals import SAMPLE_RATE as SR
from onespeech_tools.signals import tone


def answer(recognizer: Qwen3Recognizer, text: str) -> Generation:
    return Generation(recognizer.tokenizer.encode(text), True)


# -- options ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_new_tokens": 0}, "outside 1..4096"),
        ({"max_new_tokens": 4097}, "outside 1..4096"),
        ({"max_new_tokens": True}, "outside 1..4096"),
        ({"threads": 0}, "threads=0"),
        ({"encoder_attention": "sliding"}, "encoder_attention"),
        ({"precision": "int4"}, "Precision.FLOAT32"),
    ],
)
def test_bad_options_are_refused(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        Qwen3Options(**kwargs)


def test_precision_strings_are_parsed() -> None:
    assert Qwen3Options(precision="bf16").precision is Precision.BFLOAT16


def test_option_defaults() -> None:
    options = Qwen3Options()
    assert (options.context, options.precision, options.threads, options.max_new_tokens, options.encoder_attention) == (
        None, Precision.FLOAT32, None, 512, "full")


# -- loading ----------------------------------------------------------------------------


def test_load_converts_publisher_files_once(model_dir, recognizer) -> None:
    assert (model_dir / "manifest.fp32.json").is_file()
    with Qwen3Recognizer.load(model_dir) as again:  # already converted: loads the runtime files
        assert again.config.text.vocab_size == 151936


def test_context_with_special_tokens_is_refused_at_load(model_dir) -> None:
    with pytest.raises(ContextError, match="special token"):
        Qwen3Recognizer.load(model_dir, Qwen3Options(context="<|im_start|>user"))


def test_context_over_4096_ids_is_refused(model_dir) -> None:
    with pytest.raises(ContextError, match="at most 4096"):
        Qwen3Recognizer.load(model_dir, Qwen3Options(context=" a" * 4097))


def test_close_releases_the_mapped_files(model_dir) -> None:
    with Qwen3Recognizer.load(model_dir) as rec:
        model = rec._model
        assert len(model) > 0
    assert len(model) == 0
    with pytest.raises(ValueError, match="closed"):
        rec.transcribe(tone(1.0))


def test_load_honours_cancellation(model_dir) -> None:
    event = threading.Event()
    event.set()
    with pytest.raises(RecognitionCancelled):
        Qwen3Recognizer.load(model_dir, cancel=event)


# -- input rules ---------------------------------------------------------------------------


def test_empty_audio_gives_an_empty_transcript(recognizer) -> None:
    assert recognizer.transcribe(np.zeros(0, np.float32)) == Transcript.empty()
    assert recognizer.generate(np.zeros(0, np.float32)) == []


def test_audio_of_200_samples_is_refused(recognizer) -> None:
    with pytest.raises(PcmTooShortError):
        recognizer.transcribe(np.zeros(200, np.float32))


def test_nonfinite_audio_is_refused(recognizer) -> None:
    pcm = tone(1.0)
    pcm[123] = np.nan
    with pytest.raises(NonFiniteSampleError):
        recognizer.transcribe(pcm)


def test_power_overflow_is_refused(recognizer) -> None:
    with pytest.raises(PcmPowerOverflowError):
        recognizer.transcribe(np.full(1000, 1e300))


def test_unsupported_language_is_refused(recognizer) -> None:
    with pytest.raises(UnsupportedLanguageError, match="'xx'"):
        recognizer.transcribe(tone(1.0), language="xx")


# -- generation ------------------------------------------------------------------------------


def test_generate_returns_raw_ids_up_to_the_limit(recognizer) -> None:
    ids = recognizer.generate(tone(1.0), max_new_tokens=5)
    assert len(ids) == 5 and all(isinstance(i, int) for i in ids)
    assert recognizer.generate(tone(1.0), max_new_tokens=3) == ids[:3]
    with pytest.raises(ValueError, match="outside 1..4096"):
        recognizer.generate(tone(1.0), max_new_tokens=0)


def test_reaching_max_new_tokens_raises(recognizer) -> None:
    # random weights never choose an end token within 8 steps
    with pytest.raises(MaxNewTokensError, match="max_new_tokens=8"):
        recognizer.transcribe(tone(1.0))


def test_forced_language_prompt_and_written_words(recognizer, monkeypatch) -> None:
    seen = {}

    def generate(embeds, max_new, eos, cancel, **kw):
        seen["n"] = embeds.shape[0]
        return answer(recognizer, "Hello, big world.")

    monkeypatch.setattr(recognizer.decoder, "generate", generate)
    result = recognizer.transcribe(tone(2.0), language="en")
    assert result.text == "Hello, big world." and result.language == "en"
    words = (Word("Hello,"), Word("big"), Word("world."))
    assert result.segments == (Segment(0.0, 2.0, "Hello, big world.", "en", words),)
    assert result.words == words  # a view of the segment's words
    assert all(w.start is None and w.end is None and w.timing_method is TimingMethod.NONE for w in result.words)


def test_auto_language_is_parsed_from_the_answer(recognizer, monkeypatch) -> None:
    monkeypatch.setattr(
        recognizer.decoder, "generate", lambda *a, **k: answer(recognizer, "language Chinese<asr_text>你好，世界。")
    )
    result = recognizer.transcribe(tone(1.5), language=None)
    assert (result.text, result.language) == ("你好，世界。", "zh")
    assert [w.text for w in result.words] == ["你", "好", "，", "世", "界", "。"]


def test_silence_answer_gives_no_segments(recognizer, monkeypatch) -> None:
    monkeypatch.setattr(recognizer.decoder, "generate", lambda *a, **k: answer(recognizer, "language None<asr_text>"))
    assert recognizer.transcribe(tone(1.0), language=None) == Transcript.empty()


def test_cancellation_is_honoured(recognizer) -> None:
    event = threading.Event()
    event.set()
    with pytest.raises(RecognitionCancelled):
        recognizer.transcribe(tone(1.0), cancel=event)


def test_threads_option_sets_the_thread_count(recognizer, monkeypatch) -> None:
    counts = []
    real = recognizer.encoder.forward

    def forward(*args, **kwargs):
        counts.append(get_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(recognizer.encoder, "forward", forward)
    recognizer.generate(tone(1.0), max_new_tokens=1)
    assert counts == [1]


# -- long input ------------------------------------------------------------------------------


def test_long_audio_uses_vad_chunks_with_fresh_state_on_the_source_clock(model_dir, monkeypatch, fake_vad) -> None:
    vad = fake_vad([(16000, 20 * SR), (25 * SR, 40 * SR), (44 * SR, 70 * SR)])
    with Qwen3Recognizer.load(model_dir, Qwen3Options(max_new_tokens=8), vad=vad) as rec:
        lengths = []
        texts = iter(["one.", "two.", "three.", "four."])

        def generate(embeds, max_new, eos, cancel, **kw):
            lengths.append(embeds.shape[0])
            return answer(rec, next(texts))

        monkeypatch.setattr(rec.decoder, "generate", generate)
        result = rec.transcribe(tone(75.0), language="en")
    assert vad.calls == 1
    assert len(result.segments) == len(lengths) >= 3
    starts = [s.start for s in result.segments]
    assert starts == sorted(starts) and result.segments[-1].end <= 75.0
    assert all(s.end - s.start <= 30.0 for s in result.segments)
    assert result.text == " ".join(s.text for s in result.segments)


# -- precision ---------------------------------------------------------------------------------


def test_bfloat16_precision_keeps_bf16_weights_and_rounds_activations(model_dir, recognizer) -> None:
    from onespeech.kernels import ops

    with Qwen3Recognizer.load(model_dir, Qwen3Options(precision=Precision.BFLOAT16, threads=1)) as bf16:
        assert (model_dir / "manifest.bf16.json").is_file()
        assert bf16._model["thinker.model.embed_tokens.weight"].dtype == np.uint16
        pcm = tone(1.0)
        from onespeech.features import log_mel_spectrogram

        mel = log_mel_spectrogram(pcm)
        got = bf16.encoder.forward(mel)
        want = recognizer.encoder.forward(mel)
        assert np.array_equal(got, ops.round_bf16(got))
        assert np.abs(got - want).max() / np.abs(want).max() < 0.05
        assert len(bf16.generate(pcm, max_new_tokens=3)) == 3


def test_long_file_with_the_real_vad(model_dir, shared_data, monkeypatch, tmp_path) -> None:
    from onespeech.features import load_audio

    pcm = load_audio(shared_data / "audio" / "multilingual_en_de.mp3")  # 59.9 s
    options = Qwen3Options(max_new_tokens=8)
    vad_path = shared_data / "models" / "silero_vad.onnx"
    monkeypatch.setenv("ONESPEECH_HOME", str(tmp_path))  # the VAD's converted file goes here
    with Qwen3Recognizer.load(model_dir, options, vad=vad_path) as rec:
        spans = []

        def generate(embeds, max_new, eos, cancel, **kw):
            spans.append(embeds.shape[0])
            return answer(rec, f"part {len(spans)}")

        monkeypatch.setattr(rec.decoder, "generate", generate)
        result = rec.transcribe(pcm, language="en")
    assert len(result.segments) == len(spans) >= 2
    assert all(0 < s.end - s.start <= 30.0 for s in result.segments)
    assert all(a.end <= b.start for a, b in zip(result.segments[:-1], result.segments[1:], strict=True))
    assert result.segments[-1].end <= pcm.shape[0] / SR
    assert result.text == " ".join(f"part {i}" for i in range(1, len(spans) + 1))
    # the file chunker's chunks: the planner over the VAD regions of the whole audio
    from onespeech.features import SileroVad, plan_chunks

    planned = plan_chunks(SileroVad.load(vad_path).speech_regions(pcm), pcm.shape[0], pcm=pcm)
    assert [(s.start, s.end) for s in result.segments] == [(c.start_s, c.end_s) for c in planned]


def test_catalog_id_resolves_through_the_cache(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from onespeech.kernels.fetch import OfflineModeError

    monkeypatch.setenv("ONESPEECH_HOME", str(tmp_path))
    monkeypatch.setenv("ONESPEECH_OFFLINE", "1")
    with pytest.raises(OfflineModeError, match="model.safetensors"):
        Qwen3Recognizer.load("Qwen/Qwen3-ASR-0.6B")


def test_unknown_model_name_is_refused(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from onespeech.kernels.errors import UnknownModelError

    monkeypatch.setenv("ONESPEECH_HOME", str(tmp_path))
    with pytest.raises(UnknownModelError, match="Qwen/Qwen3-ASR-0.6B"):
        Qwen3Recognizer.load("Qwen/No-Such-Model")


def test_load_takes_the_options_as_keywords(model_dir) -> None:
    """The spec's ``Load(directory, threads: 4)`` form; options and keywords together are refused."""
    with Qwen3Recognizer.load(model_dir, threads=1, max_new_tokens=8, context="Vocabulary: log-mel.") as rec:
        assert rec.options == Qwen3Options(context="Vocabulary: log-mel.", threads=1, max_new_tokens=8)
    with pytest.raises(TypeError, match="give options= or the keywords context=, not both"):
        Qwen3Recognizer.load(model_dir, Qwen3Options(), context="x")
