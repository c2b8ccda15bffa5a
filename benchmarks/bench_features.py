"""Benchmark: Whisper log-mel features, ours against transformers' WhisperFeatureExtractor.

``python benchmarks/bench_features.py [--repeats 7]`` in an environment with
transformers 4.57.6 and onespeech-features (tox -e bench). For 30 s and 300 s of
speech (the shared clips repeated) it times, alternating in one run:

- ours: ``onespeech.features.mel.log_mel`` (numpy, batched float64 rFFT);
- the anchor: the extractor's numpy path (``_np_extract_fbank_features``), the code
  that runs when torch is not installed;
- for information: the extractor as qwen-asr calls it with torch installed
  (``padding=True, truncation=False``: float32 torch.stft).

BLAS and torch are limited to one thread. Prints medians (min..max), the ratio
anchor/ours (target >= 2) and the largest feature difference.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_RATE = 16000
sys.path.insert(0, str(ROOT / "tools"))  # onespeech_tools when not installed

from onespeech_tools.data import shared_data_or_skip  # noqa: E402


def speech(seconds: int) -> np.ndarray:
    from onespeech.features import load_audio

    clips = [load_audio(p) for p in sorted((shared_data_or_skip("bench_features") / "audio").iterdir())
             if p.suffix in {".wav", ".flac", ".mp3"}]
    return np.resize(np.concatenate(clips), seconds * SAMPLE_RATE).astype(np.float32)


def _time(fn, repeats: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def _fmt(times: list[float]) -> str:
    return f"{statistics.median(times) * 1e3:9.1f} ms ({min(times) * 1e3:.1f}..{max(times) * 1e3:.1f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    import torch
    import transformers
    from transformers import WhisperFeatureExtractor

    from onespeech.features.mel import log_mel

    torch.set_num_threads(1)
    extractor = WhisperFeatureExtractor.from_pretrained(str(shared_data_or_skip("bench_features") / "configs" / "Qwen3-ASR-0.6B"))

    def anchor(pcm: np.ndarray) -> np.ndarray:
        return extractor._np_extract_fbank_features(pcm[None], "cpu")[0]

    def reference_torch(pcm: np.ndarray) -> np.ndarray:
        return extractor(pcm, sampling_rate=SAMPLE_RATE, padding=True, truncation=False,
                         return_attention_mask=True, return_tensors="np")["input_features"][0]

    print(f"whisper log-mel 128 | threads 1 | numpy {np.__version__} | transformers {transformers.__version__} "
          f"| torch {torch.__version__} | {platform.machine()}")
    for seconds in (30, 300):
        pcm = speech(seconds)
        ours_f, anchor_f = log_mel(pcm), anchor(pcm)  # warm-up, excluded
        torch_f = reference_torch(pcm)
        ours_t, anchor_t, torch_t = [], [], []
        for _ in range(args.repeats):  # alternate so all see the same machine load
            ours_t += _time(lambda: log_mel(pcm), 1)  # noqa: B023
            anchor_t += _time(lambda: anchor(pcm), 1)  # noqa: B023
            torch_t += _time(lambda: reference_torch(pcm), 1)  # noqa: B023
        ours_m = statistics.median(ours_t)
        print(f"input {seconds} s ({pcm.shape[0]} samples, {ours_f.shape[1]} frames)")
        print(f"  {'run':<34}{'median (min..max)':>34}{'anchor/run':>12}{'max |diff|':>12}")
        print(f"  {'ours (numpy)':<34}{_fmt(ours_t):>34}{statistics.median(anchor_t) / ours_m:12.2f}{0.0:12.1e}")
        print(f"  {'anchor: extractor numpy path':<34}{_fmt(anchor_t):>34}{1.0:12.2f}"
              f"{float(np.abs(anchor_f - ours_f).max()):12.1e}")
        print(f"  {'info: extractor torch path':<34}{_fmt(torch_t):>34}"
              f"{statistics.median(anchor_t) / statistics.median(torch_t):12.2f}"
              f"{float(np.abs(torch_f - ours_f).max()):12.1e}")
        print(f"  ratio anchor/ours {statistics.median(anchor_t) / ours_m:.2f} (target >= 2.00)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
