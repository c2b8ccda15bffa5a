"""Matrix-product FLOPs of the encoder and the prefill (and of the aligner), and the time they need at a float32 peak.

    python benchmarks/flops.py [--checkpoint DIR] [--aligner DIR] [--models asr aligner]
                               [--peak-gflops G] [--threads 2] [--repeats 3] [--breakdown]

For the clips of bench_asr.py (10 s and 30 s), counts 2·M·N·K for every product
that one FP32 encoder call and one prefill (``recognize`` with one token, minus its
encoder) make: ``ops.linear`` and ``ops.linear_many``, and ``ops.conv3x3s2`` as its
im2col product. It also times each stage and the time spent inside those products,
so the rest (attention, norms, activations, glue) is measured as it runs now.

``--models aligner`` (with ``--aligner`` naming a Qwen3-ForcedAligner checkpoint)
does the same for the aligner on ``--aligner-seconds`` of real speech (bench_align.py's
input: clips tiled to length, their transcripts repeated to match): its audio
encoder, and its forward pass (``timestamp_logits`` minus a separate encoder call:
the prompt through the decoder and the classify head at the timestamp rows).

The peak is ``--peak-gflops`` (the machine's float32 rate on all threads), else the
best rate of a 3072-cube BLAS product measured here (``--repeats`` + 2 tries): the
closest the BLAS gets to the FMA units, which no product of the stages can beat,
measured on the same threads instead of taken from a data sheet. For each stage it
prints the time the products alone need at the peak, and that time plus the rest as
measured: a lower bound on the stage with this code's other operators, and the
stage's time over that bound. On a shared machine the load changes within a run, so
(without ``--peak-gflops``) each round also times one cube product right before its
stages, and the stage's ratio to the bound at that round's peak is printed as well
(the median over rounds): the figure to quote there. ``--breakdown`` adds, per stage, the time of every
other operator (attention, norms, activations; "glue" is what no op accounts for:
Python, copies, concatenations) and of every product shape with its rate. With
``--target-ms`` (per stage and clip, e.g. 0.6x the reference's time from
bench_asr.py) it prints the rate the target asks of the products once the rest has
taken its share, and whether the bound already exceeds the target. Runs on the same
seeded 0.6B checkpoints.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# bench_asr imports onespeech.kernels before numpy (as an application does) and holds the clips
import bench_asr  # noqa: E402  # isort: skip
import numpy as np  # noqa: E402

from onespeech.features import load_audio, log_mel_spectrogram  # noqa: E402
from onespeech.kernels import ops  # noqa: E402
from onespeech.kernels.threads import thread_limit  # noqa: E402

DEFAULT_ALIGNER = Path(os.environ.get("ONESPEECH_BENCH_ALIGNER", HERE.parent / "build" / "checkpoints" / "aligner-0.6b"))
PRODUCTS = ("linear", "linear_many", "conv3x3s2")


def _rows(x: np.ndarray) -> int:
    return x.size // x.shape[-1]


def _product_shapes(name: str, args: tuple) -> list[tuple[int, int, int]]:
    """(M, N, K) of each product one call of ``name`` makes (a convolution as its im2col product)."""
    x = args[0]
    if name == "linear":
        return [(_rows(x), args[1].shape[0], args[1].shape[1])]
    if name == "linear_many":
        return [(_rows(x), w.shape[0], w.shape[1]) for w in args[1]]
    k = args[1]
    return [(x.shape[0] * ((x.shape[1] + 1) // 2) * ((x.shape[2] + 1) // 2), k.shape[0], k.shape[1])]


class OpTimer:
    """Wraps every op of ``onespeech.kernels.ops`` and adds up the wall time of its outermost
    calls (a convolution's inner ``linear`` and ``linear_many``'s per-matrix calls are not
    counted twice); for the products also 2·M·N·K, per shape."""

    def __init__(self) -> None:
        self.flop = 0.0
        self.seconds = 0.0  # wall time inside the counted (outermost) product calls
        self.op_seconds: dict[str, float] = defaultdict(float)  # the other ops, by name
        self.shapes: dict[tuple[str, int, int, int], list[float]] = defaultdict(lambda: [0.0, 0.0])  # flop, s
        self._depth = 0
        self._saved: dict[str, Callable] = {}

    def _wrap(self, name: str) -> None:
        inner = getattr(ops, name)
        self._saved[name] = inner
        product = name in PRODUCTS

        def timed(*args, **kwargs):
            outermost = self._depth == 0
            self._depth += 1
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self._depth -= 1
                if outermost:
                    seconds = time.perf_counter() - start
                    if product:
                        shapes = _product_shapes(name, args)
                        flops = [2.0 * m * n * k for m, n, k in shapes]
                        self.flop += sum(flops)
                        self.seconds += seconds
                        label = "conv3x3s2" if name == "conv3x3s2" else "linear"
                        for (m, n, k), f in zip(shapes, flops, strict=True):  # a shared call's time by flops
                            entry = self.shapes[(label, m, n, k)]
                            entry[0] += f
                            entry[1] += seconds * f / sum(flops) if sum(flops) else 0.0
                    else:
                        self.op_seconds[name] += seconds

        setattr(ops, name, timed)

    def __enter__(self) -> OpTimer:
        for name in ops.__all__:
            if callable(getattr(ops, name, None)):
                self._wrap(name)
        return self

    def __exit__(self, *exc) -> None:
        for name, inner in self._saved.items():
            setattr(ops, name, inner)

    def snapshot(self) -> tuple[float, float, dict[str, float], dict[tuple[str, int, int, int], tuple[float, float]]]:
        return (self.flop, self.seconds, dict(self.op_seconds), {k: (v[0], v[1]) for k, v in self.shapes.items()})


class Stage:
    """The samples of one stage: per run, products' flop and seconds, wall seconds, other ops, shapes."""

    def __init__(self) -> None:
        self.flop = 0.0
        self.busy: list[float] = []
        self.wall: list[float] = []
        self.ops: list[dict[str, float]] = []
        self.shapes: list[dict[tuple[str, int, int, int], tuple[float, float]]] = []
        self.peaks: list[float] = []  # the BLAS rate measured in each run's round (GFLOP/s), if measured

    def add(self, flop: float, busy: float, wall: float, op_seconds: dict[str, float],
            shapes: dict[tuple[str, int, int, int], tuple[float, float]]) -> None:
        self.flop = flop
        self.busy.append(busy)
        self.wall.append(wall)
        self.ops.append(op_seconds)
        self.shapes.append(shapes)


