"""Matrix-product FLOPs of the encoder and the prefill, and the time they need at a float32 peak.

    python benchmarks/flops.py [--checkpoint DIR] [--peak-gflops G] [--threads 2] [--repeats 3]

For the clips of bench_asr.py (10 s and 30 s), counts 2·M·N·K for every product
that one FP32 encoder call and one prefill (``recognize`` with one token, minus its
encoder) make: ``ops.linear`` and ``ops.linear_many``, and ``ops.conv3x3s2`` as its
im2col product. It also times each stage and the time spent inside those products,
so the rest (attention, norms, activations, glue) is measured as it runs now.

The peak is ``--peak-gflops`` (the machine's float32 rate on all threads), else the
best rate of a 3072-cube BLAS product measured here (``--repeats`` + 2 tries): the
closest the BLAS gets to the FMA units, which no product of the stages can beat,
measured on the same threads instead of taken from a data sheet. For each stage it
prints the time the products alone need at the peak, and that time plus the rest as
measured: a lower bound on the stage with this code's other operators. With
``--target-ms`` (per stage and clip, e.g. 0.6x the reference's time from
bench_asr.py) it prints the rate the target asks of the products once the rest has
taken its share, and whether the bound already exceeds the target. Runs on the same
seeded 0.6B checkpoint.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
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
        self.seconds = 0.0  # wall time inside the counted (outermost) calls
        self._depth = 0
        self._saved: dict[str, Callable] = {}

    def _wrap(self, name: str, flop: Callable[..., float]) -> None:
        inner = getattr(ops, name)
        self._saved[name] = inner

        def counted(*args, **kwargs):
            outermost = self._depth == 0
            if outermost:
                self.flop += flop(*args)
            self._depth += 1
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self._depth -= 1
                if outermost:
                    self.seconds += time.perf_counter() - start

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


def blas_peak_gflops(threads: int, tries: int, n: int = 3072) -> float:
    """The best rate of an n-cube float32 BLAS product on ``threads`` threads (GFLOP/s)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), np.float32)
    best = float("inf")
    with thread_limit(threads):
        np.matmul(a, b, out=out)  # warm-up: threads started, pages touched
        for _ in range(tries):
            start = time.perf_counter()
            np.matmul(a, b, out=out)
            best = min(best, time.perf_counter() - start)
    return 2.0 * n**3 / best / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=bench_asr.DEFAULT_CHECKPOINT)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each stage (medians are printed)")
    parser.add_argument("--peak-gflops", type=float,
                        help="float32 rate of all threads together (GFLOP/s); default: measured (module doc)")
    parser.add_argument("--target-ms", type=float, nargs=4, metavar=("ENC10", "PRE10", "ENC30", "PRE30"),
                        help="stage times to compare with: encoder and prefill at 10 s, then at 30 s")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    sys.path.insert(0, str(HERE.parent / "tools"))
    from onespeech.qwen3 import Precision, Qwen3Options, Qwen3Recognizer
    from onespeech_tools.data import shared_data_or_skip

    bench_asr._prepare_checkpoint(args.checkpoint)
    data = shared_data_or_skip("flops")
    peak = args.peak_gflops
    source = "given"
    if peak is None:
        peak, source = blas_peak_gflops(args.threads, args.repeats + 2), "best 3072-cube BLAS product here"
    rec = Qwen3Recognizer.load(args.checkpoint, Qwen3Options(threads=args.threads, precision=Precision.FLOAT32))
    targets = iter(args.target_ms or [])
    print(f"{args.checkpoint.name} fp32 | threads {args.threads} | products: 2·M·N·K of linear, linear_many, "
          f"conv3x3s2 (as im2col) | peak {peak:.0f} GFLOP/s ({source}) | medians of {args.repeats}")
    with thread_limit(args.threads):
        for label, (name, seconds) in bench_asr.CLIPS.items():
            pcm = load_audio(data / "audio" / name)[: int(seconds * bench_asr.SR)]
            pcm = np.resize(pcm, int(seconds * bench_asr.SR)).astype(np.float32)
            mel = log_mel_spectrogram(pcm)
            rec.recognize(pcm, bench_asr.LANGUAGE, 1, mel=mel)  # warm-up: weights paged in
            runs: dict[str, list[tuple[float, float, float]]] = {"encoder": [], "prefill": []}
            for _ in range(args.repeats):  # (flop, seconds in products, wall seconds) per stage
                with ProductCounter() as count:
                    start = time.perf_counter()
                    rec.encoder.forward(mel)
                    encoder = (count.flop, count.seconds, time.perf_counter() - start)
                    start = time.perf_counter()
                    rec.recognize(pcm, bench_asr.LANGUAGE, 1, mel=mel)
                    wall = time.perf_counter() - start
                # recognize runs the encoder again: the prefill is the rest, as bench_asr.py times it
                runs["encoder"].append(encoder)
                runs["prefill"].append((count.flop - 2 * encoder[0], count.seconds - 2 * encoder[1], wall - encoder[2]))
            for stage, samples in runs.items():
                flop = samples[0][0]
                busy = statistics.median(s[1] for s in samples)
                rest = statistics.median(s[2] - s[1] for s in samples)
                at_peak = flop / peak / 1e6
                print(f"{label:>5} {stage:<8} {flop / 1e9:6.1f} GFLOP   products {busy * 1e3:7.1f} ms "
                      f"({flop / busy / 1e9:4.0f} GFLOP/s), rest {rest * 1e3:6.1f} ms   at the peak: "
                      f"products >= {at_peak:6.0f} ms, with the rest >= {at_peak + rest * 1e3:6.0f} ms")
                target = next(targets, None)
                if target:
                    room = target / 1e3 - rest
                    need = flop / room / 1e9 if room > 0 else float("inf")
                    verdict = "within the peak" if need <= peak else "above the peak: not reachable with this rest"
                    print(f"{'':>14} target {target:7.1f} ms: products need {need:4.0f} GFLOP/s "
                          f"({need / peak:.0%} of the peak), {verdict}")
    rec.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
