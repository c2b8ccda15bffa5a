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
  steps. (Earlier versions took the N+1-token run minus the 1-token run; both
  repeat encoder and prefill, whose run-to-run spread, ~0.5 s at 30 s, then
  landed in the per-token figure.) Peak RSS.

Each system runs in its own process (ours with this interpreter, the reference with
``--reference-python``), one after the other, so peak RSS is per system; the warm
loads are timed in a process of their own before it, so the measured process loads
the model once, as an application does. ``--precision both`` (the default) runs
every system in FP32 and in BF16 and ends with one table of both precisions (medians,
the ratios to the reference and ours BF16 / ours FP32); ``--precision bf16`` alone
still runs our FP32 right after our BF16 and adds its decode time and the BF16 / FP32
ratio. Every header names the compiled kernel variant that ran (``amx``: BF16's
many-row products on AMX tiles; ``avx512bf16``: on VDPBF16PS).
``--rounds N`` repeats that sequence N times (ours, [our FP32,] reference, ours, ...)
and pools each system's samples, so a slow drift of the machine's speed, common on
shared hosts, falls on every system instead of on whichever ran last; peak RSS is
the largest of its rounds.
Run it on an otherwise idle machine.
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

from source_tree import require_compiled_kernels, source_paths  # benchmarks/ is the script's directory

# Import onespeech before numpy, as an application does, so that onespeech.kernels
# can shorten OpenBLAS's idle spinning before numpy loads it (docs/kernels.md, "Threads").
sys.path[:0] = source_paths("kernels")
import onespeech.kernels  # noqa: E402,I001  (first: sets OPENBLAS_THREAD_TIMEOUT unless set)
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
    sys.path[:0] = source_paths("tokenizer", "kernels", "features", "qwen3")
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
    kernels = onespeech.kernels.info()
    # which compiled variant ran (BF16's many-row products: AMX tiles in "amx", VDPBF16PS in "avx512bf16")
    result["kernels"] = {key: kernels[key] for key in ("variant", "openmp", "lanes", "supported", "cpu_features")}
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
    sys.path[:0] = source_paths("kernels", "features")
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


def _bf16_over_fp32(ours: dict, ours_fp32: dict, label: str, stage: str = "decode") -> float:
    """Median BF16 time of one stage over our FP32's, one clip (decode: at most 0.55; encoder, prefill: at most 1)."""
    b, f = (statistics.median(r["stages"][label][stage]) for r in (ours, ours_fp32))
    return b / f


def _kernels(result: dict) -> str:
    k = result.get("kernels")
    return f"kernels {k['variant']}" if k else "kernels unknown"


def _bandwidth(ours: dict, args: argparse.Namespace) -> float:
    """GB/s for the decode floor: --bandwidth-gbs, else the probe of this run (FP32's convert step)."""
    return args.bandwidth_gbs or ours["fp32"].get("bandwidth_gbs", float("nan"))


def _summary(ours: dict, ref: dict, args: argparse.Namespace) -> None:
    """Both precisions side by side, medians in ms: the issue's table, with the ratios of its targets."""
    for label in CLIPS:
        print(f"\n{args.checkpoint.name} fp32 and bf16 | clip {label} | threads {args.threads} | "
              f"ours: fp32 {_kernels(ours['fp32'])}, bf16 {_kernels(ours['bf16'])}")
        print(f"{'stage':<15}{'ours fp32':>10}{'ref fp32':>10}{'ratio':>7}{'ours bf16':>11}{'ref bf16':>10}"
              f"{'ratio':>7}{'ours bf16/fp32':>16}")
        for stage in ("encoder", "prefill", "decode"):
            o32, r32, o16, r16 = (statistics.median(r["stages"][label][stage]) * 1e3
                                  for r in (ours["fp32"], ref["fp32"], ours["bf16"], ref["bf16"]))
            unit = "ms/tok" if stage == "decode" else "ms"
            extra = ""
            if stage == "decode":  # share of the memory-bound limit (every decoder weight read once per token)
                extra = "   of the memory bound: " + ", ".join(
                    f"{p} {ours[p]['decode_bytes'] / _bandwidth(ours, args) / 1e6 / o:.0%}"
                    for p, o in (("fp32", o32), ("bf16", o16)))
            print(f"{stage + ' ' + unit:<15}{o32:10.1f}{r32:10.1f}{o32 / r32:7.2f}{o16:11.1f}{r16:10.1f}"
                  f"{o16 / r16:7.2f}{o16 / o32:16.2f}{extra}")