def _minus(after: tuple, before: tuple) -> tuple:
    """The OpTimer counts between two snapshots."""
    flop, seconds, op_seconds, shapes = after
    ops_diff = {k: v - before[2].get(k, 0.0) for k, v in op_seconds.items() if v - before[2].get(k, 0.0) > 0}
    shapes_diff = {}
    for key, (f, s) in shapes.items():
        f0, s0 = before[3].get(key, (0.0, 0.0))
        if f > f0:
            shapes_diff[key] = (f - f0, s - s0)
    return flop - before[0], seconds - before[1], ops_diff, shapes_diff


def _encoder_then_whole(timer: OpTimer, encoder: Callable[[], object], whole: Callable[[], object],
                        stages: tuple[Stage, Stage], cube: CubeProduct | None) -> None:
    """One run: ``encoder`` alone, then ``whole`` (which runs the encoder again); the second
    stage is ``whole`` minus the encoder run, as bench_asr.py times the prefill. With ``cube``,
    the BLAS rate is measured right before, so each run has a peak taken under the same load."""
    if cube is not None:
        rate = cube.rate()
        stages[0].peaks.append(rate)
        stages[1].peaks.append(rate)
    s0 = timer.snapshot()
    start = time.perf_counter()
    encoder()
    enc_wall = time.perf_counter() - start
    s1 = timer.snapshot()
    start = time.perf_counter()
    whole()
    whole_wall = time.perf_counter() - start
    s2 = timer.snapshot()
    enc = _minus(s1, s0)
    rest = _minus(s2, s1)
    # the whole call's own encoder is taken as equal to the separate one
    ops_rest = {k: v - enc[2].get(k, 0.0) for k, v in rest[2].items()}
    shapes_rest = {}
    for key, (f, s) in rest[3].items():
        f0, s0_ = enc[3].get(key, (0.0, 0.0))
        if f > f0:
            shapes_rest[key] = (f - f0, s - s0_)
    stages[0].add(enc[0], enc[1], enc_wall, enc[2], enc[3])
    stages[1].add(rest[0] - enc[0], rest[1] - enc[1], whole_wall - enc_wall, ops_rest, shapes_rest)


