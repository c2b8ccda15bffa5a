"""Matrix-product FLOPs of the encoder and the prefill, and the time they need at a float32 peak.

    python benchmarks/flops.py [--checkpoint DIR] [--peak-gflops G] [--threads 2]

For the clips of bench_asr.py (10 s and 30 s), counts 2·M·N·K for every product
that one FP32 encoder call and one prefill (``recognize`` with one token, minus its
encoder) make: ``ops.linear`` and ``ops.linear_many``, and ``ops.conv3x3s2`` as its
im2col product. Attention, norms and activations are left out. With
``--peak-gflops`` (the machine's float32 FMA rate on all threads; for one core,
``gcc -O2 -mavx512f -mavx512bw -mavx512bf16 -o dpbf16_rate benchmarks/dpbf16_rate.c
&& ./dpbf16_rate`` prints ns per 16-lane FMA: 32 flops each) it also prints the time
the products alone need at that rate, a lower bound on the stage's FP32 time, and the
rate a stage time would imply (``--target-ms`` per stage and clip, e.g. 0.6x the
reference's time from bench_asr.py). Runs on the same seeded 0.6B checkpoint.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# bench_asr imports onespeech.kernels before numpy (as an application does) and holds the clips
import bench_asr  # noqa: E402  # isort: skip
import numpy as np  # noqa: E402

from onespeech.features import load_audio, log_mel_spectrogram  # noqa: E402
from onespeech.kernels import ops  # noqa: E402
from onespeech.kernels.threads import thread_limit  # noqa: E402


class ProductCounter:
    """Wraps the product ops and adds up 2·M·N·K for the outermost calls (a convolution's
    inner ``linear`` and ``linear_many``'s per-matrix calls are not counted twice)."""

    def __init__(self) -> None:
        self.flop = 0.0
        self._depth = 0
        self._saved: dict[str, Callable] = {}

    def _wrap(self, name: str, flop: Callable[..., float]) -> None:
        inner = getattr(ops, name)
        self._saved[name] = inner

        def counted(*args, **kwargs):
            if self._depth == 0:
                self.flop += flop(*args)
            self._depth += 1
            try:
                return inner(*args, **kwargs)
            finally:
                self._depth -= 1

        setattr(ops, name, counted)

    def __enter__(self) -> ProductCounter:
        def rows(x: np.ndarray) -> int:
            return x.size // x.shape[-1]

        self._wrap("linear", lambda x, w, *_: 2.0 * rows(x) * w.shape[0] * w.shape[1])
        self._wrap("linear_many", lambda x, ws, *_: sum(2.0 * rows(x) * w.shape[0] * w.shape[1] for w in ws))
        self._wrap(
            "conv3x3s2",
            lambda x, k, *_: 2.0 * x.shape[0] * ((x.shape[1] + 1) // 2) * ((x.shape[2] + 1) // 2) * k.size,
        )
        return self

    def __exit__(self, *exc) -> None:
        for name, inner in self._saved.items():
            setattr(ops, name, inner)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=bench_asr.DEFAULT_CHECKPOINT)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--peak-gflops", type=float, help="float32 FMA rate of all threads together (GFLOP/s)")
    parser.add_argument("--target-ms", type=float, nargs=4, metavar=("ENC10", "PRE10", "ENC30", "PRE30"),
                        help="stage times to compare with: encoder and prefill at 10 s, then at 30 s")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE.parent / "tools"))
    from onespeech.qwen3 import Precision, Qwen3Options, Qwen3Recognizer
    from onespeech_tools.data import shared_data_or_skip

    bench_asr._prepare_checkpoint(args.checkpoint)
    data = shared_data_or_skip("flops")
    rec = Qwen3Recognizer.load(args.checkpoint, Qwen3Options(threads=args.threads, precision=Precision.FLOAT32))
    targets = iter(args.target_ms or [])
    print(f"{args.checkpoint.name} fp32 | threads {args.threads} | products: 2·M·N·K of linear, linear_many, "
          f"conv3x3s2 (as im2col)" + (f" | peak {args.peak_gflops:.0f} GFLOP/s" if args.peak_gflops else ""))
    with thread_limit(args.threads):
        for label, (name, seconds) in bench_asr.CLIPS.items():
            pcm = load_audio(data / "audio" / name)[: int(seconds * bench_asr.SR)]
            pcm = np.resize(pcm, int(seconds * bench_asr.SR)).astype(np.float32)
            mel = log_mel_spectrogram(pcm)
            with ProductCounter() as count:
                rec.encoder.forward(mel)
                encoder = count.flop
                rec.recognize(pcm, bench_asr.LANGUAGE, 1, mel=mel)
                prefill = count.flop - 2 * encoder  # recognize runs the encoder again
            for stage, flop in (("encoder", encoder), ("prefill", prefill)):
                line = f"{label:>5} {stage:<8} {flop / 1e9:7.1f} GFLOP"
                if args.peak_gflops:
                    line += f"   at the peak >= {flop / args.peak_gflops / 1e6:7.0f} ms"
                target = next(targets, None)
                if target:
                    rate = flop / (target / 1e3) / 1e9
                    line += f"   in {target:.0f} ms: {rate:.0f} GFLOP/s"
                    if args.peak_gflops:
                        line += f" ({rate / args.peak_gflops:.0%} of the peak, products only)"
                print(line)
    rec.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
