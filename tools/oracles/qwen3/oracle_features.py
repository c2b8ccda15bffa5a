"""Oracle: Whisper log-mel features from transformers 4.57.6, as qwen-asr 0.0.6 computes them.

``python tools/oracles/qwen3/oracle_features.py --out DIR`` (reference environment)
writes one ``DIR/features/<case>.npz`` per input, each holding:

- ``pcm``: the float32 16 kHz mono samples the features were computed from (so the
  test compares features on identical PCM, whatever decoder it uses);
- ``torch``: ``WhisperFeatureExtractor(pcm, sampling_rate=16000, padding=True,
  truncation=False, return_attention_mask=True)``, the exact call of
  ``Qwen3ASRProcessor`` for one utterance; with torch installed this is the float32
  ``torch.stft`` path;
- ``numpy``: the extractor's numpy path (``_np_extract_fbank_features``), the one
  that runs when torch is absent;
- ``n_frames``: the attention-mask length the reference reports.

Cases: every clip in shared/data/audio (decoded by qwen-asr's own
``normalize_audio_input``: librosa over soundfile, channel mean, soxr "HQ" resampling,
peak normalisation only above 1.0) and seeded synthetic
signals (silence, DC, full-scale white noise, sines, a click, 201 samples, exactly
30 s). ``index.json`` lists the cases and the library versions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tools/ (onespeech_tools) when not installed

from onespeech_tools.data import shared_data_or_skip  # noqa: E402


def decode_clip(path: Path) -> np.ndarray:
    """The reference toolkit's own loader: librosa/soundfile, channel mean, soxr_hq, peak clip."""
    from qwen_asr.inference.utils import normalize_audio_input

    return np.ascontiguousarray(normalize_audio_input(str(path)), dtype=np.float32)


def synthetic_signals() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(20260130)
    t = np.arange(3 * SAMPLE_RATE) / SAMPLE_RATE
    signals = {
        "synthetic_silence_2s": np.zeros(2 * SAMPLE_RATE),
        "synthetic_dc_half_2s": np.full(2 * SAMPLE_RATE, 0.5),
        "synthetic_white_noise_full_scale_5s": rng.uniform(-1.0, 1.0, 5 * SAMPLE_RATE),
        "synthetic_201_samples": rng.uniform(-0.5, 0.5, 201),
        "synthetic_exactly_30s": 0.1 * rng.standard_normal(30 * SAMPLE_RATE),
    }
    for freq in (50, 440, 1000, 3000, 7000, 7999):
        signals[f"synthetic_sine_{freq}hz_3s"] = 0.5 * np.sin(2 * np.pi * freq * t)
    click = np.zeros(SAMPLE_RATE)
    click[SAMPLE_RATE // 2] = 1.0
    signals["synthetic_click_1s"] = click
    return {name: x.astype(np.float32) for name, x in signals.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()

    import transformers
    from transformers import WhisperFeatureExtractor

    data = shared_data_or_skip("oracle_features")
    config_dir = data / "configs" / "Qwen3-ASR-0.6B"
    audio_dir = data / "audio"
    extractor = WhisperFeatureExtractor.from_pretrained(str(config_dir))

    cases = {path.stem + path.suffix.replace(".", "_"): decode_clip(path)
             for path in sorted(audio_dir.iterdir()) if path.suffix in {".wav", ".flac", ".mp3", ".ogg"}}
    cases.update(synthetic_signals())

    out_dir = args.out / "features"
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, pcm in cases.items():
        # the call Qwen3ASRProcessor makes for one utterance
        batch = extractor(pcm, sampling_rate=SAMPLE_RATE, padding=True, truncation=False,
                          return_attention_mask=True, return_tensors="np")
        torch_path = np.asarray(batch["input_features"][0], dtype=np.float32)
        numpy_path = np.asarray(extractor._np_extract_fbank_features(pcm[None], "cpu")[0], dtype=np.float32)
        n_frames = int(batch["attention_mask"][0].sum())
        np.savez(out_dir / f"{name}.npz", pcm=pcm, torch=torch_path, numpy=numpy_path,
                 n_frames=np.int64(n_frames))
        gap = float(np.abs(torch_path - numpy_path).max()) if torch_path.size else 0.0
        print(f"  {name}: {pcm.shape[0]} samples, {torch_path.shape} features, torch-vs-numpy {gap:.2e}")

    import soundfile
    import soxr
    import torch

    index = {
        "cases": sorted(cases),
        "call": "extractor(pcm, sampling_rate=16000, padding=True, truncation=False, return_attention_mask=True)",
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                     "numpy": np.__version__, "soundfile": soundfile.__version__,
                     "libsndfile": soundfile.__libsndfile_version__, "soxr": soxr.__version__},
    }
    (out_dir / "index.json").write_text(json.dumps(index, indent=1))
    print(f"oracle_features: {len(cases)} cases in {out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
