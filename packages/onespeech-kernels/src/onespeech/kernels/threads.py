"""One thread count for the whole runtime: OpenMP kernels and the BLAS pool.

The compiled kernels read `get_threads()` for their `prange` regions. The BLAS
pool (numpy's OpenBLAS/MKL) is found through threadpoolctl, an accepted
dependency because it is the only portable way to reach the BLAS library that
numpy happens to load, and limited through it too, except a process-wide
OpenBLAS pool, which is set directly (below). Kernels never call BLAS inside an
OpenMP region, so BLAS is never oversubscribed by our own threads.

The two pools still take turns on the same cores. numpy's OpenBLAS keeps its
workers busy-waiting for ~2^28 cycles after every threaded call unless
``OPENBLAS_THREAD_TIMEOUT`` was set when it loaded; meanwhile an OpenMP worker
of ours waits for a core, and each of our parallel regions after a BLAS call
stalls for a scheduler slice (~2 ms here). ``import onespeech.kernels`` sets the
variable, which only helps if numpy has not loaded OpenBLAS yet. When it has
(numpy imported first: the usual case), the first `set_threads` makes OpenBLAS
re-read its environment (``openblas_read_env``) and restarts its pool
(``blas_thread_shutdown_``; the next call starts it again) so its workers sleep
at once. Measured on 2 cores with numpy imported first: 10 s encoder 1.3-1.8 s
-> 0.8-1.0 s. Results do not change: the pool's size and split are the same.
This happens once, on the first call, which should not overlap a numpy product
running in another thread (OpenBLAS's own fork handler makes the same call).

A count applies whichever thread sets it. threadpoolctl (from 3.8) lets only
the first thread that limits a pthreads OpenBLAS pool change it and silently
ignores every other thread, so a ``threads`` option applied in a worker thread
kept the count the main thread last set (with ``OMP_NUM_THREADS`` unset, an
aligner with ``threads=1`` ran its products on 2 BLAS threads in a worker and
on 1 in the main thread; its logits differed by up to 8.5e-6). That pool is
process-wide anyway, so `set_threads` calls OpenBLAS's own setter for it; other
BLAS libraries go through threadpoolctl, whose per-thread limits (OpenMP
builds) are then set in the calling thread, once per `thread_limit` block. The
compiled kernels get the count as an argument, never from OpenMP's per-thread
state. `thread_limit` blocks open in several threads at once with one count
keep that count until the last one closes; blocks with different counts at
the same time share the one BLAS pool, whose sums depend on its size, so
instances used concurrently should use one ``threads`` value.

The rule for every thread count (a ``threads`` option, ``set_threads``,
``OMP_NUM_THREADS``): an int >= 1, clamped to the CPUs this process may run on
(`available_cpus`). More threads than CPUs only adds contention, and an absurd
count (1000) made libgomp start ~1000 OS threads and exit the whole process
when the OS refused one. The count in effect is what `set_threads` returns and
`get_threads` reads.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from threadpoolctl import ThreadpoolController

__all__ = ["available_cpus", "check_threads", "default_threads", "get_threads", "set_threads", "thread_limit"]

_setters: list[Callable[[int], object]] | None = None
# the thread_limit blocks open now in any thread, oldest first (a one-item list of
# its count each), and the count in effect before the first of them
_open: list[list[int]] = []
_base = 1
_lock = threading.RLock()
_threads: int | None = None
OPENBLAS_SPIN_TIMEOUT = "4"  # OPENBLAS_THREAD_TIMEOUT: 2^4 cycles of busy-waiting, then sleep


def available_cpus() -> int:
    """The CPUs this process may run on (``os.sched_getaffinity``, else ``os.cpu_count()``).

    Every thread count is clamped to this number (module doc).
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def default_threads() -> int:
    """The thread count used when none is given.

    ``OMP_NUM_THREADS`` if set to a positive integer, else the CPUs this process
    may run on; at most `available_cpus()` either way.
    """
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return min(int(env), available_cpus())
    return available_cpus()


def check_threads(n: object) -> int:
    """Return ``n`` if it is a valid thread count (an int >= 1), else raise.

    Every ``threads`` option is checked here (None, the default, is handled by the
    caller). A count above `available_cpus()` is valid; `set_threads` clamps it.

    Raises
    ------
    TypeError
        Not an int (bool included).
    ValueError
        Less than 1.
    """
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"threads must be an int >= 1 or None, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"threads={n} is invalid; use an int >= 1 (or None for the default)")
    return n


