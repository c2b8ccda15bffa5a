from __future__ import annotations

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


def test_default_reads_omp_num_threads(monkeypatch) -> None:
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
