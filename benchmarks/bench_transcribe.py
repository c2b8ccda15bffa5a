"""transcribe(file): peak memory against audio length and model size, and speed against the reference.

    python benchmarks/bench_transcribe.py memory [--minutes 1 60] [--cases silence3 every40 every5 continuous]
    python benchmarks/bench_transcribe.py full [--tokens 32] [--threads 2] [--clip jfk.flac]
                                               [--reference-python PYTHON]

``memory``: the full path (decode, VAD chunks, recognition, release, replay, alignment)
on the tiny checkpoints (``onespeech_tools.checkpoints``; the aligner with ``max_slot``,
the ASR plain so that every chunk runs the full token budget, or with ``--ending`` the
variant whose answers end; docs/checkpoints.md) with speakers attributed (the default), over
clips of real speech repeated to 1 minute and to 60 minutes, in the layouts of
``--cases`` (default all): ``silence3`` the clips with 3 s silences between; ``every40`` and ``every5``
4 s of speech starting every 40 s and every 5 s (sparse speech: the VAD, the planner and
the speaker stage see a region per period); ``continuous`` the clips back to back. Each
run is a process of its own; prints each peak RSS and, per case, the ratio of each
length to the first (the spec: within 5%).

``full``: the full-size 0.6B ASR and 0.6B aligner checkpoints (seeded random weights,
generated into build/checkpoints on first use; FP32). Prints our peak RSS against the
larger model's FP32 weights (the spec: at most weights + 15%), and the wall time and
real-time factor of ``transcribe(..., language="English")`` against the reference
toolkit's ``Qwen3ASRModel.transcribe(..., return_time_stamps=True)`` (qwen-asr 0.0.6,
CPU torch, float32) on the same file, both loading their models in the timed call's
process. Random weights do not end their answers, so both run a fixed token budget
per chunk (``--tokens``): ours with the budget reached counted as the end of the
chunk instead of the error a user gets (the benchmark patches that one check).

Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from source_tree import require_compiled_kernels, source_paths  # benchmarks/ is the script's directory

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "checkpoints"
SR = 16000
PATTERN = ("picovoice_test.wav", "jfk.flac", "picovoice_test_de.wav", "librispeech_test-clean_1995-1837-0001.wav")


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# -- workers (one process per measurement) ------------------------------------------------


def worker_ours(args: argparse.Namespace) -> dict:
    import importlib

    from onespeech.speech import transcribe

    pipeline = importlib.import_module("onespeech.speech.transcribe")  # the module, not the function

    class _BudgetIsTheEnd:  # no chunk reaches "the limit": a budget reached counts as the chunk's end here
        MAX_NEW_TOKENS = object()

    pipeline.Finish = _BudgetIsTheEnd
    start = time.perf_counter()
    document = transcribe(args.audio, args.asr, aligner=args.aligner, language=args.language,
                          max_new_tokens=args.tokens, threads=args.threads, progress=False, vad=args.vad)
    seconds = time.perf_counter() - start
    timed = sum(w.start is not None for w in document.words)
    return {"seconds": seconds, "peak_rss": _peak_rss(), "duration": document.duration,
            "segments": len(document.segments), "words": len(document.words), "timed_words": timed,
            "speakers": len(document.speakers)}


def worker_reference(args: argparse.Namespace) -> dict:
    import torch
    from qwen_asr import Qwen3ASRModel

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    model = Qwen3ASRModel.from_pretrained(args.asr, forced_aligner=args.aligner, dtype=torch.float32,
                                          device_map="cpu", max_new_tokens=args.tokens,
                                          forced_aligner_kwargs={"dtype": torch.float32, "device_map": "cpu"})
    results = model.transcribe(audio=args.audio, language=args.language, return_time_stamps=True)
    seconds = time.perf_counter() - start
    words = results[0].time_stamps.items if results[0].time_stamps is not None else []
    return {"seconds": seconds, "peak_rss": _peak_rss(), "words": len(words)}


def _run_worker(python: str, kind: str, **kwargs: object) -> dict:
    argv = [python, __file__, "--worker", kind]
    for key, value in kwargs.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        source_paths("tokenizer", "kernels", "features", "qwen3", "align", "speech") + [str(ROOT / "tools")])}
    out = subprocess.run(argv, capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(f"the {kind} worker failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- setup -----------------------------------------------------------------------------------


def _shared_data() -> Path:
    sys.path.insert(0, str(ROOT / "tools"))
    from onespeech_tools.data import shared_data_or_skip

    return shared_data_or_skip("the speech clips, tokenizer files and Silero VAD")


CASES = {  # name: (seconds of speech per clip or None for the whole clip, seconds from one start to the next)
    "silence3": (None, None),  # each whole clip, then 3 s of silence
    "every40": (4.0, 40.0),
    "every5": (4.0, 5.0),
    "continuous": (None, 0.0),  # the clips back to back
}


def _clip(data: Path, minutes: float, out: Path, case: str = "silence3") -> Path:
    """Real speech laid out as ``case`` says (``CASES``), repeated to ``minutes`` (16 kHz FLAC)."""
    import numpy as np
    import soundfile

    from onespeech.features import load_audio

    speech, period = CASES[case]
    pattern = []
    for name in PATTERN:
        pcm = load_audio(data / "audio" / name)
        if speech is not None:
            pcm = pcm[: int(speech * SR)]
        gap = 3 * SR if period is None else max(0, int(period * SR) - pcm.shape[0])
        pattern += [pcm, np.zeros(gap, dtype=np.float32)]
    unit = np.concatenate(pattern)
    n = int(minutes * 60 * SR)
    with soundfile.SoundFile(out, "w", SR, 1, subtype="PCM_16") as sound:
        for start in range(0, n, unit.shape[0]):
            sound.write(unit[: min(unit.shape[0], n - start)])
    return out


def _checkpoint(name: str, size: str, kind: str, data: Path, **kwargs: object) -> Path:
    from onespeech_tools.checkpoints import make_checkpoint

    directory = BUILD / name
    if not (directory / "config.json").is_file() or not any(directory.glob("model*.safetensors")):
        make_checkpoint(directory, size, seed=0, kind=kind, data_dir=data, **kwargs)
    return directory


def _mb(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def bench_memory(args: argparse.Namespace) -> None:
    data = _shared_data()
    if args.ending:  # answers of any length up to the budget (text length varies per chunk)
        asr = _checkpoint("asr-tiny-ending", "tiny", "asr", data, end_scale=0.1)
    else:  # never ends: every chunk gets the full budget, the same work per chunk at any file length
        asr = _checkpoint("asr-tiny", "tiny", "asr", data)
    aligner = _checkpoint("aligner-tiny-slots", "tiny", "aligner", data, max_slot=120)
    vad = data / "models" / "silero_vad.onnx"
    # the speaker encoder from the shared data (converted once into the cache), never downloaded
    os.environ.setdefault("ONESPEECH_SPEAKER_MODEL", str(data / "models" / "resemblyzer_pretrained.pt"))
    for case in args.cases:
        rows = []
        with tempfile.TemporaryDirectory() as tmp:
            for minutes in args.minutes:
                clip = _clip(data, minutes, Path(tmp) / f"speech-{minutes:g}min.flac", case)
                result = _run_worker(sys.executable, "ours", audio=clip, asr=asr, aligner=aligner,
                                     tokens=args.tokens, threads=args.threads, language="en", vad=vad)
                rows.append((minutes, result))
                print(f"{case} {minutes:g} min: peak RSS {_mb(result['peak_rss'])}, {result['seconds']:.1f} s "
                      f"(RTF {result['seconds'] / result['duration']:.3f}), {result['segments']} segments, "
                      f"{result['timed_words']}/{result['words']} words timed, "
                      f"{result['speakers']} speakers", flush=True)
        base = rows[0][1]["peak_rss"]
        for minutes, result in rows[1:]:
            print(f"{case}: peak RSS {minutes:g} min / {rows[0][0]:g} min: {result['peak_rss'] / base:.3f}",
                  flush=True)


def bench_full(args: argparse.Namespace) -> None:
    data = _shared_data()
    asr = _checkpoint("asr-0.6b", "0.6b", "asr", data)
    aligner = _checkpoint("aligner-0.6b", "0.6b", "aligner", data)
    from onespeech.qwen3.runtime import load_model

    weights = {}
    for name, directory in (("ASR", asr), ("aligner", aligner)):
        with load_model(directory, "fp32") as model:  # converts once, outside the measurement
            weights[name] = sum(f.stat().st_size for f in model.directory.glob("fp32-*.ost"))
    clip = data / "audio" / args.clip
    vad = data / "models" / "silero_vad.onnx"
    ours = _run_worker(sys.executable, "ours", audio=clip, asr=asr, aligner=aligner, tokens=args.tokens,
                       threads=args.threads, language="English", vad=vad)
    largest = max(weights.values())
    print(f"FP32 weights: ASR {_mb(weights['ASR'])}, aligner {_mb(weights['aligner'])}")
    print(f"ours: peak RSS {_mb(ours['peak_rss'])} = {ours['peak_rss'] / largest:.3f} x the larger model's weights; "
          f"{ours['seconds']:.1f} s for {ours['duration']:.1f} s of audio (RTF {ours['seconds'] / ours['duration']:.2f}), "
          f"{ours['segments']} segments, {ours['timed_words']}/{ours['words']} words timed")
    if args.reference_python and Path(args.reference_python).exists():
        ref = _run_worker(args.reference_python, "reference", audio=clip, asr=asr, aligner=aligner,
                          tokens=args.tokens, threads=args.threads, language="English", vad=vad)
        print(f"reference: peak RSS {_mb(ref['peak_rss'])}; {ref['seconds']:.1f} s "
              f"(RTF {ref['seconds'] / ours['duration']:.2f}), {ref['words']} words")
        print(f"ours / reference: time {ours['seconds'] / ref['seconds']:.2f}, peak RSS "
              f"{ours['peak_rss'] / ref['peak_rss']:.2f}")
    else:
        print("reference: skipped (no --reference-python)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", choices=("memory", "full"), default="memory")
    parser.add_argument("--minutes", type=float, nargs="+", default=[1.0, 60.0])
    parser.add_argument("--cases", nargs="+", choices=tuple(CASES), default=list(CASES),
                        help="memory: how speech and silence alternate in the clip")
    parser.add_argument("--tokens", type=int, default=None, help="token budget per chunk (memory 64, full 32)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clip", default="jfk.flac")
    parser.add_argument("--ending", action="store_true",
                        help="memory: the tiny ASR whose answers end (text length varies per chunk)")
    parser.add_argument("--reference-python", default=os.environ.get("ONESPEECH_REF_PYTHON"),
                        help="interpreter with the reference toolkit (default $ONESPEECH_REF_PYTHON; none: skipped)")
    parser.add_argument("--worker", choices=("ours", "reference"))
    for name in ("audio", "asr", "aligner", "language", "vad"):
        parser.add_argument(f"--{name}")
    args = parser.parse_args()
    if args.worker:
        args.tokens = int(args.tokens)
        print(json.dumps(worker_ours(args) if args.worker == "ours" else worker_reference(args)))
        return 0
    if args.tokens is None:
        args.tokens = 64 if args.mode == "memory" else 32
    sys.path[:0] = source_paths("tokenizer", "kernels", "features", "qwen3", "align", "speech") + [str(ROOT / "tools")]
    require_compiled_kernels()
    (bench_memory if args.mode == "memory" else bench_full)(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
