"""Ours against the other CPU runtimes of Qwen3-ASR on one checkpoint, one clip set, one run.

    python benchmarks/bench_peers.py [--asr DIR] [--tokens 32] [--threads 2] [--repeats 3]
                                     [--reference-python PYTHON] [--qwen-asr BINARY]
                                     [--crisp-python PYTHON] [--gguf-f16 FILE] [--gguf-q8 FILE]

The peers are benchmark tools only (none of their code is in this project); each one
that is not given (flag or environment variable) is skipped with a line saying so:

- the reference toolkit (qwen-asr 0.0.6, transformers, CPU torch; ``--reference-python``,
  default ``$ONESPEECH_REF_PYTHON``) in float32 and bfloat16;
- antirez/qwen-asr (C, built with ``make blas``; ``--qwen-asr``, default
  ``$ONESPEECH_PEER_QWEN_ASR``), which reads the publisher safetensors (BF16) itself;
- CrispASR (PyPI ``crispasr``; ``--crisp-python``, default ``$ONESPEECH_PEER_CRISP_PYTHON``)
  on GGUF files converted from the same checkpoint (``--gguf-f16``, ``--gguf-q8``; see
  docs/benchmarks.md for how they are made).

Each runs against ours at the matching precision class: FP32 (ours fp32, reference
float32), BF16 (ours bf16, reference bfloat16, antirez's BF16 weights, CrispASR f16)
and INT8 (ours int8 where this build has it, CrispASR q8_0). Clips: jfk.flac (11 s)
and the first 30 s of multilingual_en_de.mp3, as 16-bit WAV files, English forced,
``--threads`` threads everywhere.

The timed unit is one recognition of one clip with the model loaded and warm (one
untimed run first, except for CrispASR, see ``worker_crisp``): features, encoder, prefill and exactly ``--tokens`` generated
tokens. The checkpoint's random weights never end an answer; each tool is held to
the same count: ours ``recognize(..., max_new_tokens=N, min_new_tokens=N)``, the
reference ``generate(max_new_tokens=N, min_new_tokens=N)``, CrispASR
``Session.set_max_new_tokens(N)`` and antirez/qwen-asr the environment variable
``QWEN_ASR_MAX_TOKENS`` of a one-line local patch of its fixed 2048-token cap (N - 1
further decode steps after the prefill's token, the same steps as the others); the
token counts each tool reports are checked. antirez/qwen-asr runs as a process per
recognition and its own "Inference" figure (after its mmap load) is the time.
Prints one table: medians of ``--repeats`` (min..max) and ours / peer.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from source_tree import require_compiled_kernels, source_paths  # benchmarks/ is the script's directory

ROOT = Path(__file__).resolve().parents[1]
SR = 16000
CLIPS = {"11s": ("jfk.flac", None), "30s": ("multilingual_en_de.mp3", 30.0)}
LANGUAGE = "English"
CLASSES = {"FP32": "fp32", "BF16": "bf16", "INT8": "int8"}  # class: our precision
SYSTEMS = ("ours", "reference", "qwen-asr", "crisp")


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


# -- workers: one process per system and precision ------------------------------------------


def worker_ours(args: argparse.Namespace) -> dict:
    import soundfile

    from onespeech.kernels.precision import Precision
    from onespeech.kernels.threads import thread_limit
    from onespeech.qwen3 import Qwen3Options, Qwen3Recognizer

    options = Qwen3Options(threads=args.threads, precision=Precision.parse(args.precision))
    rec = Qwen3Recognizer.load(args.asr, options)
    n = args.tokens
    times: dict[str, list[float]] = {}
    with thread_limit(args.threads):
        for label, path in json.loads(args.clips).items():
            pcm, _ = soundfile.read(path, dtype="float32")
            rec.recognize(pcm, LANGUAGE, n, min_new_tokens=n)  # warm-up
            times[label] = []
            for _ in range(args.repeats):
                seconds, out = _timed(lambda pcm=pcm: rec.recognize(pcm, LANGUAGE, n, min_new_tokens=n))
                assert len(out.generation.ids) == n, len(out.generation.ids)
                times[label].append(seconds)
    rec.close()
    return times


def worker_reference(args: argparse.Namespace) -> dict:
    import soundfile
    import torch
    from qwen_asr import Qwen3ASRModel

    torch.set_num_threads(args.threads)
    dtype = torch.float32 if args.precision == "fp32" else torch.bfloat16
    asr = Qwen3ASRModel.from_pretrained(str(args.asr), dtype=dtype, device_map="cpu")
    model = asr.model.eval()
    prompt = asr._build_text_prompt(context="", force_language=LANGUAGE)
    n = args.tokens
    times: dict[str, list[float]] = {}

    def recognize(pcm):  # features (in the model's dtype, as qwen-asr does) and generation
        inputs = asr.processor(text=[prompt], audio=[pcm], return_tensors="pt", padding=True).to(model.dtype)
        out = model.generate(**inputs, max_new_tokens=n, min_new_tokens=n)
        return out.sequences.shape[1] - inputs["input_ids"].shape[1]

    with torch.no_grad():
        for label, path in json.loads(args.clips).items():
            pcm, _ = soundfile.read(path, dtype="float32")
            recognize(pcm)  # warm-up
            times[label] = []
            for _ in range(args.repeats):
                seconds, generated = _timed(lambda pcm=pcm: recognize(pcm))
                assert generated == n, generated
                times[label].append(seconds)
    return times


def worker_crisp(args: argparse.Namespace) -> dict:
    import crispasr
    import soundfile

    session = crispasr.Session(str(args.gguf), n_threads=args.threads)
    session.set_max_new_tokens(args.tokens)
    times: dict[str, list[float]] = {}
    for label, path in json.loads(args.clips).items():
        pcm, _ = soundfile.read(path, dtype="float32")
        # no untimed run first: its first recognition of a clip is not slower than the next
        # (a trial on the 11 s clip: 418 s, then 483 s, on the loaded machine), and each takes minutes there
        times[label] = []
        for _ in range(args.repeats):
            seconds, _ = _timed(lambda pcm=pcm: session.transcribe(pcm, language="en"))
            times[label].append(seconds)
    session.close()
    return times


WORKERS = {"ours": worker_ours, "reference": worker_reference, "crisp": worker_crisp}


class PeerFailed(RuntimeError):
    """A system's run failed; the table goes on without it."""