def _routings(compare_rows: int | None) -> list[tuple[str, int | None]]:
    """(stage name suffix, GEMM row limit) of each routing a run measures: the current one, and
    with ``--compare-gemm-rows`` that limit as well, run after it in the same round."""
    return [("", None)] + ([] if compare_rows is None else [(f" @{compare_rows}", compare_rows)])


@contextlib.contextmanager
def _gemm_rows(rows: int | None) -> Iterator[None]:
    """Route float32 products of up to ``rows`` rows to our GEMM on 8-lane (AVX2) builds at any K
    (``ops._GEMM_EIGHT_LANES_MAX_ROWS``; 0 restores the routing before that limit); None: as set."""
    saved = ops._GEMM_EIGHT_LANES_MAX_ROWS
    if rows is not None:
        ops._GEMM_EIGHT_LANES_MAX_ROWS = rows
    try:
        yield
    finally:
        ops._GEMM_EIGHT_LANES_MAX_ROWS = saved


def _pair(stages: dict[str, Stage], first: str, second: str, suffix: str) -> tuple[Stage, Stage]:
    return stages.setdefault(first + suffix, Stage()), stages.setdefault(second + suffix, Stage())


class CubeProduct:
    """An n-cube float32 BLAS product on ``threads`` threads, timed on demand."""

    def __init__(self, threads: int, n: int = 3072) -> None:
        rng = np.random.default_rng(0)
        self.n, self.threads = n, threads
        self.a = rng.standard_normal((n, n), dtype=np.float32)
        self.b = rng.standard_normal((n, n), dtype=np.float32)
        self.out = np.empty((n, n), np.float32)
        with thread_limit(threads):
            np.matmul(self.a, self.b, out=self.out)  # warm-up: threads started, pages touched

    def rate(self) -> float:
        """GFLOP/s of one product."""
        with thread_limit(self.threads):
            start = time.perf_counter()
            np.matmul(self.a, self.b, out=self.out)
            return 2.0 * self.n**3 / (time.perf_counter() - start) / 1e9


