"""Qwen3-ASR recognizer speed and memory: ours against the reference, same checkpoint and audio.

    python benchmarks/bench_asr.py [--checkpoint DIR] [--tokens 32] [--threads 2] [--repeats 3] [--rounds 1]

Loads the full-size seeded random 0.6B checkpoint (``onespeech_tools.checkpoints``;
generated into ``--checkpoint`` if missing) in both systems and, for a 10 s and a
30 s clip with a fixed number of generated tokens, prints per stage the median
(min..max) of ours and of the reference (qwen-asr 0.0.6 on CPU torch, float32), and
the ratio ours / reference:

- load: warm load of the model (ours: runtime files already converted; the first
  conversion is printed separately), features: log-mel, encoder: audio tower +
  projector, prefill: prompt through the decoder up to the first token (reference:
  ``generate(max_new_tokens=1)`` minus its encoder), decode: ms per further token
  in a run of N+1 forced tokens, from the first logits (after prefill) to the last,
  over N: ours stamps each output-head call, the reference each call of a logits
  processor (once per forward, before the token is chosen), so both time the same
  steps. (Until 2026-12-02 this was the N+1-token run minus the 1-token run; both
  repeat encoder and prefill, whose run-to-run spread, ~0.5 s at 30 s, then
  landed in the per-token figure.) Peak RSS.

Each system runs in its own process (ours with this interpreter, the reference with
``--reference-python``), one after the other, so peak RSS is per system; the warm
loads are timed in a process of their own before it, so the measured process loads
the model once, as an application does. With ``--precision bf16`` our FP32 also runs,
right after our BF16, and the table adds its decode time and the BF16 / FP32 ratios.
``--rounds N`` repeats that sequence N times (ours, [our FP32,] reference, ours, ...)
and pools each system's samples, so a slow drift of the machine's speed, common on
shared hosts, falls on every system instead of on whichever ran last; peak RSS is
the largest of its rounds.
Run it under
``flock /work/heavy.lock`` on shared machines.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Import onespeech before numpy, as an application does, so that onespeech.kernels
# can shorten OpenBLAS's idle spinning before numpy loads it (docs/kernels.md, "Threads").
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "onespeech-kernels" / "src"))
import onespeech.kernels  # noqa: E402,F401,I001  (sets OPENBLAS_THREAD_TIMEOUT unless set)
import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# generated on first use (gitignored); point ONESPEECH_BENCH_CHECKPOINT at an existing one to skip that
DEFAULT_CHECKPOINT = Path(os.environ.get("ONESPEECH_BENCH_CHECKPOINT", ROOT / "build" / "checkpoints" / "asr-0.6b"))
SR = 16000
CLIPS = {"10 s": ("jfk.flac", 10.0), "30 s": ("multilingual_en_de.mp3", 30.0)}
LANGUAGE = "English"


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


# -- workers -------------------------------------------------------------------------------


def worker_ours(args: argparse.Namespace, clips: dict[str, np.ndarray]) -> dict:
    sys.path[:0] = [str(ROOT / "packages" / p / "src") for p in ("tokenizer", "kernels", "features", "qwen3")]
    from onespeech.features import log_mel_spectrogram
    from onespeech.kernels.threads import thread_limit
    from onespeech.qwen3 import Precision, Qwen3Options, Qwen3Recognizer
    from onespeech.qwen3.runtime import has_runtime

    result: dict = {"stages": {}}
    precision = Precision(args.precision)
    options = Qwen3Options(threads=args.threads, max_new_tokens=args.tokens + 1, precision=precision)
    if args.worker == "convert":  # its own process, so neither step counts in peak RSS
        result["bandwidth_gbs"] = _read_bandwidth_gbs(args.threads)
        if not has_runtime(args.checkpoint, args.precision):
            seconds, rec = _timed(lambda: Qwen3Recognizer.load(args.checkpoint, options))
            result["first_load_with_conversion_s"] = seconds
            rec.close()
        return result
    if args.load_only:
        loads = []
        for _ in range(args.repeats):
            seconds, rec = _timed(lambda: Qwen3Recognizer.load(args.checkpoint, options))
            loads.append(seconds)
            rec.close()
        return {"stages": {"load": loads}}
    rec = Qwen3Recognizer.load(args.checkpoint, options)
    # the runtime's head file repeats the tied embedding and is never read
    used = [n for n in rec._model if n != "thinker.lm_head.weight"]
    result["weights_bytes"] = int(sum(rec._model[n].nbytes for n in used))
    # per generated token: every decoder matrix plus the embedding as output head
    result["decode_bytes"] = int(sum(rec._model[n].nbytes for n in used if n.startswith("thinker.model.")))
    stamps: list[float] = []  # one per output-head call: after prefill, then after each step
    head = rec.decoder.logits

    def stamped_head(hidden):
        out = head(hidden)
        stamps.append(time.perf_counter())
        return out

    rec.decoder.logits = stamped_head
    with thread_limit(args.threads):
        for label, pcm in clips.items():
            stages: dict[str, list[float]] = {"features": [], "encoder": [], "prefill": [], "decode": []}
            rec.recognize(pcm, LANGUAGE, 2, min_new_tokens=2)  # warm-up: page in the weights
            for _ in range(args.repeats):
                t_feat, mel = _timed(lambda pcm=pcm: log_mel_spectrogram(pcm))
                t_enc, _ = _timed(lambda mel=mel: rec.encoder.forward(mel))
                t_one, _ = _timed(lambda pcm=pcm, mel=mel: rec.recognize(pcm, LANGUAGE, 1, mel=mel))
                n = args.tokens
                stamps.clear()
                out = rec.recognize(pcm, LANGUAGE, n + 1, mel=mel, min_new_tokens=n + 1)
                assert len(out.generation.ids) == n + 1 and len(stamps) == n + 1
                stages["features"].append(t_feat)
                stages["encoder"].append(t_enc)
                stages["prefill"].append(t_one - t_enc)
                stages["decode"].append((stamps[-1] - stamps[0]) / n)
            result["stages"][label] = stages
    rec.close()
    result["peak_rss"] = _peak_rss_bytes()
    return result


def _read_bandwidth_gbs(threads: int) -> float:
    """Memory read bandwidth of this machine now: our vector sum over 1 GiB, median of 5."""
    from onespeech.kernels.cpu import select_variant

    kernels = select_variant()
    if kernels is None:
        return float("nan")
    buffer = np.ones(1 << 28, np.float32)
    times = []
    for _ in range(5):
        seconds, _ = _timed(lambda: kernels.stream_sum(buffer, threads))
        times.append(seconds)
    return buffer.nbytes / statistics.median(times) / 1e9


def worker_reference(args: argparse.Namespace, clips: dict[str, np.ndarray]) -> dict:
    import torch
    from qwen_asr import Qwen3ASRModel
    from transformers import LogitsProcessor

    torch.set_num_threads(args.threads)
    dtype = torch.float32 if args.precision == "fp32" else torch.bfloat16
    def load():
        return Qwen3ASRModel.from_pretrained(str(args.checkpoint), dtype=dtype, device_map="cpu")

    if args.load_only:
        loads = []
        for _ in range(args.repeats):
            seconds, asr = _timed(load)
            loads.append(seconds)
            del asr
        return {"stages": {"load": loads}}
    result: dict = {"stages": {}}
    asr = load()
    model = asr.model.eval()
    thinker = model.thinker
    result["weights_bytes"] = int(sum(p.numel() * p.element_size() for p in model.parameters()))
    prompt = asr._build_text_prompt(context="", force_language=LANGUAGE)
    stamps: list[float] = []

    class Stamp(LogitsProcessor):  # called once per forward, before the token is chosen
        def __call__(self, input_ids, scores):
            stamps.append(time.perf_counter())
            return scores

    stamp = Stamp()
    with torch.no_grad():
        for label, pcm in clips.items():
            stages: dict[str, list[float]] = {"features": [], "encoder": [], "prefill": [], "decode": []}

            def features(pcm=pcm):
                inputs = asr.processor(text=[prompt], audio=[pcm], return_tensors="pt", padding=True)
                return inputs.to(model.dtype)  # as qwen-asr does: features in the model's dtype

            def generate(inputs, n):
                return model.generate(**inputs, max_new_tokens=n, min_new_tokens=n, logits_processor=[stamp])

            inputs = features()
            generate(inputs, 2)  # warm-up
            for _ in range(args.repeats):
                t_feat, inputs = _timed(features)
                t_enc, _ = _timed(
                    lambda inputs=inputs: thinker.get_audio_features(
                        inputs["input_features"], feature_attention_mask=inputs["feature_attention_mask"]
                    )
                )
                t_one, _ = _timed(lambda inputs=inputs: generate(inputs, 1))
                n = args.tokens
                stamps.clear()
                out = generate(inputs, n + 1)
                assert out.sequences.shape[1] - inputs["input_ids"].shape[1] == n + 1 and len(stamps) == n + 1
                stages["features"].append(t_feat)
                stages["encoder"].append(t_enc)
                stages["prefill"].append(t_one - t_enc)
                stages["decode"].append((stamps[-1] - stamps[0]) / n)
            result["stages"][label] = stages
    result["peak_rss"] = _peak_rss_bytes()
    result["versions"] = {"torch": torch.__version__}
    return result


# -- driver --------------------------------------------------------------------------------------


def _clips(work: Path) -> dict[str, Path]:
    sys.path[:0] = [str(ROOT / "packages" / p / "src") for p in ("kernels", "features")]
    from onespeech.features import load_audio

    sys.path.insert(0, str(ROOT / "tools"))
    from onespeech_tools.data import shared_data_or_skip

    data = shared_data_or_skip("bench_asr")
    paths = {}
    for label, (name, seconds) in CLIPS.items():
        pcm = load_audio(data / "audio" / name)[: int(seconds * SR)]
        if pcm.shape[0] < int(seconds * SR):  # loop short sources to the clip length
            pcm = np.resize(pcm, int(seconds * SR))
        path = work / f"clip_{int(seconds)}s.npy"
        np.save(path, pcm.astype(np.float32))
        paths[label] = path
    return paths


def _prepare_checkpoint(directory: Path) -> None:
    """Generate the seeded 0.6B checkpoint into ``directory`` unless it is there."""
    if (directory / "model.safetensors").is_file():
        return
    sys.path.insert(0, str(ROOT / "tools"))
    from onespeech_tools.checkpoints import make_checkpoint

    make_checkpoint(directory, "0.6b", seed=0, kind="asr")


def _run_worker(python: str, system: str, args: argparse.Namespace, clips: dict[str, Path], out: Path) -> dict:
    """Run one system's worker; warm loads are timed in a process of their own first, so the
    measured process loads once, as an application does, and its peak RSS is that of one model."""

    def run(*extra: str) -> dict:
        command = [
            python, str(Path(__file__).resolve()), "--worker", system, "--result", str(out),
            "--checkpoint", str(args.checkpoint), "--tokens", str(args.tokens), "--threads", str(args.threads),
            "--repeats", str(args.repeats), "--precision", args.precision,
            "--clip-files", json.dumps({k: str(v) for k, v in clips.items()}), *extra,
        ]  # fmt: skip
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        subprocess.run(command, check=True, env=env)
        return json.loads(out.read_text())

    if system == "convert":
        return run()
    loads = run("--load-only")["stages"]["load"]
    result = run()
    result["stages"]["load"] = loads
    return result


def _pool(results: list[dict]) -> dict:
    """One system's rounds as one result: every stage's samples together, the largest peak RSS."""
    pooled = dict(results[0], stages={})
    for result in results:
        for key, value in result["stages"].items():
            if isinstance(value, list):  # "load"
                pooled["stages"].setdefault(key, []).extend(value)
            else:  # a clip: its stages' samples
                clip = pooled["stages"].setdefault(key, {})
                for stage, samples in value.items():
                    clip.setdefault(stage, []).extend(samples)
    pooled["peak_rss"] = max(result["peak_rss"] for result in results)
    return pooled


def _fmt(values: list[float], scale: float, unit: str) -> str:
    v = [x * scale for x in values]
    return f"{statistics.median(v):8.1f} {unit} ({min(v):.1f}..{max(v):.1f})"


def _bf16_over_fp32(ours: dict, ours_fp32: dict, label: str) -> float:
    """Median BF16 decode time over our FP32's, one clip (the target is at most 0.55)."""
    b, f = (statistics.median(r["stages"][label]["decode"]) for r in (ours, ours_fp32))
    return b / f