def _table(ours: dict, ref: dict, args: argparse.Namespace, blas: str, ours_fp32: dict | None = None) -> None:
    weights = ours["weights_bytes"]
    bandwidth = args.bandwidth_gbs or ours.get("bandwidth_gbs", float("nan"))
    floor_ms = ours["decode_bytes"] / bandwidth / 1e9 * 1e3
    for label in CLIPS:
        print(f"\n{args.checkpoint.name} {args.precision} | clip {label} | threads {args.threads} | tokens {args.tokens} "
              f"| repeats {args.repeats} x rounds {args.rounds} | {blas} | ours: {_kernels(ours)}")  # fmt: skip
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
    parser.add_argument("--precision", choices=("fp32", "bf16", "both"), default="both",
                        help="both (default): every system in FP32 and in BF16, and a table of both")
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

    require_compiled_kernels()
    _prepare_checkpoint(args.checkpoint)
    precisions = ("fp32", "bf16") if args.precision == "both" else (args.precision,)
    # ours in each precision asked, and our FP32 whenever BF16 runs: the anchor of the BF16 targets
    ours_precisions = ("fp32", "bf16") if "bf16" in precisions else precisions
    at = {p: argparse.Namespace(**{**vars(args), "precision": p}) for p in ours_precisions}
    with tempfile.TemporaryDirectory(prefix="bench_asr_") as tmp:
        work = Path(tmp)
        clips = _clips(work)
        converted = {p: _run_worker(sys.executable, "convert", at[p], clips, work / f"convert_{p}.json")
                     for p in ours_precisions}
        runs: dict[tuple[str, str], list[dict]] = {}
        for _ in range(args.rounds):  # interleaved: ours, [our FP32,] reference, per precision
            for p in precisions:
                for q in (p, "fp32") if p == "bf16" and "fp32" not in precisions else (p,):
                    runs.setdefault(("ours", q), []).append(
                        _run_worker(sys.executable, "ours", at[q], clips, work / f"ours_{q}.json"))
                if not args.skip_reference:
                    runs.setdefault(("reference", p), []).append(
                        _run_worker(args.reference_python, "reference", at[p], clips, work / f"reference_{p}.json"))
        ours = {q: _pool(runs[("ours", q)]) for q in ours_precisions}
        for q in ours_precisions:
            for key in ("first_load_with_conversion_s", "bandwidth_gbs"):
                if key in converted[q]:
                    ours[q][key] = converted[q][key]
        if args.skip_reference:
            print(json.dumps(ours, indent=1))
            if "bf16" in ours:  # the BF16-to-our-FP32 targets need no reference run
                for label in CLIPS:
                    print(f"{label}: " + ", ".join(
                        f"{stage} bf16 / fp32 {_bf16_over_fp32(ours['bf16'], ours['fp32'], label, stage):.2f}"
                        for stage in ("encoder", "prefill", "decode")))
            return 0
        ref = {p: _pool(runs[("reference", p)]) for p in precisions}
    saved = ROOT / "build" / f"bench_asr_{args.precision}.json"  # the raw timings, to reprint or compare
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "ours": ours, "reference": ref}))
    try:
        from threadpoolctl import threadpool_info

        blas = ", ".join(sorted({f"{i['internal_api']} {i.get('version')}" for i in threadpool_info() if i["user_api"] == "blas"}))
    except ImportError:
        blas = "blas unknown"
    first = ref[precisions[0]]
    print(f"python {platform.python_version()} | numpy {np.__version__} | torch {first.get('versions', {}).get('torch')}")
    for p in precisions:
        _table(ours[p], ref[p], at[p], blas, ours["fp32"] if p == "bf16" else None)
    if len(precisions) == 2:
        _summary(ours, ref, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
