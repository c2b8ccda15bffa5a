from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
from threadpoolctl import threadpool_info

from onespeech.kernels import threads


def _blas_threads() -> set[int]:
    return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}


def test_set_threads_drives_blas_pool() -> None:
    before = threads.get_threads()
    try:
        assert threads.set_threads(1) == 1
        assert threads.get_threads() == 1
        assert _blas_threads() in (set(), {1})
        threads.set_threads(2)
        assert _blas_threads() in (set(), {2})
    finally:
        threads.set_threads(before)


def test_thread_limit_restores() -> None:
    before = threads.get_threads()
    with threads.thread_limit(1) as n:
        assert n == 1 and threads.get_threads() == 1
    assert threads.get_threads() == before


def _in_thread(body) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            body()
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    if errors:
        raise errors[0]


def _needs_two_cpus() -> None:
    if threads.available_cpus() < 2:
        pytest.skip("needs 2 CPUs to tell one BLAS thread from two")
    if not _blas_threads():
        pytest.skip("numpy's BLAS is not one threadpoolctl can see")


def test_a_count_set_in_another_thread_reaches_the_blas_pool() -> None:
    # threadpoolctl (3.8) lets only the first thread that limits a pthreads OpenBLAS
    # pool change it; a worker's count was silently ignored
    _needs_two_cpus()
    before = threads.get_threads()
    seen: dict[int, set[int]] = {}

    def worker() -> None:
        for n in (2, 1):
            threads.set_threads(n)
            seen[n] = _blas_threads()

    try:
        threads.set_threads(1)  # the main thread limits first
        _in_thread(worker)
        seen[0] = _blas_threads()  # one pool: the worker's last count holds here too
    finally:
        threads.set_threads(before)
    assert seen == {2: {2}, 1: {1}, 0: {1}}


def test_blocks_with_one_count_in_two_threads_keep_it_until_the_last_closes() -> None:
    _needs_two_cpus()
    before = threads.get_threads()
    opened, close_first = threading.Event(), threading.Event()
    seen: list[tuple[int, set[int]]] = []

    def first() -> None:
        with threads.thread_limit(1):
            opened.set()
            assert close_first.wait(timeout=30)

    try:
        threads.set_threads(2)
        worker = threading.Thread(target=first)
        worker.start()
        assert opened.wait(timeout=30)
        with threads.thread_limit(1):
            close_first.set()
            worker.join(timeout=30)
            seen.append((threads.get_threads(), _blas_threads()))  # the worker's block closed
        seen.append((threads.get_threads(), _blas_threads()))  # every block closed
    finally:
        close_first.set()
        threads.set_threads(before)
    assert seen == [(1, {1}), (2, {2})]


def test_a_closing_block_leaves_the_latest_block_still_open() -> None:
    # blocks with counts 1, 2, 1 opened in three threads, closed out of order
    _needs_two_cpus()
    before = threads.get_threads()
    opened = {k: threading.Event() for k in "abc"}
    close = {k: threading.Event() for k in "abc"}
    seen: list[int] = []

    def block(k: str, n: int) -> None:
        with threads.thread_limit(n):
            opened[k].set()
            assert close[k].wait(timeout=30)

    workers = {}
    try:
        threads.set_threads(2)
        for k, n in (("a", 1), ("b", 2), ("c", 1)):
            workers[k] = threading.Thread(target=block, args=(k, n))
            workers[k].start()
            assert opened[k].wait(timeout=30)
        for k in "cba":
            close[k].set()
            workers[k].join(timeout=30)
            seen.append(threads.get_threads())
    finally:
        for event in close.values():
            event.set()
        threads.set_threads(before)
    assert seen == [2, 1, 2]  # b's count, then a's, then the count before them


def test_default_reads_omp_num_threads(monkeypatch) -> None:
    monkeypatch.setattr(threads, "available_cpus", lambda: 4)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.default_threads() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "junk")
    assert threads.default_threads() >= 1


@pytest.mark.parametrize("bad", [0, -2])
def test_invalid_thread_counts(bad: int) -> None:
    with pytest.raises(ValueError, match=f"threads={bad}"):
        threads.set_threads(bad)
    with pytest.raises(TypeError):
        threads.set_threads(1.5)  # type: ignore[arg-type]


_OPENBLAS_FIRST = """
import ctypes, json, os, sys
import numpy as np  # loads OpenBLAS before onespeech can set its environment
from threadpoolctl import threadpool_info

libs = [i for i in threadpool_info() if i["internal_api"] == "openblas" and i.get("threading_layer") == "pthreads"]
if not libs:
    print(json.dumps({"skip": "numpy's BLAS is not a pthreads OpenBLAS"}))
    sys.exit(0)
lib = ctypes.CDLL(libs[0]["filepath"], mode=os.RTLD_NOLOAD)
if not all(hasattr(lib, f) for f in ("openblas_read_env", "blas_thread_shutdown_", "openblas_thread_timeout")):
    print(json.dumps({"skip": "this OpenBLAS does not export openblas_read_env / blas_thread_shutdown_"}))
    sys.exit(0)
rng = np.random.default_rng(0)
x, w = rng.standard_normal((150, 512), dtype=np.float32), rng.standard_normal((700, 512), dtype=np.float32)
before_timeout = lib.openblas_thread_timeout()
before = x @ w.T
tasks_before = set(os.listdir("/proc/self/task"))  # the main thread and OpenBLAS's workers
from onespeech.kernels import threads
threads.set_threads(2)
after = x @ w.T
tasks_after = set(os.listdir("/proc/self/task"))
print(json.dumps({"before": before_timeout, "after": lib.openblas_thread_timeout(),
                  "same": bool(np.array_equal(before, after)),
                  "workers_gone": len(tasks_before - tasks_after),
                  "blas_threads": [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]}))
"""


def _run_openblas_first(env_timeout: str | None) -> dict:
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("needs Linux /proc to see OpenBLAS's worker threads")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_THREAD_TIMEOUT", "OMP_NUM_THREADS")}
    if env_timeout is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = env_timeout
    out = subprocess.run([sys.executable, "-c", _OPENBLAS_FIRST], env=env, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(result["skip"])
    return result


def test_openblas_loaded_first_is_restarted_to_sleep_at_once() -> None:
    result = _run_openblas_first(None)
    assert result["before"] == 0  # numpy's OpenBLAS read no timeout: the 2^28-cycle default
    assert result["after"] == 4
    assert result["workers_gone"] >= 1  # the spinning workers ended; new ones serve the next call
    assert result["same"]  # a restarted pool computes the same products
    assert result["blas_threads"] == [2]


def test_a_timeout_the_user_chose_is_kept() -> None:
    result = _run_openblas_first("10")
    assert result["before"] == result["after"] == 10
    assert result["workers_gone"] == 0


def test_other_blas_libraries_are_left_alone() -> None:
    assert not threads._shorten_openblas_spin("mkl", "intel", "/nonexistent/libmkl_rt.so")
    assert not threads._shorten_openblas_spin("openblas", "openmp", "/nonexistent/libopenblas.so")
