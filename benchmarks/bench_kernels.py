"""GEMV at Qwen3-ASR-0.6B decoder shapes and float32 GEMM at encoder / prefill shapes: numpy vs our kernels.

Decode multiplies one activation row by every weight matrix once per token, so
it is bound by memory bandwidth: the weights never fit in cache. Each shape is
therefore timed over enough distinct copies of the matrix (>= 512 MiB of
float32) that every call reads from DRAM, as in a real decode step. Per round,
numpy, ours-f32 and ours-bf16 alternate; tables print medians (min..max) per
call, GB/s of weight bytes read, the ratio to numpy's median and the fraction
of the read bandwidth measured in the same run. "ours int8" is `ops.linear_int8`
(int8 weights with per-row scales, the activation row quantized in the call);
the per-token line also gives each one's time relative to ours f32 in that run.

GEMM (y = x @ w.T, float32, warm weights): per round numpy (BLAS, the anchor)
and our unpacked kernel (`gemm_f32`, with ops.linear's task plan) alternate;
the table prints GFLOP/s of the medians, the ratio ours / numpy, the fraction
of the machine's FMA peak (--peak-gflops per core) and the path ops.linear
takes at that shape; then BF16 precision's product at that shape (`ops.linear`
of bf16-rounded activations by bf16 weights: AMX tiles where the OS grants
them, else VDPBF16PS where the CPU has it, else the float32 path on exactly
widened weights) and its ratio to numpy; then the same product with its weights
read from memory ("cold": each call takes the next of enough copies, >= 128 MiB,
to leave the caches), as the encoder and the prefill read each layer's weights once
per call.

INT8 (--only int8): `ops.linear_int8` against `ops.linear` with float32 and bf16
weights at prefill / encoder shapes (warm weights, alternating per round), medians
and the ratios to float32 in the same run.

    python benchmarks/bench_kernels.py [--rounds 15] [--threads 1 2] [--only gemv|gemm|int8]
"""

from __future__ import annotations

# onespeech before numpy: it shortens OpenBLAS's idle spinning, read at numpy's import
import onespeech.kernels  # isort: skip

import argparse
import itertools
import statistics
import time
from collections.abc import Callable

import numpy as np

from onespeech.kernels import ops
from onespeech.kernels.threads import get_threads, set_threads

# (name, N, K, uses per decoded token) for hidden 1024, 16 q heads / 8 kv heads of
# 128, intermediate 3072, 28 layers, vocabulary 151936 (configs/Qwen3-ASR-0.6B)
LAYERS = 28
SHAPES = [
    ("q_proj", 2048, 1024, LAYERS),
    ("k_proj,v_proj", 1024, 1024, 2 * LAYERS),
    ("o_proj", 1024, 2048, LAYERS),
    ("gate,up", 3072, 1024, 2 * LAYERS),
    ("down", 1024, 3072, LAYERS),
    ("lm_head", 151936, 1024, 1),
]
COLD_BYTES = 512 << 20  # float32 bytes streamed per timed pass

# (name, M, K, N) of y = x @ w.T: encoder (hidden 896, FFN 3584, 130 / 390
# frames per window), conv im2col (K = 4320, N = 480), the encoder projection
# to the decoder, and prefill of the 0.6B decoder (hidden 1024, FFN 3072)
# bytes of bf16 weight copies the GEMM's "cold" product cycles through: several times any L3 here
GEMM_COLD_BYTES = 128 << 20
GEMM_SHAPES = [
    ("enc qkv/o", 130, 896, 896),
    ("enc fc1", 130, 896, 3584),
    ("enc fc2", 130, 3584, 896),
    ("enc fc1 x3", 390, 896, 3584),
    ("enc fc2 x3", 390, 3584, 896),
    ("conv im2col", 1600, 4320, 480),
    ("conv im2col", 800, 4320, 480),
    ("enc proj", 208, 7680, 896),
    ("dec q", 150, 1024, 2048),
    ("dec k,v,o", 150, 1024, 1024),
    ("dec gate,up", 150, 1024, 3072),
    ("dec down", 150, 3072, 1024),
    ("dec gate,up", 420, 1024, 3072),
    ("dec down", 420, 3072, 1024),
]
GEMM_SECONDS = 0.05  # calls are repeated to about this long per timing


