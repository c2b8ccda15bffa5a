"""Oracle: Resemblyzer 0.1.4 (torch) speaker embeddings of real clips.

``python tools/oracles/speakers/oracle_resemblyzer.py --out DIR`` (reference
environment plus ``pip install resemblyzer==0.1.4``) runs the real package on clips
from shared/data/audio and writes ``DIR/resemblyzer/<case>.npz`` with

- ``raw``: the clip as ``librosa.load(sr=None)`` + ``librosa.resample`` to 16 kHz give it,
- ``normalized``: ``audio.normalize_volume(raw, -30, increase_only=True)``,
- ``wav``: ``preprocess_wav(path)`` (resample, normalise, trim long silences),
- ``mel``: ``audio.wav_to_mel_spectrogram(wav)`` (frames x 40, float32),
- ``embed``, ``partial_embeds``, ``slices`` (wav slice start/stop of each partial):
  ``VoiceEncoder("cpu").embed_utterance(wav, return_partials=True)``.

Cases: whole clips (short and long, several languages), a clip cut below one partial
(1.0 s) and one channel of the stereo diarization recording. ``index.json`` lists them
with the package versions. Torch runs on one thread. Exits 77 without the shared data.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tools/ (onespeech_tools) when not installed

from onespeech_tools.data import shared_data_or_skip  # noqa: E402

SAMPLE_RATE = 16000
CLIPS = {
    "jfk": "jfk.flac",
    "librispeech": "librispeech_test-clean_1995-1837-0001.wav",
    "aishell": "aishell1_BAC009S0724W0121.wav",
    "picovoice_de": "picovoice_test_de.wav",
    "picovoice_ja": "picovoice_test_ja.wav",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    data = shared_data_or_skip("resemblyzer oracle")
    import librosa
    import resemblyzer
    import torch
    from resemblyzer import VoiceEncoder, audio, preprocess_wav

    torch.set_num_threads(1)
    out = args.out / "resemblyzer"
    out.mkdir(parents=True, exist_ok=True)
    encoder = VoiceEncoder("cpu", verbose=False)
    cases = {}

    def record(name: str, raw: np.ndarray, wav: np.ndarray) -> None:
        raw = np.asarray(raw, dtype=np.float32)
        wav = np.asarray(wav, dtype=np.float32)
        embed, partials, slices = encoder.embed_utterance(wav, return_partials=True)
        np.savez(
            out / f"{name}.npz",
            raw=raw,
            normalized=np.asarray(audio.normalize_volume(raw, -30, increase_only=True), dtype=np.float32),
            wav=wav,
            mel=audio.wav_to_mel_spectrogram(wav),
            embed=embed.astype(np.float32),
            partial_embeds=partials.astype(np.float32),
            slices=np.array([[s.start, s.stop] for s in slices], dtype=np.int64),
        )
        cases[name] = {"samples": int(wav.shape[0]), "partials": len(slices)}
        print(f"resemblyzer {name}: {wav.shape[0] / SAMPLE_RATE:.2f} s, {len(slices)} partials")

    for name, clip in CLIPS.items():
        path = data / "audio" / clip
        loaded, sr = librosa.load(str(path), sr=None)
        raw = librosa.resample(loaded, orig_sr=sr, target_sr=SAMPLE_RATE)
        record(name, raw, preprocess_wav(path))
    jfk = np.load(out / "jfk.npz")
    record("short_1s", jfk["raw"][:SAMPLE_RATE], preprocess_wav(jfk["raw"][:SAMPLE_RATE]))
    stereo, sr = librosa.load(str(data / "audio" / "stereo_diarization.wav"), sr=None, mono=False)
    left = librosa.resample(stereo[0], orig_sr=sr, target_sr=SAMPLE_RATE)
    record("stereo_left", left, preprocess_wav(left))
    index = {
        "resemblyzer": resemblyzer.__version__ if hasattr(resemblyzer, "__version__") else "0.1.4",
        "torch": torch.__version__,
        "librosa": librosa.__version__,
        "cases": cases,
    }
    (out / "index.json").write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
