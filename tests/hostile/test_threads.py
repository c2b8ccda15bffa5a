"""One recognizer, aligner or VAD shared by threads gives each call the answer it gives alone.

Without serialization the decoder's single cache plan was shared by concurrent calls:
inputs of one length share one plan, and a second call resets it under the first (which
then raised "38 positions exceed the cache plan of 37" here, or returned wrong ids);
inputs of another length reallocate it. The threads below run inputs of both kinds.

Every float result must also be bit-identical to the main thread's: threadpoolctl ignored
the BLAS thread count a worker thread set (only the first thread to set one may), so an
instance with ``threads=1`` ran its products on the process's count in workers, and the
logits moved by up to 8.5e-6. The process count is set to every CPU here, so the
instances' ``threads=1`` (and the VAD's one thread) differ from it in any environment.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from onespeech.align import Qwen3AlignerOptions, Qwen3ForcedAligner
from onespeech.features import SileroVad
from onespeech.kernels.threads import available_cpus, thread_limit
from onespeech.qwen3 import Qwen3Options, Qwen3Recognizer

ROUNDS = 6


def tone(seconds: float, hz: float = 220.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    return (0.3 * np.sin(2 * np.pi * hz * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


@pytest.fixture(autouse=True)
def _process_threads() -> Iterator[None]:
    """The process's count at every CPU: the count a worker thread kept when its own was ignored."""
    with thread_limit(available_cpus()):
        yield


def _run_threads(work, n_threads: int = 3) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(n_threads)

    def body(k: int) -> None:
        try:
            barrier.wait()
            work(k)
        except BaseException as exc:  # collected: an assertion in a thread must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    return errors


def test_one_recognizer_shared_by_threads(tiny_asr_dir) -> None:
    # three clips of one length (one cache plan) and one of another (a new plan)
    inputs = [tone(1.2, 220), tone(1.2, 330, seed=1), tone(1.2, 440, seed=2), tone(2.3, 550, seed=3)]
    with Qwen3Recognizer.load(tiny_asr_dir, Qwen3Options(threads=1, max_new_tokens=6)) as rec:
        alone = [rec.generate(pcm) for pcm in inputs]

        def work(k: int) -> None:
            for r in range(ROUNDS):
                i = (k + r) % len(inputs)
                assert rec.generate(inputs[i]) == alone[i]

        errors = _run_threads(work)
    assert not errors, errors[0]


def test_recognizer_floats_are_identical_in_worker_threads(tiny_asr_dir) -> None:
    # recognize() under the instance's thread count, as generate() and transcription run it
    inputs = [tone(1.2, 220), tone(2.3, 550, seed=3)]
    with Qwen3Recognizer.load(tiny_asr_dir, Qwen3Options(threads=1)) as rec:

        def floats(pcm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            with thread_limit(rec.options.threads):
                result = rec.recognize(pcm, None, 3, keep_first_logits=True)
            assert result.generation.first_logits is not None
            return result.audio_embeds, result.generation.first_logits

        alone = [floats(pcm) for pcm in inputs]

        def work(k: int) -> None:
            for r in range(2):
                i = (k + r) % len(inputs)
                embeds, logits = floats(inputs[i])
                assert np.array_equal(embeds, alone[i][0]) and np.array_equal(logits, alone[i][1])

        errors = _run_threads(work)
    assert not errors, errors[0]


def test_one_vad_shared_by_threads(vad_path: Path, tmp_path: Path) -> None:
    # no lock here: calls run at once, each in the VAD's own one-thread block
    vad = SileroVad.load(vad_path, cache_dir=tmp_path)
    inputs = [tone(4.0, 200 + 100 * i, seed=i) for i in range(3)]
    alone = [vad.speech_probabilities(pcm) for pcm in inputs]

    def work(k: int) -> None:
        for r in range(ROUNDS):
            i = (k + r) % len(inputs)
            assert np.array_equal(vad.speech_probabilities(inputs[i]), alone[i])

    errors = _run_threads(work)
    assert not errors, errors[0]


def test_one_aligner_shared_by_threads(tiny_aligner_dir) -> None:
    texts = ["the apostle", "of the middle classes", "mister quilter is"]
    pcm = tone(2.0)
    with Qwen3ForcedAligner.load(tiny_aligner_dir, Qwen3AlignerOptions(threads=1)) as aligner:
        alone = [aligner.timestamp_logits(pcm, t.split()).logits for t in texts]

        def work(k: int) -> None:
            for r in range(ROUNDS // 2):
                i = (k + r) % len(texts)
                got = aligner.timestamp_logits(pcm, texts[i].split()).logits
                assert np.array_equal(got, alone[i])

        errors = _run_threads(work)
    assert not errors, errors[0]