def bandwidth_gbs(threads: int, rounds: int) -> list[float]:
    """Read bandwidth: sum a 512 MiB float32 array with the compiled kernel."""
    kern = ops._kernels
    a = np.full(COLD_BYTES // 4, 1.0, np.float32)
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        kern.stream_sum(a, threads)
        out.append(a.nbytes / (time.perf_counter() - t0) / 1e9)
    return out


def time_pass(fn: Callable[[int], object], copies: int) -> float:
    """Seconds per call, averaged over one pass through every copy."""
    t0 = time.perf_counter()
    for i in range(copies):
        fn(i)
    return (time.perf_counter() - t0) / copies


def bench_shape(n: int, k: int, rounds: int) -> dict[str, list[float]]:
    copies = max(1, -(-COLD_BYTES // (n * k * 4)))
    w32 = [np.full((n, k), 0.01, np.float32) for _ in range(copies)]
    w16 = [np.full((n, k), 0x3C23, np.uint16) for _ in range(copies)]  # bf16 0.00995
    w8 = [np.full((n, k), 127, np.int8) for _ in range(copies)]
    s8 = np.full(n, 0.01 / 127, np.float32)
    x = np.full((1, k), 0.5, np.float32)
    impls = {
        "numpy f32": lambda i: x @ w32[i].T,
        "ours f32": lambda i: ops.linear(x, w32[i]),
        "ours bf16": lambda i: ops.linear(x, w16[i]),
        "ours int8": lambda i: ops.linear_int8(x, w8[i], s8),
    }
    for fn in impls.values():  # warm-up: first-touch, thread pools
        time_pass(fn, min(copies, 2))
    times: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(rounds):
        for name, fn in impls.items():
            times[name].append(time_pass(fn, copies))
    return times


def fmt(ts: list[float]) -> str:
    return f"{statistics.median(ts) * 1e3:8.3f} ({min(ts) * 1e3:.3f}..{max(ts) * 1e3:.3f})"


def run(threads: int, rounds: int) -> None:
    set_threads(threads)
    bw = bandwidth_gbs(threads, rounds)
    bw_med = statistics.median(bw)
    print(f"\nkernels GEMV 1 x K @ (N x K).T | {onespeech.kernels.describe()}")
    print(f"read bandwidth (stream_sum 512 MiB): {bw_med:.1f} GB/s median ({min(bw):.1f}..{max(bw):.1f})")
    head = f"{'shape':<14}{'N x K':>14}  {'impl':<10}{'ms/call median (min..max)':>34}{'GB/s':>7}{'ratio':>7}{'% bw':>6}"
    print(head)
    print("-" * len(head))
    per_token = {"numpy f32": 0.0, "ours f32": 0.0, "ours bf16": 0.0, "ours int8": 0.0}
    for name, n, k, uses in SHAPES:
        times = bench_shape(n, k, rounds)
        anchor = statistics.median(times["numpy f32"])
        for impl, ts in times.items():
            med = statistics.median(ts)
            nbytes = n * k * (2 if "bf16" in impl else 1 if "int8" in impl else 4)
            gbs = nbytes / med / 1e9
            print(f"{name:<14}{f'{n} x {k}':>14}  {impl:<10}{fmt(ts):>34}{gbs:7.1f}{med / anchor:7.2f}"
                  f"{100 * gbs / bw_med:5.0f}%")
            per_token[impl] += med * uses
    anchor = per_token["numpy f32"]
    print("decode GEMVs per token (sum of medians x uses): "
          + " | ".join(f"{impl} {t * 1e3:.1f} ms ({t / anchor:.2f}x)" for impl, t in per_token.items()))
    f32 = per_token["ours f32"]
    print("relative to ours f32: " + " | ".join(f"{impl} {t / f32:.2f}x" for impl, t in per_token.items()))


# (name, M, K, N): prefill and encoder products for the int8 section
INT8_GEMM_SHAPES = [
    ("enc fc1", 130, 896, 3584),
    ("enc fc2", 130, 3584, 896),
    ("dec q", 150, 1024, 2048),
    ("dec gate,up", 150, 1024, 3072),
    ("dec down", 150, 3072, 1024),
    ("dec gate,up", 420, 1024, 3072),
]


def bench_int8_shape(m: int, k: int, n: int, rounds: int) -> dict[str, list[float]]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k), np.float32)
    w = rng.standard_normal((n, k), np.float32) * 0.05
    wb = ops.f32_to_bf16(w)
    w8, s8 = ops.quantize_int8(w)
    impls = {"f32": lambda: ops.linear(x, w), "bf16": lambda: ops.linear(x, wb),
             "int8": lambda: ops.linear_int8(x, w8, s8)}
    t0 = time.perf_counter()
    for fn in impls.values():  # warm-up: first touch, thread pools
        fn()
    reps = max(1, int(GEMM_SECONDS / max(1e-6, (time.perf_counter() - t0) / 3)))
    times: dict[str, list[float]] = {impl: [] for impl in impls}
    for _ in range(rounds):
        for impl, fn in impls.items():
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            times[impl].append((time.perf_counter() - t0) / reps)
    return times


def run_int8(threads: int, rounds: int) -> None:
    set_threads(threads)
    print(f"\nkernels INT8 GEMM M x K @ (N x K).T vs float32 / bf16 weights | {onespeech.kernels.describe()}")
    head = (f"{'shape':<13}{'M x K x N':>17}  {'f32 ms (min..max)':>24}  {'bf16 ms (min..max)':>24}"
            f"  {'int8 ms (min..max)':>24}{'bf16/f32':>9}{'int8/f32':>9}")
    print(head)
    print("-" * len(head))
    for name, m, k, n in INT8_GEMM_SHAPES:
        times = bench_int8_shape(m, k, n, rounds)
        med = {impl: statistics.median(ts) for impl, ts in times.items()}
        print(f"{name:<13}{f'{m} x {k} x {n}':>17}  {fmt(times['f32']):>24}  {fmt(times['bf16']):>24}"
              f"  {fmt(times['int8']):>24}{med['bf16'] / med['f32']:9.2f}{med['int8'] / med['f32']:9.2f}")


def bench_gemm_shape(m: int, k: int, n: int, rounds: int) -> dict[str, list[float]]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k), np.float32)
    w = rng.standard_normal((n, k), np.float32) * 0.05
    y = np.empty((m, n), np.float32)
    nt = get_threads()
    # BF16 precision's operands: activations rounded to bf16, weights as bf16 bits
    xb, wb = ops.round_bf16(x), ops.f32_to_bf16(w)
    # the kernel itself, whichever path ops.linear takes at this shape; bf16: the
    # path ops.linear takes for many rows (AMX tiles or VDPBF16PS where they run)
    cold = itertools.cycle([wb.copy() for _ in range(-(-GEMM_COLD_BYTES // wb.nbytes))])
    impls = {"numpy": lambda: x @ w.T,
             "ours": lambda: ops._kernels.gemm_f32(x, w, None, y, *ops._gemm_plan(m, n, k, nt), nt),
             "ours bf16": lambda: ops.linear(xb, wb),
             "ours bf16 cold": lambda: ops.linear(xb, next(cold))}
    t0 = time.perf_counter()
    for fn in impls.values():  # warm-up: first touch, thread pools
        fn()
    reps = max(1, int(GEMM_SECONDS / max(1e-6, (time.perf_counter() - t0) / 2)))
    times: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(rounds):
        for name, fn in impls.items():
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            times[name].append((time.perf_counter() - t0) / reps)
    return times


def run_gemm(threads: int, rounds: int, peak_gflops: float) -> None:
    impls_order = ("numpy", "ours", "ours bf16", "ours bf16 cold")
    set_threads(threads)
    print(f"\nkernels GEMM M x K @ (N x K).T, float32 | {onespeech.kernels.describe()}")
    head = (f"{'shape':<13}{'M x K x N':>17}  {'numpy GFLOP/s (min..max)':>26}  {'ours GFLOP/s (min..max)':>26}"
            f"{'ratio':>7}{'% peak':>7}  {'path':<7}{'ours bf16 GFLOP/s (min..max)':>30}{'ratio':>7}"
            f"{'bf16 cold GFLOP/s (min..max)':>30}")
    print(head)
    print("-" * len(head))
    for name, m, k, n in GEMM_SHAPES:
        times = bench_gemm_shape(m, k, n, rounds)
        flop = 2.0 * m * k * n
        rates = {impl: [flop / t / 1e9 for t in ts] for impl, ts in times.items()}
        med = {impl: statistics.median(r) for impl, r in rates.items()}
        path = "kernel" if ops._gemm_wins(m, n, k) else "numpy"
        cells = [f"{med[i]:6.1f} ({min(rates[i]):.1f}..{max(rates[i]):.1f})" for i in impls_order]
        print(f"{name:<13}{f'{m} x {k} x {n}':>17}  {cells[0]:>26}  {cells[1]:>26}"
              f"{med['ours'] / med['numpy']:7.2f}{100 * med['ours'] / (peak_gflops * threads):6.0f}%  {path:<7}"
              f"{cells[2]:>30}{med['ours bf16'] / med['numpy']:7.2f}{cells[3]:>30}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--only", choices=["gemv", "gemm", "int8"], help="run one section (default: all)")
    # 2 FMA pipes x 8 float32 lanes x 2 flop at ~2.9 GHz: the 2-core EPYC's ~92 per core
    parser.add_argument("--peak-gflops", type=float, default=92.0, help="FMA peak per core (GFLOP/s)")
    args = parser.parse_args()
    if ops._kernels is None:
        print("compiled kernels are not built; install onespeech-kernels with its build hook")
        return 1
    for t in args.threads:
        if args.only in (None, "gemv"):
            run(t, args.rounds)
        if args.only in (None, "gemm"):
            run_gemm(t, args.rounds, args.peak_gflops)
        if args.only in (None, "int8"):
            run_int8(t, args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
