"""A file's chunks decoded together give the Document of decoding them one at a time.

The tiny ending checkpoint answers the chunks of real speech with ids that end at
different steps (some early, some late), so chunks leave the batch at different
steps while others keep decoding and later chunks join; the Document (text, words,
times, speakers: its JSON) must not change with the batch size or the memory budget;
nor must a chunk limit (one chunk of the longer files reaches the token budget: the
error names the same chunk and its partial Document holds the same chunks before it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onespeech.features import load_audio
from onespeech.qwen3 import BatchDecoder
from onespeech.speech import transcribe
from onespeech.speech.errors import ChunkLimitError

BUDGET = 256
S = 16000
PIECES = ("picovoice_test.wav", "jfk.flac", "picovoice_test_de.wav", "librispeech_test-clean_1995-1837-0001.wav",
          "picovoice_test_es.wav", "jfk.flac", "picovoice_test_fr.wav", "picovoice_test.wav")


@pytest.fixture(scope="module")
def speech_file(shared_data: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A file of the first ``n`` pieces of speech, each followed by 2 s of silence (made once per ``n``)."""
    root = tmp_path_factory.mktemp("batched")
    made: dict[int, Path] = {}

    def make(n: int) -> Path:
        if n not in made:
            parts = []
            for name in PIECES[:n]:
                parts += [load_audio(shared_data / "audio" / name), np.zeros(2 * S, dtype=np.float32)]
            made[n] = root / f"speech_{n}.flac"
            soundfile.write(made[n], np.concatenate(parts), S, subtype="PCM_24")
        return made[n]

    return make


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(live sequences, sequences that left) of every decode step."""
    seen: list[tuple[int, int]] = []
    original = BatchDecoder.step

    def spy(self: BatchDecoder, timeout: float = 0.05) -> list:  # type: ignore[type-arg]
        live = len(self)
        left = original(self, timeout)
        if live:
            seen.append((live, len(left)))
        return left

    monkeypatch.setattr(BatchDecoder, "step", spy)
    return seen


def _document(path: Path, runtime_dirs, vad_path: Path, **options: object) -> str:  # type: ignore[no-untyped-def]
    """The Document's JSON, or a chunk limit's message and partial Document (the same either way too)."""
    try:
        return transcribe(path, runtime_dirs.asr, max_new_tokens=BUDGET, threads=1, progress=False, vad=vad_path,
                          **options).to_json()
    except ChunkLimitError as error:
        assert error.partial is not None
        return f"{error}\n{error.partial.to_json()}"


def test_batched_document_equals_one_chunk_at_a_time(speech_file, runtime_dirs, vad_path, steps) -> None:  # type: ignore[no-untyped-def]
    path = speech_file(len(PIECES))
    alone = _document(path, runtime_dirs, vad_path, aligner=runtime_dirs.aligner, decode_batch=1)
    assert steps and max(live for live, _ in steps) == 1
    steps.clear()
    batched = _document(path, runtime_dirs, vad_path, aligner=runtime_dirs.aligner)  # the default batch
    assert batched == alone
    # the chunks really decoded together, and left the batch at different steps
    assert max(live for live, _ in steps) >= 3
    assert sum(1 for _, left in steps if left) >= 3
    assert len({live for live, _ in steps}) >= 3, f"the batch never shrank step by step: {steps}"
    assert '"words"' in alone and len(set(alone.split('"start"'))) > 3
    # two at a time: the third chunk joins when one of the first two leaves, while the other decodes
    steps.clear()
    assert _document(path, runtime_dirs, vad_path, aligner=runtime_dirs.aligner, decode_batch=2) == alone
    joined = [a for (a, left), (b, _) in zip(steps, steps[1:], strict=False) if left and b > a - left]
    assert joined, f"no chunk joined a running batch: {steps}"


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(2, len(PIECES)), batch=st.integers(1, 6), memory_mb=st.sampled_from([1, 2, 1024, None]))
def test_any_batch_bound_gives_the_same_document(speech_file, runtime_dirs, vad_path, n, batch, memory_mb,  # type: ignore[no-untyped-def]
                                                 alone_documents) -> None:
    path = speech_file(n)
    got = _document(path, runtime_dirs, vad_path, aligner=None, speakers=False, decode_batch=batch,
                    decode_memory_mb=memory_mb)
    assert got == alone_documents(path)


@pytest.fixture(scope="module")
def alone_documents(runtime_dirs, vad_path):  # type: ignore[no-untyped-def]
    cache: dict[Path, str] = {}

    def get(path: Path) -> str:
        if path not in cache:
            cache[path] = _document(path, runtime_dirs, vad_path, aligner=None, speakers=False, decode_batch=1)
        return cache[path]

    return get


@pytest.mark.parametrize(("name", "allowed"), [("decode_batch", "an int >= 1$"),
                                               ("decode_memory_mb", r"an int >= 1 \(MiB\) or None \(auto\)$")])
@pytest.mark.parametrize("value", [0, -1, True, 2.0, "8", None, "auto"])
def test_bad_batch_bounds_are_refused_naming_the_option(name: str, allowed: str, value: object) -> None:
    from onespeech.speech import TranscribeOptions

    if name == "decode_memory_mb" and value is None:  # auto
        assert TranscribeOptions(decode_memory_mb=None).batch_limits().kv_budget_bytes is None
        return
    with pytest.raises(ValueError, match=f"^{name}={value!r} is invalid; expected {allowed}"):
        TranscribeOptions(**{name: value})  # type: ignore[arg-type]


def test_the_default_decode_memory_is_auto_and_an_explicit_one_is_mib() -> None:
    from onespeech.speech import TranscribeOptions

    assert TranscribeOptions().decode_memory_mb is None
    assert TranscribeOptions().batch_limits().kv_budget_bytes is None  # the recognizer sizes it
    assert TranscribeOptions(decode_memory_mb=3).batch_limits().kv_budget_bytes == 3 << 20


def test_batch_bounds_change_no_output_so_no_record_keeps_them() -> None:
    from onespeech.speech import TranscribeOptions

    for memory_mb in (64, None):
        record = TranscribeOptions(decode_batch=3, decode_memory_mb=memory_mb).record()
        assert "decode_batch" not in record and "decode_memory_mb" not in record
