"""transcribe(file): peak memory against audio length and model size, and speed against the reference.

    python benchmarks/bench_transcribe.py memory [--minutes 1 60] [--cases silence3 every40 every5 continuous]
    python benchmarks/bench_transcribe.py full [--tokens 32] [--threads 2] [--clip jfk.flac]
                                               [--reference-python PYTHON]
    python benchmarks/bench_transcribe.py talk [--precisions fp32 bf16 int8] [--tokens 100] [--threads 2]
                                               [--seconds 300] [--asr DIR] [--aligner DIR]
    python benchmarks/bench_transcribe.py decode [--precisions fp32 bf16 int8] [--tokens 100] [--threads 2]
                                                 [--batch 1 4] [--prompt 400] [--asr DIR]

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

``talk``: the issue's end-to-end target. A 300 s talk of real speech with pauses
(``onespeech_tools.conversations.build_monologue``: one English reader's clip cut
into stretches of 2-15 s at -6..+6 dB with pauses of 0.3-2.5 s, seeded) through
``transcribe`` with the aligner and speakers on, 2 threads, on the full-size 0.6B
ASR and aligner checkpoints (``--asr``/``--aligner``, default generated into
build/checkpoints), a fixed ``--tokens`` (100) per chunk: the random weights never
end an answer, and the budget reached counts as the chunk's end (as in ``full``).
For each precision of ``--precisions`` (one that this build does not support is
skipped with a line saying so), in a process of its own: wall time and real-time
factor (models loaded in the timed call), the time of each stage (encoder, prefill,
decode, aligner, speakers, VAD, features, loads; ``stage_times.py``, measured from
outside the library) and the tokens decoded, and peak RSS against the larger model's
weights at that precision (the spec: at most weights + 15%).

``decode``: decode against the memory-bandwidth bound. Measures this machine's copy
bandwidth (numpy copies of a 512 MiB buffer, 1 and 2 threads, best of 10; bytes read
plus written), then per precision loads the recognizer, prefills ``--prompt`` positions
(a 30 s chunk's prompt is about 400; the other sequences of a batch copy that cache)
and, for each batch size of ``--batch``, times ``--tokens`` decode steps (``Qwen3Decoder.forward`` of one position for a batch of 1,
``step_batch`` for more, each with the output head). Bytes read per step: every
decoder matrix and norm plus the output head the decoder reads (the tied embedding,
or under INT8 the head's int8 codes and scales), at the precision,
plus each sequence's keys and values up to its position. Prints ms per step, the
achieved bandwidth (bytes per step / seconds per step) and its share of the
copy bandwidth probed in the worker just before and after the steps (the best of
those probes, 5 rounds each), so that a loaded machine slows the probe and the steps
alike; the target is at least 75%.

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
from stage_times import STAGES

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "checkpoints"
SR = 16000
PATTERN = ("picovoice_test.wav", "jfk.flac", "picovoice_test_de.wav", "librispeech_test-clean_1995-1837-0001.wav")


def _peak_rss() -> int:
    """This process's peak resident set, in bytes.

    Linux's ``ru_maxrss`` survives fork and exec, so a worker started by a parent that
    has just converted a model would report the parent's peak; ``VmHWM`` belongs to the
    worker's own address space. ``ru_maxrss`` where there is no /proc.
    """
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# -- workers (one process per measurement) ------------------------------------------------


def worker_ours(args: argparse.Namespace) -> dict:
    from onespeech.speech import transcribe

    _budget_is_the_end()
    start = time.perf_counter()
    document = transcribe(args.audio, args.asr, aligner=args.aligner, language=args.language,
                          max_new_tokens=args.tokens, threads=args.threads, progress=False, vad=args.vad)
    seconds = time.perf_counter() - start
    timed = sum(w.start is not None for w in document.words)
    return {"seconds": seconds, "peak_rss": _peak_rss(), "duration": document.duration,
            "segments": len(document.segments), "words": len(document.words), "timed_words": timed,
            "speakers": len(document.speakers)}


def _budget_is_the_end() -> None:
    """Count a chunk that reached max_new_tokens as ended (random weights never end an answer)."""
    import importlib

    pipeline = importlib.import_module("onespeech.speech.transcribe")  # the module, not the function

    class _BudgetIsTheEnd:  # no chunk reaches "the limit": a budget reached counts as the chunk's end here
        MAX_NEW_TOKENS = object()

    pipeline.Finish = _BudgetIsTheEnd


def worker_talk(args: argparse.Namespace) -> dict:
    from stage_times import StageTimes

    from onespeech.speech import transcribe

    _budget_is_the_end()
    times = StageTimes()
    with times.installed():
        start = time.perf_counter()
        document = transcribe(args.audio, args.asr, aligner=args.aligner, language=args.language,
                              max_new_tokens=args.tokens, threads=args.threads, progress=False, vad=args.vad,
                              precision=args.precision, speakers="auto")
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "peak_rss": _peak_rss(), "duration": document.duration,
            "segments": len(document.segments), "words": len(document.words),
            "timed_words": sum(w.start is not None for w in document.words), "speakers": len(document.speakers),
            "stages": dict(times.seconds), "counts": dict(times.counts), "tokens": times.tokens}


def _decode_step(decoder, tokens: list[int], caches: list, head_seconds: list[float] | None = None) -> list[int]:
    """One greedy step of each sequence: the file path's single-sequence step, or the batched one.

    A single sequence's head product is timed apart into ``head_seconds[0]`` when given."""
    import numpy as np

    from onespeech.kernels import ops

    if len(caches) == 1:
        hidden = decoder.forward(decoder.embed(np.array(tokens)), caches[0])
        start = time.perf_counter()
        logits = decoder.logits(hidden[-1])
        if head_seconds is not None:
            head_seconds[0] += time.perf_counter() - start
        return [ops.argmax(logits)]
    return [ops.argmax(row) for row in decoder.step_batch(tokens, caches)]