def _blas_setters() -> list[Callable[[int], object]]:
    """A thread-count setter for each BLAS library loaded, each acting from any thread (module doc)."""
    global _setters
    if _setters is None:
        setters = []
        for lib in ThreadpoolController().lib_controllers:
            if lib.user_api != "blas":
                continue
            layer = getattr(lib, "threading_layer", None)
            _shorten_openblas_spin(lib.internal_api, layer, lib.filepath)
            setters.append(_openblas_pool_setter(lib.internal_api, layer, lib.filepath) or lib.set_num_threads)
        _setters = setters
    return _setters


def _openblas_pool_setter(internal_api: str, threading_layer: str | None,
                          filepath: str) -> Callable[[int], object] | None:
    """``openblas_set_num_threads`` of an OpenBLAS with one process-wide pool, else None.

    threadpoolctl ignores limits on such a pool from any thread but the first
    that set one (module doc). OpenMP builds keep per-thread limits, which
    threadpoolctl sets in the calling thread; they get None, as do libraries
    not exporting the setter under a known name (threadpoolctl's affixes).
    """
    if internal_api != "openblas" or threading_layer == "openmp":
        return None
    try:
        lib = ctypes.CDLL(filepath, mode=getattr(os, "RTLD_NOLOAD", 0))
    except OSError:  # not loaded after all
        return None
    for prefix, suffix in itertools.product(("", "scipy_"), ("", "64_", "_64")):
        setter = getattr(lib, f"{prefix}openblas_set_num_threads{suffix}", None)
        if setter is not None:
            setter.argtypes, setter.restype = [ctypes.c_int], None
            return setter
    return None


def _shorten_openblas_spin(internal_api: str, threading_layer: str | None, filepath: str) -> bool:
    """Restart an already loaded OpenBLAS pool with OPENBLAS_THREAD_TIMEOUT=4 (module doc).

    Only a pthreads OpenBLAS that read no timeout at load (its getter returns 0)
    and exports the three functions used; a timeout the user chose is kept.
    Returns whether the pool was restarted.
    """
    if internal_api != "openblas" or threading_layer != "pthreads":
        return False
    if os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", OPENBLAS_SPIN_TIMEOUT) != OPENBLAS_SPIN_TIMEOUT:
        return False
    try:
        lib = ctypes.CDLL(filepath, mode=getattr(os, "RTLD_NOLOAD", 0))
        read_env, shutdown, timeout = lib.openblas_read_env, lib.blas_thread_shutdown_, lib.openblas_thread_timeout
    except (OSError, AttributeError):  # not loaded after all, or another OpenBLAS build
        return False
    if timeout() != 0:
        return False
    read_env()
    if timeout() != int(OPENBLAS_SPIN_TIMEOUT):
        return False
    shutdown()
    return True


def set_threads(n: int | None) -> int:
    """Set the thread count of OpenMP kernels and of the BLAS pool, from any thread.

    Parameters
    ----------
    n : int or None
        Threads, >= 1; None means `default_threads()`. A count above
        `available_cpus()` is clamped to it.

    Returns
    -------
    int
        The thread count now in effect.
    """
    global _threads
    value = default_threads() if n is None else min(check_threads(n), available_cpus())
    with _lock:
        for setter in _blas_setters():
            setter(value)
        _threads = value
    return value


def get_threads() -> int:
    """The thread count in effect (the default until `set_threads` is called)."""
    if _threads is None:
        return set_threads(None)
    return _threads


@contextmanager
def thread_limit(n: int | None) -> Iterator[int]:
    """Use ``n`` threads inside the ``with`` block, then restore the count in effect before it.

    Blocks may be open in several threads at once (one instance shared by
    threads, or several instances): the count one block leaves is the count of
    the latest block still open in any thread, and the count from before the
    first block once none is. So blocks with one count never change each
    other's count; blocks with different counts at the same time share one
    BLAS pool (module doc).
    """
    global _base
    with _lock:
        if not _open:
            _base = get_threads()
        block = [set_threads(n)]  # this block's entry in _open, found by identity
        _open.append(block)
    try:
        yield block[0]
    finally:
        with _lock:
            del _open[next(i for i, b in enumerate(_open) if b is block)]
            set_threads(_open[-1][0] if _open else _base)
