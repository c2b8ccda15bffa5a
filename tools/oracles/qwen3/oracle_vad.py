"""Oracle: Silero VAD speech probabilities from onnxruntime.

``python tools/oracles/qwen3/oracle_vad.py --out DIR`` (reference environment) runs
shared/data/models/silero_vad.onnx with onnxruntime exactly as silero-vad 6.2.3's
``OnnxWrapper.audio_forward`` does (one thread; 512-sample windows, the last one
zero-padded; each window preceded by the previous window's last 64 samples, zeros
before the first; state [2, 1, 128] carried across windows and fresh per stream) and
writes ``DIR/vad/<case>.npz`` with ``pcm`` (float32 16 kHz) and ``probabilities``
(float32, one per window). Cases: every shared clip (decoded by qwen-asr's
``normalize_audio_input``), synthetic silence and noise, and two clips joined into
one stream (state carried across the join). ``index.json`` lists them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000
WINDOW = 512
CONTEXT = 64
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tools/ (onespeech_tools) when not installed

from onespeech_tools.data import shared_data_or_skip  # noqa: E402


def decode_clip(path: Path) -> np.ndarray:
    from qwen_asr.inference.utils import normalize_audio_input

    return np.ascontiguousarray(normalize_audio_input(str(path)), dtype=np.float32)


def session(model: Path):  # type: ignore[no-untyped-def]
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.inter_op_num_threads = 1
    options.intra_op_num_threads = 1
    return onnxruntime.InferenceSession(str(model), sess_options=options, providers=["CPUExecutionProvider"])


def probabilities(sess, pcm: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    """silero-vad's audio_forward: fresh state, zero context, zero-padded last window."""
    n_windows = -(-pcm.shape[0] // WINDOW)
    padded = np.zeros(n_windows * WINDOW, dtype=np.float32)
    padded[: pcm.shape[0]] = pcm
    state = np.zeros((2, 1, 128), dtype=np.float32)
    context = np.zeros((1, CONTEXT), dtype=np.float32)
    sr = np.array(SAMPLE_RATE, dtype=np.int64)
    out = np.empty(n_windows, dtype=np.float32)
    for k in range(n_windows):
        x = np.concatenate([context, padded[None, k * WINDOW : (k + 1) * WINDOW]], axis=1)
        prob, state = sess.run(None, {"input": x, "state": state, "sr": sr})
        out[k] = prob[0, 0]
        context = x[:, -CONTEXT:]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()

    data = shared_data_or_skip("oracle_vad")
    model = data / "models" / "silero_vad.onnx"
    audio_dir = data / "audio"
    sess = session(model)

    cases = {path.stem + path.suffix.replace(".", "_"): decode_clip(path)
             for path in sorted(audio_dir.iterdir()) if path.suffix in {".wav", ".flac", ".mp3", ".ogg"}}
    rng = np.random.default_rng(20260131)
    cases["synthetic_silence_3s"] = np.zeros(3 * SAMPLE_RATE, dtype=np.float32)
    cases["synthetic_white_noise_4s"] = (0.3 * rng.standard_normal(4 * SAMPLE_RATE)).astype(np.float32)
    cases["synthetic_full_scale_noise_2s"] = rng.uniform(-1, 1, 2 * SAMPLE_RATE).astype(np.float32)
    # state carried across a join: noise, then speech, then silence, as one stream
    cases["joined_noise_jfk_silence"] = np.concatenate([
        (0.05 * rng.standard_normal(SAMPLE_RATE + 100)).astype(np.float32),
        cases["jfk_flac"], np.zeros(SAMPLE_RATE // 2 + 7, dtype=np.float32)])

    out_dir = args.out / "vad"
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, pcm in cases.items():
        probs = probabilities(sess, pcm)
        np.savez(out_dir / f"{name}.npz", pcm=pcm, probabilities=probs)
        print(f"  {name}: {pcm.shape[0]} samples, {probs.shape[0]} windows, max p {probs.max():.3f}")

    import onnxruntime

    index = {"cases": sorted(cases), "model_sha256": _sha256(model),
             "versions": {"onnxruntime": onnxruntime.__version__, "numpy": np.__version__}}
    (out_dir / "index.json").write_text(json.dumps(index, indent=1))
    print(f"oracle_vad: {len(cases)} cases in {out_dir}")
    return 0


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


if __name__ == "__main__":
    raise SystemExit(main())