def worker_decode(args: argparse.Namespace) -> dict:
    """Decode steps of ``--batch`` sequences after a ``--prompt``-position prefill (see the module docstring)."""
    import numpy as np

    from onespeech.kernels.precision import Precision
    from onespeech.kernels.threads import thread_limit
    from onespeech.qwen3 import Qwen3Options, Qwen3Recognizer

    options = Qwen3Options(threads=args.threads, precision=Precision.parse(args.precision))
    rec = Qwen3Recognizer.load(args.asr, options)
    decoder = rec.decoder
    # every decoder matrix and norm, and the output head the decoder reads: the tied embedding
    # (FP32, BF16) or the head file's int8 codes and scales (INT8); embedding lookups are not counted
    head_bytes = int(decoder._head.nbytes) if decoder._head is not None else 0
    weights = head_bytes + int(sum(rec._model[n].nbytes for n in rec._model
                                   if n.startswith("thinker.model.") and n != "thinker.model.embed_tokens.weight"))
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 150000, size=args.prompt)
    capacity = args.prompt + args.tokens + 2
    results = []
    with thread_limit(args.threads):
        first = decoder.new_cache(capacity)
        decoder.forward(decoder.embed(ids), first)  # one real prefill; the other sequences copy its cache
        for batch in args.batch:
            caches = [decoder.new_cache(capacity) for _ in range(batch)]
            for cache in caches:
                np.copyto(cache.k, first.k)
                np.copyto(cache.v, first.v)
                cache.length = first.length
            tokens = _decode_step(decoder, [int(ids[-1])] * batch, caches)  # warm-up: pages in the weights
            before = copy_bandwidth(args.threads, rounds=5)  # the probe next to the steps, as loaded as they are
            read_before = read_bandwidth(args.threads, rounds=5)
            head = [0.0]
            start = time.perf_counter()
            for _ in range(args.tokens):
                tokens = _decode_step(decoder, tokens, caches, head)
            seconds = (time.perf_counter() - start) / args.tokens
            after = copy_bandwidth(args.threads, rounds=5)
            read_after = read_bandwidth(args.threads, rounds=5)
            positions = range(args.prompt + 1, args.prompt + 1 + args.tokens)  # each step reads the keys so far
            kv = sum(decoder.kv_bytes(p) for p in positions) / args.tokens * batch
            results.append({"batch": batch, "step_s": seconds, "weights": weights, "kv": kv,
                            "head": head_bytes,
                            "head_s": head[0] / args.tokens if batch == 1 else None,
                            "bandwidth": max(*before.values(), *after.values()),
                            "read_bandwidth": max(read_before, read_after)})
    rec.close()
    return {"steps": results}