def _run_worker(python: str, kind: str, args: argparse.Namespace, clips: dict[str, str], **extra: object) -> dict:
    argv = [python, __file__, "--worker", kind, "--clips", json.dumps(clips), "--asr", str(args.asr),
            "--tokens", str(args.tokens), "--threads", str(args.threads), "--repeats", str(args.repeats)]
    for key, value in extra.items():
        argv += [f"--{key}", str(value)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "OPENBLAS_NUM_THREADS": str(args.threads)}
    if kind == "ours":
        env["PYTHONPATH"] = os.pathsep.join(
            source_paths("tokenizer", "kernels", "features", "qwen3") + [env.get("PYTHONPATH", "")])
    else:  # the peer's interpreter finds this script's directory, not our packages
        env["PYTHONPATH"] = str(Path(__file__).resolve().parent)
    out = subprocess.run(argv, capture_output=True, text=True, env=env)
    if out.returncode:
        raise PeerFailed(f"the {kind} worker failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _run_qwen_asr(binary: Path, args: argparse.Namespace, clips: dict[str, str]) -> dict:
    """antirez/qwen-asr: one process per recognition; its own Inference figure, its token count checked."""
    env = {**os.environ, "QWEN_ASR_MAX_TOKENS": str(args.tokens - 1), "OPENBLAS_NUM_THREADS": str(args.threads),
           "OMP_NUM_THREADS": str(args.threads)}
    times: dict[str, list[float]] = {}
    for label, path in clips.items():
        times[label] = []
        for k in range(args.repeats + 1):  # the first run is the warm-up (page cache)
            out = subprocess.run([str(binary), "-d", str(args.asr), "-i", path, "-t", str(args.threads),
                                  "--language", LANGUAGE, "--debug"], capture_output=True, text=True, env=env)
            if out.returncode:
                raise PeerFailed(f"qwen-asr failed:\n{out.stderr[-4000:]}")
            inference = re.search(r"Inference: (\d+) ms", out.stderr)
            steps = re.search(r"Decode: (\d+) tokens", out.stderr)
            if inference is None or steps is None:
                raise PeerFailed(f"qwen-asr printed no Inference/Decode line:\n{out.stderr[-4000:]}")
            if int(steps.group(1)) != args.tokens - 1:
                raise PeerFailed(f"qwen-asr decoded {steps.group(1)} steps, not {args.tokens - 1}: without the "
                                 "local QWEN_ASR_MAX_TOKENS patch its cap is 2048 (see docs/benchmarks.md)")
            if k:
                times[label].append(int(inference.group(1)) / 1e3)
    return times


# -- driver ------------------------------------------------------------------------------------


def _clips(work: Path, wanted: list[str]) -> dict[str, str]:
    import numpy as np
    import soundfile

    from onespeech.features import load_audio
    from onespeech_tools.data import shared_data_or_skip

    data = shared_data_or_skip("bench_peers")
    paths = {}
    for label, (name, seconds) in CLIPS.items():
        if label not in wanted:
            continue
        pcm = load_audio(data / "audio" / name)
        if seconds is not None:
            pcm = pcm[: int(seconds * SR)]
        path = work / f"clip_{label}.wav"
        soundfile.write(path, np.clip(pcm, -1.0, 1.0), SR, subtype="PCM_16")
        paths[label] = str(path)
    return paths


def _given(value: str | None, what: str, how: str) -> Path | None:
    if value and Path(value).exists():
        return Path(value)
    print(f"{what}: skipped ({how})", flush=True)
    return None


def _supported(precision: str) -> bool:
    from onespeech.kernels.precision import Precision

    try:
        Precision.parse(precision)
    except ValueError as error:
        print(f"ours {precision}: skipped, this build has no such precision ({error})", flush=True)
        return False
    return True


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):7.2f} ({min(values):.2f}..{max(values):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--asr", default=os.environ.get("ONESPEECH_BENCH_CHECKPOINT",
                                                        str(ROOT / "build" / "checkpoints" / "asr-0.6b")),
                        help="the publisher-layout 0.6B ASR checkpoint every system loads")
    parser.add_argument("--tokens", type=int, default=32, help="tokens generated per recognition, in every tool")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reference-python", default=os.environ.get("ONESPEECH_REF_PYTHON"))
    parser.add_argument("--qwen-asr", default=os.environ.get("ONESPEECH_PEER_QWEN_ASR"),
                        help="the antirez/qwen-asr binary")
    parser.add_argument("--crisp-python", default=os.environ.get("ONESPEECH_PEER_CRISP_PYTHON"),
                        help="an interpreter with crispasr and soundfile")
    parser.add_argument("--gguf-f16", default=os.environ.get("ONESPEECH_PEER_GGUF_F16"))
    parser.add_argument("--gguf-q8", default=os.environ.get("ONESPEECH_PEER_GGUF_Q8"))
    parser.add_argument("--clip", nargs="+", choices=tuple(CLIPS), default=list(CLIPS), help="the clips to run")
    parser.add_argument("--classes", nargs="+", choices=tuple(CLASSES), default=list(CLASSES),
                        help="the precision classes to run")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS),
                        help="the systems to run (ours is the anchor of the ratios)")
    parser.add_argument("--worker", choices=tuple(WORKERS))
    parser.add_argument("--clips")
    parser.add_argument("--precision")
    parser.add_argument("--gguf")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(WORKERS[args.worker](args)))
        return 0
    sys.path[:0] = source_paths("tokenizer", "kernels", "features", "qwen3") + [str(ROOT / "tools")]
    require_compiled_kernels()
    args.asr = Path(args.asr)
    if not (args.asr / "config.json").is_file():
        raise SystemExit(f"--asr {args.asr}: no config.json (a publisher-layout checkpoint directory)")
    from onespeech.qwen3.runtime import ensure_runtime

    load = os.getloadavg()
    print(f"checkpoint {args.asr.name}, {args.tokens} tokens per recognition, {args.threads} threads, "
          f"medians of {args.repeats}; load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    reference = _given(args.reference_python, "reference toolkit", "no --reference-python") \
        if "reference" in args.systems else None
    qwen_asr = _given(args.qwen_asr, "antirez/qwen-asr", "no --qwen-asr binary") if "qwen-asr" in args.systems else None
    crisp = _given(args.crisp_python, "CrispASR", "no --crisp-python") if "crisp" in args.systems else None
    gguf = {"f16": _given(args.gguf_f16, "CrispASR f16", "no --gguf-f16") if crisp else None,
            "q8_0": _given(args.gguf_q8, "CrispASR q8_0", "no --gguf-q8") if crisp else None}
    rows: list[tuple[str, str, dict]] = []  # (class, system, times per clip)
    with tempfile.TemporaryDirectory() as tmp:
        clips = _clips(Path(tmp), args.clip)
        for cls, precision in CLASSES.items():
            if cls not in args.classes:
                continue
            runs: list[tuple[str, Callable[[], dict]]] = []
            if "ours" in args.systems and _supported(precision):
                ensure_runtime(args.asr, precision)  # converted once, outside the measurement
                runs.append((f"ours {precision}",
                             lambda p=precision: _run_worker(sys.executable, "ours", args, clips, precision=p)))
            if cls in ("FP32", "BF16") and reference:
                runs.append((f"reference {precision}", lambda p=precision: _run_worker(
                    str(reference), "reference", args, clips, precision=p)))
            if cls == "BF16" and qwen_asr:
                runs.append(("antirez/qwen-asr bf16", lambda: _run_qwen_asr(qwen_asr, args, clips)))
            kind = {"BF16": "f16", "INT8": "q8_0"}.get(cls)
            if kind and gguf.get(kind):
                runs.append((f"CrispASR {kind}", lambda k=kind: _run_worker(
                    str(crisp), "crisp", args, clips, gguf=gguf[k])))
            for system, run in runs:
                try:
                    rows.append((cls, system, run()))
                except PeerFailed as error:
                    print(f"{system}: failed, left out of the table: {error}", flush=True)
                    continue
                print(f"{system}: " + ", ".join(f"{label} {_cell(t)} s" for label, t in rows[-1][2].items())
                      + f"; load average {os.getloadavg()[0]:.2f}", flush=True)
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"\n{'clip':<6}{'class':<6}{'system':<24}{'seconds: median (min..max)':>30}{'ours / this':>13}")
    for label in clips:
        for cls in CLASSES:
            ours_row = next((times for c, system, times in rows if c == cls and system.startswith("ours")), None)
            for c, system, times in rows:
                if c != cls:
                    continue
                ratio = "" if ours_row is None or system.startswith("ours") else \
                    f"{statistics.median(ours_row[label]) / statistics.median(times[label]):13.2f}"
                print(f"{label:<6}{cls:<6}{system:<24}{_cell(times[label]):>30}{ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