def report(label: str, name: str, stage: Stage, peak: float, breakdown: bool, target: float | None) -> None:
    busy = statistics.median(stage.busy)
    wall = statistics.median(stage.wall)
    rest = statistics.median(w - b for w, b in zip(stage.wall, stage.busy, strict=True))
    at_peak = stage.flop / peak / 1e6
    bound = at_peak + rest * 1e3
    print(f"{label:>5} {name:<11} {stage.flop / 1e9:6.1f} GFLOP   products {busy * 1e3:7.1f} ms "
          f"({stage.flop / busy / 1e9:4.0f} GFLOP/s), rest {rest * 1e3:6.1f} ms   at the peak: "
          f"products >= {at_peak:6.0f} ms, with the rest >= {bound:6.0f} ms   "
          f"stage {wall * 1e3:7.1f} ms = {wall * 1e3 / bound:.2f}x the bound")
    if stage.peaks:  # each run against the bound at the peak measured in its own round
        ratios = [w / (stage.flop / p / 1e9 + w - b)
                  for w, b, p in zip(stage.wall, stage.busy, stage.peaks, strict=True)]
        print(f"{'':>14} with the peak of each round (median {statistics.median(stage.peaks):.0f} GFLOP/s): "
              f"stage = {statistics.median(ratios):.2f}x the bound (median; {min(ratios):.2f}..{max(ratios):.2f})")
    if target:
        room = target / 1e3 - rest
        need = stage.flop / room / 1e9 if room > 0 else float("inf")
        verdict = "within the peak" if need <= peak else "above the peak: not reachable with this rest"
        print(f"{'':>14} target {target:7.1f} ms: products need {need:4.0f} GFLOP/s "
              f"({need / peak:.0%} of the peak), {verdict}")
    if not breakdown:
        return
    names = sorted({k for run in stage.ops for k in run})
    op_ms = {k: statistics.median(run.get(k, 0.0) for run in stage.ops) * 1e3 for k in names}
    glue = statistics.median(w - b - sum(run.values())
                             for w, b, run in zip(stage.wall, stage.busy, stage.ops, strict=True)) * 1e3
    parts = sorted(op_ms.items(), key=lambda kv: -kv[1]) + [("glue", glue)]
    print(f"{'':>14} rest: " + ", ".join(f"{k} {v:.1f}" for k, v in parts) + " ms")
    keys = sorted({k for run in stage.shapes for k in run}, key=lambda k: -stage.shapes[0].get(k, (0, 0))[0])
    for key in keys:
        flop = stage.shapes[0].get(key, (0.0, 0.0))[0]
        ms = statistics.median(run.get(key, (0.0, 0.0))[1] for run in stage.shapes) * 1e3
        op, m, n, k = key
        print(f"{'':>14} {op:<9} M {m:5d} N {n:5d} K {k:5d}  {flop / 1e9:6.1f} GFLOP  {ms:7.1f} ms "
              f"({flop / ms / 1e6 if ms > 0 else 0:4.0f} GFLOP/s, {flop / ms / 1e6 / peak if ms > 0 else 0:4.0%} "
              f"of the peak), over the peak {ms - flop / peak / 1e6:6.1f} ms")


def asr_stages(checkpoint: Path, threads: int, repeats: int, compare_rows: int | None,
               cube: CubeProduct | None) -> Iterator[tuple[str, dict[str, Stage]]]:
    from onespeech.qwen3 import Precision, Qwen3Options, Qwen3Recognizer
    from onespeech_tools.data import shared_data_or_skip

    bench_asr._prepare_checkpoint(checkpoint)
    data = shared_data_or_skip("flops")
    rec = Qwen3Recognizer.load(checkpoint, Qwen3Options(threads=threads, precision=Precision.FLOAT32))
    try:
        with thread_limit(threads):
            for label, (name, seconds) in bench_asr.CLIPS.items():
                pcm = load_audio(data / "audio" / name)[: int(seconds * bench_asr.SR)]
                pcm = np.resize(pcm, int(seconds * bench_asr.SR)).astype(np.float32)
                mel = log_mel_spectrogram(pcm)
                rec.recognize(pcm, bench_asr.LANGUAGE, 1, mel=mel)  # warm-up: weights paged in
                stages: dict[str, Stage] = {}
                with OpTimer() as timer:
                    for _ in range(repeats):
                        for suffix, rows in _routings(compare_rows):
                            with _gemm_rows(rows):
                                _encoder_then_whole(
                                    timer, lambda mel=mel: rec.encoder.forward(mel),
                                    lambda pcm=pcm, mel=mel: rec.recognize(pcm, bench_asr.LANGUAGE, 1, mel=mel),
                                    _pair(stages, "encoder", "prefill", suffix), cube,
                                )
                yield label, stages
    finally:
        rec.close()


