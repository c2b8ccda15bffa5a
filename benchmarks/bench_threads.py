"""Threads: does ``threads=N`` really change the cores the runtime uses?

``python benchmarks/bench_threads.py`` runs the decode-shaped GEMV (our OpenMP
kernel), a prefill-shaped GEMM (numpy's BLAS, limited through threadpoolctl) and
element-wise kernels (rms_norm, swiglu, gelu) at every thread count from 1 to the
CPUs available, and prints per op the wall time, the process CPU time and their
ratio: the cores actually busy. Medians of 5 runs.

Each series starts after a 0.5 s pause, because numpy's OpenBLAS keeps its worker
threads spinning for a while after a GEMM (their CPU time would be billed to the
next op). The last row runs the element-wise kernels right after a BLAS GEMM, each
time, to show what that spinning costs the OpenMP kernels that follow.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from source_tree import require_compiled_kernels, source_paths  # benchmarks/ is the script's directory

# Import onespeech before numpy, as an application does, so that onespeech.kernels
# can shorten OpenBLAS's idle spinning before numpy loads it (docs/kernels.md, "Threads").
sys.path[:0] = source_paths("kernels")
import onespeech.kernels  # noqa: E402,F401,I001  (sets OPENBLAS_THREAD_TIMEOUT unless set)
import numpy as np  # noqa: E402


def _measure(fn, repeats: int = 5) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(median wall seconds, median CPU seconds of this process)."""
    fn()  # warm-up: page in, start the thread pools
    walls, cpus = [], []
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus)


def main() -> int:
    require_compiled_kernels()
    from onespeech.kernels import ops
    from onespeech.kernels.threads import thread_limit

    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((3072, 1024), dtype=np.float32) for _ in range(8)]  # 96 MiB
    row = rng.standard_normal((1, 1024), dtype=np.float32)
    block = rng.standard_normal((256, 1024), dtype=np.float32)
    hidden = rng.standard_normal((512, 3072), dtype=np.float32)
    norm = np.ones(3072, np.float32)
    cases = {
        "GEMV 1x1024 . 8x[3072,1024] (kernel)": lambda: [ops.linear(row, w) for w in weights],
        "GEMM 256x1024 . [3072,1024] (BLAS)": lambda: [ops.linear(block, w) for w in weights[:2]],
        "rms_norm + swiglu + gelu [512,3072]": lambda: _elementwise(ops, hidden, norm),
    }
    after_gemm = {
        "the same, right after a BLAS GEMM": (lambda: ops.linear(block, weights[0]), lambda: _elementwise(ops, hidden, norm)),
    }
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    print(f"{cpus} CPUs available; cores used = process CPU time / wall time (medians of 5)")
    print(f"{'op':<42}{'threads':>8}{'wall ms':>10}{'cpu ms':>10}{'cores used':>12}")
    for name, fn in cases.items():
        for n in range(1, cpus + 1):
            with thread_limit(n):
                time.sleep(0.5)
                wall, cpu = _measure(fn)
            print(f"{name:<42}{n:>8}{wall * 1e3:>10.1f}{cpu * 1e3:>10.1f}{cpu / wall:>12.2f}")
    for name, (before, fn) in after_gemm.items():
        for n in range(1, cpus + 1):
            with thread_limit(n):
                walls = []
                for _ in range(5):
                    before()
                    start = time.perf_counter()
                    fn()
                    walls.append(time.perf_counter() - start)
            print(f"{name:<42}{n:>8}{statistics.median(walls) * 1e3:>10.1f}{'-':>10}{'-':>12}")
    return 0


def _elementwise(ops, hidden: np.ndarray, norm: np.ndarray) -> None:  # type: ignore[no-untyped-def]
    ops.rms_norm(hidden, norm, 1e-6)
    ops.swiglu(hidden, hidden)
    ops.gelu(hidden)


if __name__ == "__main__":
    raise SystemExit(main())