def _table(ours: dict, ref: dict, args: argparse.Namespace, blas: str, ours_fp32: dict | None = None) -> None:
    weights = ours["weights_bytes"]
    bandwidth = args.bandwidth_gbs or ours.get("bandwidth_gbs", float("nan"))
    floor_ms = ours["decode_bytes"] / bandwidth / 1e9 * 1e3
    for label in CLIPS:
        print(f"\n{args.checkpoint.name} {args.precision} | clip {label} | threads {args.threads} | tokens {args.tokens} "
              f"| repeats {args.repeats} x rounds {args.rounds} | {blas}")  # fmt: skip
        print(f"{'stage':<16}{'ours median (min..max)':<32}{'reference median (min..max)':<34}ratio")
        rows = [("load", "load", 1.0, "s")] + [
            (name, name, 1e3, "ms") for name in ("features", "encoder", "prefill")
        ] + [("decode", "decode", 1e3, "ms/tok")]  # fmt: skip
        for name, key, scale, unit in rows:
            o = ours["stages"][key] if key == "load" else ours["stages"][label][key]
            r = ref["stages"][key] if key == "load" else ref["stages"][label][key]
            ratio = statistics.median(o) / statistics.median(r)
            extra = ""
            if key == "decode":
                extra = f"   memory-bound limit {floor_ms:.0f} ms/tok at {bandwidth:.1f} GB/s -> " \
                        f"{floor_ms / (statistics.median(o) * 1e3):.0%}"  # fmt: skip
            print(f"{name:<16}{_fmt(o, scale, unit):<32}{_fmt(r, scale, unit):<34}{ratio:5.2f}{extra}")
        if ours_fp32 is not None:  # the BF16 targets are also stated against our own FP32
            f = ours_fp32["stages"][label]["decode"]
            print(f"{'decode fp32':<16}{_fmt(f, 1e3, 'ms/tok'):<32}{'(ours, same run)':<34}"
                  f"bf16 / fp32 {_bf16_over_fp32(ours, ours_fp32, label):.2f}")
    gib = 1 << 30
    print(f"\npeak RSS        ours {ours['peak_rss'] / gib:.2f} GiB   reference {ref['peak_rss'] / gib:.2f} GiB   "
          f"ratio {ours['peak_rss'] / ref['peak_rss']:.2f}   ours / {args.precision} weights ({weights / gib:.2f} GiB) = "
          f"{ours['peak_rss'] / weights:.2f} (target <= 1.10)")  # fmt: skip
    if ours_fp32 is not None:
        print(f"peak RSS        ours bf16 / ours fp32 ({ours_fp32['peak_rss'] / gib:.2f} GiB) = "
              f"{ours['peak_rss'] / ours_fp32['peak_rss']:.2f}")
    if "first_load_with_conversion_s" in ours:
        print(f"first load (converts publisher files to {args.precision} runtime files): {ours['first_load_with_conversion_s']:.1f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    parser.add_argument("--tokens", type=int, default=32, help="generated tokens per decode measurement")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="samples per stage in each round")
    parser.add_argument("--rounds", type=int, default=1, help="times every system runs, interleaved")
    parser.add_argument("--reference-python", default=os.environ.get("ONESPEECH_REF_PYTHON", sys.executable))
    parser.add_argument("--bandwidth-gbs", type=float, default=None,
                        help="memory bandwidth for the decode floor (default: measured in this run)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument("--worker", choices=("convert", "ours", "reference"), help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--clip-files", help=argparse.SUPPRESS)
    parser.add_argument("--load-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name in ("tokens", "threads", "repeats", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} {getattr(args, name)} must be at least 1")

    if args.worker:
        clips = {k: np.load(v) for k, v in json.loads(args.clip_files).items()}
        fn = worker_reference if args.worker == "reference" else worker_ours
        args.result.write_text(json.dumps(fn(args, clips)))
        return 0

    _prepare_checkpoint(args.checkpoint)
    with tempfile.TemporaryDirectory(prefix="bench_asr_") as tmp:
        work = Path(tmp)
        clips = _clips(work)
        converted = _run_worker(sys.executable, "convert", args, clips, work / "convert.json")
        fp32_args = argparse.Namespace(**{**vars(args), "precision": "fp32"})
        if args.precision == "bf16":
            _run_worker(sys.executable, "convert", fp32_args, clips, work / "convert_fp32.json")
        runs: dict[str, list[dict]] = {"ours": [], "ours_fp32": [], "reference": []}
        for _ in range(args.rounds):
            runs["ours"].append(_run_worker(sys.executable, "ours", args, clips, work / "ours.json"))
            if args.precision == "bf16":  # our FP32 right after: the anchor of the BF16 targets
                runs["ours_fp32"].append(_run_worker(sys.executable, "ours", fp32_args, clips, work / "ours_fp32.json"))
            if not args.skip_reference:
                runs["reference"].append(
                    _run_worker(args.reference_python, "reference", args, clips, work / "reference.json")
                )
        ours = _pool(runs["ours"])
        for key in ("first_load_with_conversion_s", "bandwidth_gbs"):
            if key in converted:
                ours[key] = converted[key]
        ours_fp32 = _pool(runs["ours_fp32"]) if runs["ours_fp32"] else None
        if args.skip_reference:
            print(json.dumps({"ours": ours, "ours_fp32": ours_fp32} if ours_fp32 else ours, indent=1))
            if ours_fp32:  # the BF16-to-our-FP32 target needs no reference run
                for label in (k for k, v in ours["stages"].items() if isinstance(v, dict)):
                    print(f"{label}: decode bf16 {_fmt(ours['stages'][label]['decode'], 1e3, 'ms/tok')}, "
                          f"fp32 {_fmt(ours_fp32['stages'][label]['decode'], 1e3, 'ms/tok')}, "
                          f"bf16 / fp32 {_bf16_over_fp32(ours, ours_fp32, label):.2f}")
            return 0
        ref = _pool(runs["reference"])
    saved = ROOT / "build" / f"bench_asr_{args.precision}.json"  # the raw timings, to reprint or compare
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "ours": ours, "reference": ref,
                                 "ours_fp32": ours_fp32}))
    try:
        from threadpoolctl import threadpool_info

        blas = ", ".join(sorted({f"{i['internal_api']} {i.get('version')}" for i in threadpool_info() if i["user_api"] == "blas"}))
    except ImportError:
        blas = "blas unknown"
    print(f"python {platform.python_version()} | numpy {np.__version__} | torch {ref.get('versions', {}).get('torch')}")
    _table(ours, ref, args, blas, ours_fp32)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
