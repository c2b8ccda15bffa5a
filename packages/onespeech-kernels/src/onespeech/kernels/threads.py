"""One thread count for the whole runtime: OpenMP kernels and the BLAS pool.

The compiled kernels read `get_threads()` for their `prange` regions; the BLAS
pool (numpy's OpenBLAS/MKL) is limited through threadpoolctl, an accepted
dependency because it is the only portable way to reach the BLAS library that
numpy happens to load. Kernels never call BLAS inside an OpenMP region, so BLAS
is never oversubscribed by our own threads.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from threadpoolctl import ThreadpoolController

__all__ = ["default_threads", "get_threads", "set_threads", "thread_limit"]

_controller: ThreadpoolController | None = None
_threads: int | None = None


def default_threads() -> int:
    """The thread count used when none is given.

    ``OMP_NUM_THREADS`` if set to a positive integer, else the CPUs this process
    may run on (``os.sched_getaffinity``), else ``os.cpu_count()``.
    """
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _check(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"threads must be an int >= 1 or None, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"threads={n} is invalid; use an int >= 1 (or None for the default)")
    return n


def _blas() -> ThreadpoolController:
    global _controller
    if _controller is None:
        _controller = ThreadpoolController()
    return _controller


def set_threads(n: int | None) -> int:
    """Set the thread count of OpenMP kernels and of the BLAS pool.

    Parameters
    ----------
    n : int or None
        Threads, >= 1; None means `default_threads()`.

    Returns
    -------
    int
        The thread count now in effect.
    """
    global _threads
    value = default_threads() if n is None else _check(n)
    _blas().limit(limits=value, user_api="blas")
    _threads = value
    return value


def get_threads() -> int:
    """The thread count in effect (the default until `set_threads` is called)."""
    if _threads is None:
        return set_threads(None)
    return _threads


@contextmanager
def thread_limit(n: int | None) -> Iterator[int]:
    """Use ``n`` threads inside the ``with`` block, then restore the previous count."""
    previous = get_threads()
    try:
        yield set_threads(n)
    finally:
        set_threads(previous)
