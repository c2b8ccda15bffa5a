"""Our BF16 decode against our FP32 decode, measured in interleaved pairs in one process.

    python benchmarks/bench_decode_pair.py [--checkpoint DIR] [--tokens 32] [--pairs 12] [--threads 2]

`bench_asr.py --precision bf16` runs our BF16 and our FP32 each in its own process,
one after the other, and divides their medians. Decode is memory-bound, and on a
shared host the read bandwidth drifts by a fifth within minutes (16-23 GB/s here),
so that ratio moves by about +-0.05 from run to run whatever the code does. This
benchmark loads both precisions of the same checkpoint in one process and, per clip
(the 10 s and 30 s clips of bench_asr.py, language forced), prefills each once with
its own real prompt, then times blocks of ``--tokens`` decode steps (embedding, the
decoder, the output head, the argmax; the same steps bench_asr.py times) from the
same cache position, fed the ids that precision chose greedily. BF16 and FP32 blocks
alternate, each pair seconds apart and in alternating order, so a drift falls on
both; each pair gives one ratio. Printed per clip: both medians, the median of the
pair ratios and their range. Peak RSS is not measured here (both models are loaded).
Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from source_tree import require_compiled_kernels, source_paths  # noqa: E402

sys.path[:0] = source_paths("tokenizer", "kernels", "features", "qwen3")
sys.path.insert(0, str(ROOT / "tools"))  # onespeech_tools when not installed
import onespeech.kernels  # noqa: E402,F401,I001  (sets OPENBLAS_THREAD_TIMEOUT unless set)
import numpy as np  # noqa: E402
from bench_asr import DEFAULT_CHECKPOINT, _clips, _prepare_checkpoint  # noqa: E402
from onespeech_tools.decode_rate import DecodeBlock  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    parser.add_argument("--tokens", type=int, default=32, help="decode steps per timed block")
    parser.add_argument("--pairs", type=int, default=12, help="BF16/FP32 block pairs per clip")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--target", type=float, default=0.55, help="ratio to count pairs against")
    args = parser.parse_args()
    if args.tokens < 1 or args.pairs < 1:
        parser.error("--tokens and --pairs must be at least 1")
    require_compiled_kernels()

    from onespeech.kernels.threads import thread_limit
    from onespeech.qwen3 import Precision, Qwen3Options, Qwen3Recognizer

    _prepare_checkpoint(args.checkpoint)
    recs = {
        p: Qwen3Recognizer.load(
            args.checkpoint, Qwen3Options(threads=args.threads, max_new_tokens=args.tokens + 1, precision=Precision(p))
        )
        for p in ("bf16", "fp32")
    }
    print(f"{args.checkpoint.name} | threads {args.threads} | {args.tokens} tokens per block | {args.pairs} pairs")
    print("clip   bf16 ms/tok median (min..max)   fp32 ms/tok median (min..max)   bf16/fp32 per pair: median (min..max)")
    with tempfile.TemporaryDirectory(prefix="bench_decode_pair_") as tmp, thread_limit(args.threads):
        for label, path in _clips(Path(tmp)).items():
            pcm = np.load(path)
            blocks = {p: DecodeBlock(rec, pcm, args.tokens) for p, rec in recs.items()}
            for block in blocks.values():  # warm-up: page in the weights
                block.ms_per_token()
            times: dict[str, list[float]] = {"bf16": [], "fp32": []}
            ratios = []
            for i in range(args.pairs):
                for p in ("bf16", "fp32") if i % 2 == 0 else ("fp32", "bf16"):
                    times[p].append(blocks[p].ms_per_token())
                ratios.append(times["bf16"][-1] / times["fp32"][-1])
            b, f = times["bf16"], times["fp32"]
            met = sum(r <= args.target for r in ratios)
            print(
                f"{label:5s}  {statistics.median(b):6.1f} ({min(b):.1f}..{max(b):.1f})"
                f"{'':13s}{statistics.median(f):6.1f} ({min(f):.1f}..{max(f):.1f})"
                f"{'':13s}{statistics.median(ratios):.3f} ({min(ratios):.3f}..{max(ratios):.3f}),"
                f" {met}/{len(ratios)} pairs <= {args.target}"
            )
    for rec in recs.values():
        rec.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