def copy_bandwidth(threads: int, mib: int = 512, rounds: int = 10) -> dict[int, float]:
    """Bytes read plus written per second by numpy copies of a buffer far larger than the caches.

    For 1 and ``threads`` threads (each copying its share; numpy releases the GIL while
    it copies), best of ``rounds``.
    """
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    src = np.ones(mib << 18, np.float32)
    dst = np.zeros_like(src)
    best: dict[int, float] = {}
    for n in sorted({1, threads}):
        bounds = np.linspace(0, src.shape[0], n + 1).astype(int)
        parts = list(zip(bounds[:-1], bounds[1:], strict=True))
        with ThreadPoolExecutor(n) as pool:
            times = []
            for _ in range(rounds):
                start = time.perf_counter()
                list(pool.map(lambda ab: np.copyto(dst[ab[0]:ab[1]], src[ab[0]:ab[1]]), parts))
                times.append(time.perf_counter() - start)
        best[n] = 2 * src.nbytes / min(times)
    return best


def read_bandwidth(threads: int, rounds: int = 10) -> float:
    """Bytes read per second: bench_kernels' probe (the kernels' ``stream_sum`` of 512 MiB), best of ``rounds``.

    The most a pass that only reads (as decode does) reached here, on ``threads``
    threads: the ceiling for decode, which the copy probe (whose writes stream
    beside its reads) is not.
    """
    from bench_kernels import bandwidth_gbs

    return max(bandwidth_gbs(threads, rounds)) * 1e9


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
    asr, aligner = _models(args, data)
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


TALK_SPEAKER = "libri1272"  # an English reader (onespeech_tools.conversations.CLIPS)


def _talk(data: Path, seconds: float, out: Path, seed: int = 0) -> Path:
    """A talk of ``seconds`` of real speech with pauses (see the module docstring), as 16-bit WAV."""
    import soundfile

    from onespeech.features import load_audio, load_vad
    from onespeech_tools.conversations import CLIPS, build_monologue, prepare_clip

    vad_model = load_vad(data / "models" / "silero_vad.onnx")

    def vad(pcm):  # speech regions in samples, as the conversation builders take them
        return [(r.start, r.end) for r in vad_model.speech_regions(pcm) if r.end > r.start]

    clip = prepare_clip(load_audio(data / "audio" / CLIPS[TALK_SPEAKER]), vad)
    talk = build_monologue(clip, vad, TALK_SPEAKER, seed, seconds=(seconds, seconds))
    soundfile.write(out, talk.pcm, SR, subtype="PCM_16")
    return out


def _supported(precisions: list[str]) -> list[str]:
    """The precisions this build runs; a line for each one it does not."""
    from onespeech.kernels.precision import Precision

    kept = []
    for name in precisions:
        try:
            kept.append(Precision.parse(name).value)
        except ValueError as error:
            print(f"{name}: skipped, this build has no such precision ({error})", flush=True)
    return kept


