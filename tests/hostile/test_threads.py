"""One recognizer (or aligner) shared by threads gives each call the answer it gives alone.

Without serialization the decoder's single cache plan was shared by concurrent calls:
inputs of one length share one plan, and a second call resets it under the first (which
then raised "38 positions exceed the cache plan of 37" here, or returned wrong ids);
inputs of another length reallocate it. The threads below run inputs of both kinds.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from onespeech.align import Qwen3AlignerOptions, Qwen3ForcedAligner
from onespeech.qwen3 import Qwen3Options, Qwen3Recognizer

ROUNDS = 6


def tone(seconds: float, hz: float = 220.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    return (0.3 * np.sin(2 * np.pi * hz * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


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


@pytest.mark.xfail(
    strict=False,
    reason="open defect (issue 16): with OMP_NUM_THREADS unset, a shared aligner's logits differ by ~1e-5 "
    "when called from another Python thread (same instance, same input; bit-identical with OMP_NUM_THREADS=1); "
    "the per-thread state behind it is not found yet",
)
def test_one_aligner_shared_by_threads(tiny_aligner_dir) -> None:
    texts = ["the apostle", "of the middle classes", "mister quilter is"]
    pcm = tone(2.0)
    with Qwen3ForcedAligner.load(tiny_aligner_dir, Qwen3AlignerOptions(threads=1)) as aligner:
        alone = [aligner.timestamp_logits(pcm, t.split()).logits for t in texts]

        def work(k: int) -> None:
            for r in range(ROUNDS // 2):
                i = (k + r) % len(texts)
                got = aligner.timestamp_logits(pcm, texts[i].split()).logits
                assert (got == alone[i]).all()

        errors = _run_threads(work)
    assert not errors, errors[0]