def aligner_stages(
    checkpoint: Path, threads: int, repeats: int, seconds: int, compare_rows: int | None, cube: CubeProduct | None
) -> Iterator[tuple[str, dict[str, Stage]]]:
    import bench_align

    from onespeech.align import Qwen3AlignerOptions, Qwen3ForcedAligner
    from onespeech.features.mel import log_mel
    from onespeech.features.pcm import ALIGNMENT_MAX_SECONDS
    from onespeech.qwen3 import spoken_units, written_units

    bench_align.ensure_checkpoint(checkpoint)
    with tempfile.TemporaryDirectory(prefix="flops_") as tmp:
        pcm_path, text_path, _ = bench_align.make_input(seconds, Path(tmp))
        pcm, text = np.load(pcm_path), text_path.read_text(encoding="utf-8")
    units = list(spoken_units(written_units(text, "en")))
    aligner = Qwen3ForcedAligner.load(checkpoint, Qwen3AlignerOptions(threads=threads))
    try:
        backbone = aligner._backbone  # the encoder alone, as the aligner's forward pass calls it
        assert backbone is not None
        with thread_limit(threads):
            aligner.timestamp_logits(pcm, units)  # warm-up: weights paged in
            stages: dict[str, Stage] = {}
            with OpTimer() as timer:
                for _ in range(repeats):
                    for suffix, rows in _routings(compare_rows):
                        with _gemm_rows(rows):
                            _encoder_then_whole(
                                timer, lambda: backbone.encode_audio(log_mel(pcm, max_seconds=ALIGNMENT_MAX_SECONDS)),
                                lambda: aligner.timestamp_logits(pcm, units),
                                _pair(stages, "encoder", "forward", suffix), cube,
                            )
        yield f"{seconds} s", stages
    finally:
        aligner.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=bench_asr.DEFAULT_CHECKPOINT)
    parser.add_argument("--aligner", type=Path, default=DEFAULT_ALIGNER, help="Qwen3-ForcedAligner checkpoint")
    parser.add_argument("--aligner-seconds", type=int, default=30, help="audio of the aligner's input")
    parser.add_argument("--models", nargs="+", choices=("asr", "aligner"), default=["asr"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each stage (medians are printed)")
    parser.add_argument("--peak-gflops", type=float,
                        help="float32 rate of all threads together (GFLOP/s); default: measured (module doc)")
    parser.add_argument("--breakdown", action="store_true",
                        help="print each stage's other operators and product shapes")
    parser.add_argument("--compare-gemm-rows", type=int, metavar="ROWS",
                        help="also run every stage with float32 products of up to ROWS rows routed to our GEMM "
                             "on AVX2 builds (0: the routing before that rule), alternating in each round")
    parser.add_argument("--target-ms", type=float, nargs=4, metavar=("ENC10", "PRE10", "ENC30", "PRE30"),
                        help="ASR stage times to compare with: encoder and prefill at 10 s, then at 30 s")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    if not 1 <= args.aligner_seconds <= 300:
        parser.error(f"--aligner-seconds must be 1..300, got {args.aligner_seconds}")
    sys.path.insert(0, str(HERE.parent / "tools"))
    peak = args.peak_gflops
    source = "given"
    cube = None
    if peak is None:
        cube = CubeProduct(args.threads)
        peak, source = max(cube.rate() for _ in range(args.repeats + 2)), "best 3072-cube BLAS product here"
    variant = ops._kernels.__name__.rsplit("_", 1)[-1] if ops._kernels is not None else "none (numpy)"
    print(f"fp32 | kernels {variant} | threads {args.threads} | products: 2·M·N·K of linear, linear_many, "
          f"conv3x3s2 (as im2col) | peak {peak:.0f} GFLOP/s ({source}) | medians of {args.repeats}")
    targets = iter(args.target_ms or [])
    if "asr" in args.models:
        print(args.checkpoint.name)
        for label, stages in asr_stages(args.checkpoint, args.threads, args.repeats, args.compare_gemm_rows, cube):
            for name, stage in stages.items():
                report(label, name, stage, peak, args.breakdown, None if "@" in name else next(targets, None))
    if "aligner" in args.models:
        print(args.aligner.name)
        for label, stages in aligner_stages(args.aligner, args.threads, args.repeats, args.aligner_seconds,
                                                 args.compare_gemm_rows, cube):
            for name, stage in stages.items():
                report(label, name, stage, peak, args.breakdown, None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
