"""Large outputs of `ops` come from a per-thread pool of buffers nothing else holds (ops._empty)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from onespeech.kernels import ops

BIG = (600, 1000)  # above the pool's one-MiB floor


@pytest.fixture(autouse=True)
def _fresh_pool():
    ops._scratch.__dict__.pop("pool", None)
    yield
    ops._scratch.__dict__.pop("pool", None)


def test_outputs_start_on_a_cache_line() -> None:
    for shape in [(3, 5), BIG, (7, 11, 13)]:
        y = ops._empty(shape)
        assert y.shape == shape and y.dtype == np.float32 and y.flags.c_contiguous
        assert y.ctypes.data % 64 == 0
    assert ops._empty((0, 4)).shape == (0, 4)  # (numpy gives empty arrays a pointer of its own)


def test_a_buffer_is_reused_only_when_nothing_holds_it() -> None:
    a = ops._empty(BIG)
    first = id(a.base)
    b = ops._empty(BIG)
    assert id(b.base) != first  # a is still held
    del a
    c = ops._empty(BIG)
    assert id(c.base) == first
    view = c[:10]
    del c
    assert id(ops._empty(BIG).base) != first  # a view still holds it
    del view
    assert id(ops._empty(BIG).base) == first
    assert id(ops._empty((1000, 600)).base) == first  # by size: any shape of as many values
    bigger = ops._empty((601, 1000))  # no free buffer holds it: a new one, the smaller free one dropped
    assert bigger.base.size == 601 * 1000 + 16
    assert sorted(held.size for held in ops._scratch.pool) == [600 * 1000 + 16, 601 * 1000 + 16]  # b's, bigger's
    del bigger
    assert ops._empty((500, 1000)).base.size == 601 * 1000 + 16  # a free larger buffer serves a smaller output
    small = ops._empty((10, 10))
    assert small.base is not None and small.base.size == 116  # small outputs are never pooled
    assert all(held.size >= ops._POOL_MIN_VALUES for held in ops._scratch.pool)


def test_outputs_of_many_sizes_do_not_fill_the_pool() -> None:
    # a file's chunks have many lengths: the pool keeps what is alive at once, not every size seen
    for rows in range(1000, 400, -7):
        ops._empty((rows, 1000))
    assert [held.size for held in ops._scratch.pool] == [1000 * 1000 + 16]
    for rows in range(400, 1100, 7):
        ops._empty((rows, 1000))
    assert len(ops._scratch.pool) == 1


def test_results_a_caller_keeps_are_never_overwritten() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((600, 256)).astype(np.float32)
    w = ops.f32_to_bf16(rng.standard_normal((1000, 256)).astype(np.float32))
    kept = ops.linear(x, w)
    want = kept.copy()
    for _ in range(3):
        ops.linear(x * 2, w)  # same shape: recycled buffers, never the kept one
        assert np.array_equal(kept, want)


def test_the_pool_is_bounded() -> None:
    held = [ops._empty(BIG) for _ in range(40)]
    pool = ops._scratch.pool
    assert len(pool) <= ops._POOL_BUFFERS
    assert sum(b.size for b in pool) <= ops._POOL_MAX_VALUES
    assert all(h.ctypes.data % 64 == 0 for h in held)
    huge = ops._empty((1 << 12, 1 << 13))  # 128 MiB: more than the whole pool may keep
    assert huge.size == 1 << 25 and sum(b.size for b in pool) <= ops._POOL_MAX_VALUES


def test_each_thread_has_its_own_pool() -> None:
    mine = ops._empty(BIG)
    base = mine.base
    del mine
    seen = []
    thread = threading.Thread(target=lambda: seen.append(ops._empty(BIG).base))
    thread.start()
    thread.join()
    assert seen[0] is not base
