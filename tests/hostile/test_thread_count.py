"""Absurd thread counts: clamped to the CPUs this process may run on (onespeech.kernels.threads).

``threads=1000`` used to start ~1000 OpenMP threads; when the OS refused one,
libgomp exited the whole process. Every case runs in its own capped process so a
regression kills a child, not the test run.
"""

from __future__ import annotations

# the kernels' OpenMP regions run with the count in effect; the task list counts the OS threads
_RUN_KERNELS = """
import os
import numpy as np
from onespeech.kernels import ops, threads
x = np.random.default_rng(0).standard_normal((64, 4096)).astype(np.float32)
w = np.ones(4096, np.float32)
ops.rms_norm(x, w, 1e-6)
ops.silu(np.ones(1 << 20, np.float32))
result = {"threads": threads.get_threads(), "cpus": threads.available_cpus(),
          "os_threads": len(os.listdir("/proc/self/task"))}
"""


def test_set_threads_above_the_cpus_is_clamped(run_case) -> None:
    got = run_case("from onespeech.kernels import threads\nthreads.set_threads(1000)\n" + _RUN_KERNELS,
                   memory_mb=768, timeout_s=60).expect_ok()
    assert got["threads"] == got["cpus"]
    # main thread + OpenMP workers + OpenBLAS's pool, each at most one per CPU
    assert got["os_threads"] <= 1 + 2 * got["cpus"]


def test_omp_num_threads_above_the_cpus_is_clamped(run_case) -> None:
    got = run_case(_RUN_KERNELS, env={"OMP_NUM_THREADS": "1000"}, memory_mb=768, timeout_s=60).expect_ok()
    assert got["threads"] == got["cpus"]
    assert got["os_threads"] <= 1 + 2 * got["cpus"]


def test_recognizer_with_a_thousand_threads_runs_on_the_cpus(run_case, tiny_asr_dir) -> None:
    got = run_case(
        """
        import os
        import numpy as np
        from onespeech.kernels import threads
        from onespeech.qwen3 import Qwen3Options, Qwen3Recognizer
        recognizer = Qwen3Recognizer.load(args["model"], Qwen3Options(threads=1000, max_new_tokens=4))
        audio = 0.1 * np.sin(np.arange(16000, dtype=np.float32) / 7)
        try:
            recognizer.transcribe(audio, language="en")
        except RuntimeError:
            pass  # random weights may run into max_new_tokens; the threads are what is measured
        result = {"cpus": threads.available_cpus(), "os_threads": len(os.listdir("/proc/self/task"))}
        """,
        args={"model": str(tiny_asr_dir)},
        timeout_s=120,
    ).expect_ok()
    assert got["os_threads"] <= 1 + 2 * got["cpus"]


def test_invalid_counts_are_still_refused(run_case) -> None:
    run_case("from onespeech.kernels import threads\nthreads.set_threads(0)").expect_error(
        "ValueError", match="threads=0")
