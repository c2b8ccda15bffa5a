"""Benchmark: Silero VAD in numpy (ours) against onnxruntime on 10 minutes of audio.

``python benchmarks/bench_vad.py [--seconds 600] [--repeats 3]`` in an environment
with onnxruntime and onespeech-features (tox -e bench). Both run single-threaded:
onnxruntime with one intra/inter-op thread and 512-sample windows carrying the
recurrent state (as silero-vad's OnnxWrapper does), ours with the BLAS pool
limited to one thread. The audio is the shared speech clips repeated to the
requested length. Prints medians (min..max), the ratio ours/onnxruntime, the
real-time factor and the largest probability difference.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # single-threaded BLAS, like the anchor
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_RATE = 16000
sys.path.insert(0, str(ROOT / "tools"))  # onespeech_tools when not installed

from onespeech_tools.data import shared_data_or_skip  # noqa: E402


def speech_audio(seconds: float) -> np.ndarray:
    from onespeech.features import load_audio

    clips = [load_audio(p) for p in sorted((shared_data_or_skip("bench_vad") / "audio").iterdir())
             if p.suffix in {".wav", ".flac", ".mp3"}]
    joined = np.concatenate(clips)
    n = int(seconds * SAMPLE_RATE)
    return np.resize(joined, n).astype(np.float32)


def onnxruntime_probabilities(sess, pcm: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    n_windows = -(-pcm.shape[0] // 512)
    padded = np.zeros(n_windows * 512, dtype=np.float32)
    padded[: pcm.shape[0]] = pcm
    state = np.zeros((2, 1, 128), dtype=np.float32)
    context = np.zeros((1, 64), dtype=np.float32)
    sr = np.array(SAMPLE_RATE, dtype=np.int64)
    out = np.empty(n_windows, dtype=np.float32)
    for k in range(n_windows):
        x = np.concatenate([context, padded[None, k * 512 : (k + 1) * 512]], axis=1)
        prob, state = sess.run(None, {"input": x, "state": state, "sr": sr})
        out[k] = prob[0, 0]
        context = x[:, -64:]
    return out


def _fmt(times: list[float]) -> str:
    return f"{statistics.median(times):8.3f} s ({min(times):.3f}..{max(times):.3f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import onnxruntime

    from onespeech.features import SileroVad

    model = shared_data_or_skip("bench_vad") / "models" / "silero_vad.onnx"
    options = onnxruntime.SessionOptions()
    options.inter_op_num_threads = 1
    options.intra_op_num_threads = 1
    sess = onnxruntime.InferenceSession(str(model), sess_options=options, providers=["CPUExecutionProvider"])
    with tempfile.TemporaryDirectory() as cache:
        vad = SileroVad.load(model, cache_dir=cache)  # conversion happens here, outside the timing
    pcm = speech_audio(args.seconds)
    n_windows = -(-pcm.shape[0] // 512)

    # warm-up, excluded
    vad.speech_probabilities(pcm[: SAMPLE_RATE * 5])
    onnxruntime_probabilities(sess, pcm[: SAMPLE_RATE * 5])
    ours_t, ref_t = [], []
    for _ in range(args.repeats):  # alternate so both see the same machine load
        start = time.perf_counter()
        ours = vad.speech_probabilities(pcm)
        ours_t.append(time.perf_counter() - start)
        start = time.perf_counter()
        ref = onnxruntime_probabilities(sess, pcm)
        ref_t.append(time.perf_counter() - start)

    ours_m, ref_m = statistics.median(ours_t), statistics.median(ref_t)
    print(f"silero-vad 16k | audio {args.seconds:.0f} s ({n_windows} windows) | threads 1 | "
          f"numpy {np.__version__} | onnxruntime {onnxruntime.__version__} | {platform.machine()}")
    print(f"{'run':<14}{'median (min..max)':>32}{'us/window':>12}{'RTF':>10}")
    print(f"{'ours (numpy)':<14}{_fmt(ours_t):>32}{ours_m / n_windows * 1e6:12.1f}{ours_m / args.seconds:10.4f}")
    print(f"{'onnxruntime':<14}{_fmt(ref_t):>32}{ref_m / n_windows * 1e6:12.1f}{ref_m / args.seconds:10.4f}")
    print(f"ratio ours/onnxruntime {ours_m / ref_m:.2f} (target <= 1.00); "
          f"max |p_ours - p_ort| = {float(np.abs(ours - ref).max()):.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
