"""Batch throughput: sequential transcribe against the local pool (1 and 2 workers) and Ray.

    python benchmarks/bench_batch.py [--rounds 2] [--checkpoint DIR --aligner DIR] [--tokens N]

A corpus of 30 clips: the shared data's 14 real clips and 16 made by joining two of
them with a second of silence. Each configuration transcribes the whole corpus
into a fresh output folder (json), in rounds that alternate the configurations;
prints the median wall time, the throughput (audio seconds per wall second) and
the ratio to sequential. Sequential is one in-process Transcriber with all cores'
threads; "pool N x T" is N worker processes of T threads; "ray N x T" the same as
Ray actors on a local instance. Model loading is inside every measurement, as a
batch pays it once per worker.

Default models: the tiny ending checkpoints of docs/checkpoints.md (the cost is
then mostly per-file overhead: decoding, VAD, model loads); ``--checkpoint`` and
``--aligner`` take publisher-layout directories (e.g. full-size 0.6B random ones)
with ``--tokens`` as the per-chunk budget.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import soundfile

from onespeech.features import load_audio
from onespeech_tools.data import SKIP_STATUS, find_shared_data

SR = 16000


def make_corpus(audio: Path, out: Path) -> list[Path]:
    real = sorted(p for p in audio.iterdir() if p.suffix in {".wav", ".flac", ".mp3"})
    out.mkdir(parents=True, exist_ok=True)
    files = [Path(shutil.copy(p, out / p.name)) for p in real]
    pcm = [load_audio(p) for p in real]
    silence = np.zeros(SR, dtype=np.float32)
    for i in range(30 - len(files)):
        a, b = pcm[i % len(pcm)], pcm[(3 * i + 1) % len(pcm)]
        path = out / f"joined_{i:02d}.wav"
        soundfile.write(path, np.concatenate([a, silence, b]), SR, subtype="PCM_16")
        files.append(path)
    return files


def run_sequential(files: list[Path], out: Path, options: dict) -> None:
    from onespeech.speech import Transcriber
    from onespeech.speech.writers import write_outputs

    with Transcriber(**options, threads=os.cpu_count(), progress=False) as transcriber:
        for path in files:
            write_outputs(transcriber.transcribe(path), path, out, ["json"])


def run_batch(corpus: Path, out: Path, options: dict, workers: int, threads: int, ray: bool) -> None:
    from onespeech.speech.batch import transcribe_corpus

    model = options["model"]
    rest = {k: v for k, v in options.items() if k != "model"}
    report = transcribe_corpus([corpus], out, model=model, workers=workers, threads=threads, progress=False,
                               ray_address="auto" if ray else None, **rest)
    if not report.ok:
        raise SystemExit(f"batch failed:\n{report.summary()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--checkpoint", type=Path, help="publisher-layout ASR directory (default: tiny ending)")
    parser.add_argument("--aligner", type=Path, help="publisher-layout aligner directory (default: tiny)")
    parser.add_argument("--tokens", type=int, default=1024, help="max_new_tokens per chunk")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray rows")
    args = parser.parse_args()
    data = find_shared_data()
    if data is None:
        print("needs the shared data (clips, configs, Silero VAD)", file=sys.stderr)
        return SKIP_STATUS
    work = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    try:
        from onespeech_tools.checkpoints import make_checkpoint

        asr = args.checkpoint or make_checkpoint(work / "asr", "tiny", seed=0, data_dir=data, end_scale=0.1)
        aligner = args.aligner or make_checkpoint(work / "aligner", "tiny", seed=0, kind="aligner",
                                                  data_dir=data, max_slot=120)
        files = make_corpus(data / "audio", work / "corpus")
        audio_seconds = sum(soundfile.info(str(p)).duration for p in files)
        options = {"model": str(asr), "aligner": str(aligner), "language": "en", "max_new_tokens": args.tokens,
                   "vad": str(data / "models" / "silero_vad.onnx"), "speakers": False}
        run_sequential(files[:1], work / "warm", options)  # converts the checkpoints once, outside the timing
        cores = len(os.sched_getaffinity(0))
        configs: dict[str, Callable[[Path], None]] = {
            "sequential": lambda out: run_sequential(files, out, options),
            f"pool 1 x {cores}": lambda out: run_batch(work / "corpus", out, options, 1, cores, False),
            f"pool {cores} x 1": lambda out: run_batch(work / "corpus", out, options, cores, 1, False),
        }
        if not args.no_ray:
            import ray

            ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False)
            configs[f"ray {cores} x 1"] = lambda out: run_batch(work / "corpus", out, options, cores, 1, True)
        times: dict[str, list[float]] = {name: [] for name in configs}
        for round_ in range(args.rounds):
            for name, run in configs.items():
                out = work / f"out-{round_}-{name.replace(' ', '')}"
                start = time.perf_counter()
                run(out)
                times[name].append(time.perf_counter() - start)
        print(f"batch | {len(files)} clips, {audio_seconds / 60:.1f} min of audio | model {asr.name} | "
              f"tokens {args.tokens} | cores {cores} | rounds {args.rounds}")
        print(f"{'configuration':<16}{'wall median (min..max)':>28}{'audio s / wall s':>18}{'vs sequential':>15}")
        base = statistics.median(times["sequential"])
        for name, samples in times.items():
            median = statistics.median(samples)
            print(f"{name:<16}{median:>14.1f} s ({min(samples):.1f}..{max(samples):.1f}){audio_seconds / median:>17.1f}"
                  f"{base / median:>14.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