def _weights(directory: Path, precision: str, kind: str) -> int:
    """Bytes of a model's runtime files at ``precision`` (converted first if needed, outside any measurement)."""
    from onespeech.qwen3.runtime import ensure_runtime

    runtime = ensure_runtime(directory, precision, kind=kind)
    return sum(f.stat().st_size for f in runtime.glob(f"{precision}-*.ost"))


def _machine() -> str:
    import platform

    model = platform.processor() or "unknown CPU"
    flags: set[str] = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name") and model == (platform.processor() or "unknown CPU"):
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8")
    load = os.getloadavg()
    return (f"{model}; {', '.join(f for f in wanted if f in flags) or 'no AVX2'}; {os.cpu_count()} CPUs; "
            f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def _models(args: argparse.Namespace, data: Path) -> tuple[Path, Path]:
    asr = Path(args.asr) if args.asr else _checkpoint("asr-0.6b", "0.6b", "asr", data)
    aligner = Path(args.aligner) if args.aligner else _checkpoint("aligner-0.6b", "0.6b", "aligner", data)
    return asr, aligner


def bench_talk(args: argparse.Namespace) -> None:
    data = _shared_data()
    asr, aligner = _models(args, data)
    vad = data / "models" / "silero_vad.onnx"
    os.environ.setdefault("ONESPEECH_SPEAKER_MODEL", str(data / "models" / "resemblyzer_pretrained.pt"))
    print(f"machine: {_machine()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        audio = _talk(data, args.seconds, Path(tmp) / "talk.wav")
        for precision in _supported(args.precisions):
            weights = {"ASR": _weights(asr, precision, "asr"), "aligner": _weights(aligner, precision, "aligner")}
            runs = [_run_worker(sys.executable, "talk", audio=audio, asr=asr, aligner=aligner, tokens=args.tokens,
                                threads=args.threads, language="English", vad=vad, precision=precision)
                    for _ in range(args.repeats)]
            runs.sort(key=lambda r: r["seconds"])
            result = runs[len(runs) // 2]  # the median run, its stages with it
            largest = max(weights.values())
            chunks = result["counts"].get("prefills", 0)
            each = ", ".join(f"{r['seconds']:.1f}" for r in runs)
            print(f"\n{precision}: {result['seconds']:.1f} s for {result['duration']:.1f} s of audio, "
                  f"RTF {result['seconds'] / result['duration']:.3f} (median of {len(runs)}: "
                  f"{each} s); {chunks} chunks, {result['tokens']} tokens "
                  f"({result['tokens'] / max(chunks, 1):.1f} per chunk), {result['segments']} segments, "
                  f"{result['timed_words']}/{result['words']} words timed, {result['speakers']} speakers", flush=True)
            stages = result["stages"]
            other = result["seconds"] - sum(stages.values())
            for stage in (*STAGES, "other"):
                value = other if stage == "other" else stages.get(stage, 0.0)
                print(f"  {stage:<9}{value:8.1f} s {value / result['seconds']:6.1%}   RTF {value / result['duration']:.3f}")
            print(f"  peak RSS {_mb(result['peak_rss'])} = {result['peak_rss'] / largest:.3f} x the larger model's "
                  f"{precision} weights (ASR {_mb(weights['ASR'])}, aligner {_mb(weights['aligner'])}; "
                  "the spec: at most 1.15)", flush=True)


def bench_decode(args: argparse.Namespace) -> None:
    data = _shared_data()
    asr, _ = _models(args, data)
    print(f"machine: {_machine()}", flush=True)
    bandwidth = copy_bandwidth(args.threads)
    print("copy bandwidth (numpy, 512 MiB, best of 10, bytes read + written): "
          + ", ".join(f"{n} thread{'s' * (n > 1)} {b / 1e9:.1f} GB/s" for n, b in bandwidth.items()), flush=True)
    for precision in _supported(args.precisions):
        _weights(asr, precision, "asr")
        result = _run_worker(sys.executable, "decode", asr=asr, tokens=args.tokens, threads=args.threads,
                             precision=precision, batch=",".join(map(str, args.batch)), prompt=args.prompt)
        for row in result["steps"]:
            step = row["weights"] + row["kv"]
            achieved = step / row["step_s"]
            print(f"{precision} batch {row['batch']}: {row['step_s'] * 1e3:.1f} ms per step "
                  f"({row['step_s'] / row['batch'] * 1e3:.1f} ms per token); reads {step / 2**20:,.0f} MiB per step "
                  f"(weights {row['weights'] / 2**20:,.0f} MiB, KV {row['kv'] / 2**20:,.0f} MiB) = "
                  f"{achieved / 1e9:.2f} GB/s = {achieved / row['bandwidth']:.0%} of the copy bandwidth probed "
                  f"around the steps ({row['bandwidth'] / 1e9:.1f} GB/s; bound {step / row['bandwidth'] * 1e3:.1f} "
                  f"ms per step; target at least 75%); {achieved / row['read_bandwidth']:.0%} of the read "
                  f"bandwidth probed there ({row['read_bandwidth'] / 1e9:.1f} GB/s, "
                  f"{row['read_bandwidth'] / row['bandwidth']:.0%} of the copy probe)", flush=True)
            if row["head_s"]:  # one sequence: its head product timed apart from the layers
                rest = row["step_s"] - row["head_s"]
                print(f"  of which the head {row['head_s'] * 1e3:.1f} ms ({row['head'] / row['head_s'] / 1e9:.1f} GB/s), "
                      f"the layers and the rest {rest * 1e3:.1f} ms "
                      f"({(step - row['head']) / rest / 1e9:.1f} GB/s)", flush=True)


WORKERS = {"ours": worker_ours, "reference": worker_reference, "talk": worker_talk, "decode": worker_decode}
MODES = {"memory": bench_memory, "full": bench_full, "talk": bench_talk, "decode": bench_decode}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", choices=tuple(MODES), default="memory")
    parser.add_argument("--minutes", type=float, nargs="+", default=[1.0, 60.0])
    parser.add_argument("--cases", nargs="+", choices=tuple(CASES), default=list(CASES),
                        help="memory: how speech and silence alternate in the clip")
    parser.add_argument("--tokens", type=int, default=None,
                        help="token budget per chunk (memory 64, full 32, talk 100), decode: steps timed (100)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clip", default="jfk.flac")
    parser.add_argument("--ending", action="store_true",
                        help="memory: the tiny ASR whose answers end (text length varies per chunk)")
    parser.add_argument("--reference-python", default=os.environ.get("ONESPEECH_REF_PYTHON"),
                        help="interpreter with the reference toolkit (default $ONESPEECH_REF_PYTHON; none: skipped)")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16", "int8"],
                        help="talk, decode: the precisions to run (one this build lacks is skipped)")
    parser.add_argument("--seconds", type=float, default=300.0, help="talk: length of the talk")
    parser.add_argument("--repeats", type=int, default=1, help="talk: runs per precision (the median is shown)")
    parser.add_argument("--batch", type=lambda v: [int(b) for b in v.split(",")], default=[1, 4],
                        help="decode: sequences decoded together, comma-separated (default 1,4)")
    parser.add_argument("--prompt", type=int, default=400, help="decode: prompt positions before the steps")
    parser.add_argument("--worker", choices=tuple(WORKERS))
    for name in ("audio", "asr", "aligner", "language", "vad", "precision"):
        parser.add_argument(f"--{name}")
    args = parser.parse_args()
    if args.worker:
        args.tokens = int(args.tokens)
        print(json.dumps(WORKERS[args.worker](args)))
        return 0
    if args.tokens is None:
        args.tokens = {"memory": 64, "full": 32}.get(args.mode, 100)
    sys.path[:0] = source_paths("tokenizer", "kernels", "features", "qwen3", "align", "speech") + [str(ROOT / "tools")]
    require_compiled_kernels()
    MODES[args.mode](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
