"""The fused many-query attention kernel (prefill, encoder, aligner) against the references.

`ops.attention` sends more than a few queries to `attention_fused` (scores,
exact two-pass softmax and P.V in one OpenMP kernel). Every compiled variant
this machine runs is checked against a float64 computation and against
`reference.attention` (the float32 numpy oracle) within the float32 error
bound of `f32bounds.attention_bound` (it grows with the largest score), over GQA groupings, causal
masks with offsets, key counts that are not a multiple of the register tile,
head sizes 64, 128 and odd small ones, and every query-block size, so each
tail path of the kernel runs.
"""

from __future__ import annotations

import numpy as np
import pytest
from f32bounds import assert_within, attention_bound, attention_exact

from onespeech.kernels import cpu, ops, reference

VARIANTS = [v for v in cpu.supported_variants() if cpu.load_variant(v) is not None]
pytestmark = pytest.mark.skipif(not VARIANTS, reason="compiled kernels are not built")
RNG = np.random.default_rng(0)  # reseeded for each test by conftest._per_test_seed


def randn(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def inputs(n_q: int, n_kv: int, n_heads: int, n_kv_heads: int, hd: int):
    # unit scores at scale hd ** -0.5, as the other attention tests use
    return randn(n_q, n_heads, hd), randn(n_kv, n_kv_heads, hd), randn(n_kv, n_kv_heads, hd)


SHAPES = [
    # n_q, n_kv, n_heads, n_kv_heads, causal_offset
    (9, 9, 2, 2, None),
    (9, 9, 4, 2, 0),
    (13, 37, 4, 2, 24),
    (40, 40, 8, 1, 0),  # group 8: one query's heads fill more than a row tile
    (50, 53, 16, 8, 3),
    (100, 100, 3, 3, None),
    (129, 129, 4, 4, None),
    (64, 200, 2, 1, None),
    (300, 333, 4, 1, 33),
    (300, 300, 2, 2, 0),
]


@pytest.mark.parametrize("hd", [64, 128, 5, 24, 40])
@pytest.mark.parametrize("n_q,n_kv,n_heads,n_kv_heads,causal_offset", SHAPES)
def test_ops_attention_many_queries(n_q, n_kv, n_heads, n_kv_heads, causal_offset, hd) -> None:
    q, k, v = inputs(n_q, n_kv, n_heads, n_kv_heads, hd)
    got = ops.attention(q, k, v, hd**-0.5, causal_offset)
    assert got.shape == q.shape and got.dtype == np.float32 and got.flags.c_contiguous
    bound = attention_bound(q, k, v, hd**-0.5, causal_offset)
    assert_within(got, attention_exact(q, k, v, hd**-0.5, causal_offset), bound)
    # the numpy oracle is within the same bound of the exact values: together, twice it
    assert_within(got, reference.attention(q, k, v, hd**-0.5, causal_offset).astype(np.float64), 2 * bound)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("hd", [64, 128, 7, 16])
@pytest.mark.parametrize("n_q,n_kv,n_heads,n_kv_heads,causal_offset", [(23, 31, 4, 2, 8), (37, 19, 6, 3, None),
                                                                        (17, 70, 8, 2, 53)])
def test_every_variant_block_and_thread_count(variant, n_q, n_kv, n_heads, n_kv_heads, causal_offset, hd) -> None:
    kernels = cpu.load_variant(variant)
    q, k, v = inputs(n_q, n_kv, n_heads, n_kv_heads, hd)
    want = attention_exact(q, k, v, hd**-0.5, causal_offset)
    bound = attention_bound(q, k, v, hd**-0.5, causal_offset)
    first = None
    for block in (1, 2, 5, 7, n_q):
        for threads in (1, 2):
            out = np.full(q.shape, np.nan, np.float32)
            work = np.full(kernels.attention_fused_work_size(n_q, n_kv, n_heads, n_kv_heads, hd, block, threads),
                           np.nan, np.float32)  # nothing may be read before it is written
            kernels.attention_fused(q, k, v, hd**-0.5, -1 if causal_offset is None else causal_offset, out, block, 64,
                                    work, threads)
            assert_within(out, want, bound, f"block {block}, {threads} threads:")
            if threads == 1:
                first = out
            else:  # threads split tasks, never a sum: bit-identical results
                np.testing.assert_array_equal(out, first)


def test_large_scores_and_masked_values() -> None:
    """Softmax is shifted by the row max (no overflow); masked keys' values never leak."""
    q, k, v = inputs(20, 20, 2, 1, 32)
    q *= 40.0  # scores in the hundreds: exp would overflow without the max shift
    got = ops.attention(q, k, v, 32**-0.5, 0)
    assert np.isfinite(got).all()
    assert_within(got, attention_exact(q, k, v, 32**-0.5, 0), attention_bound(q, k, v, 32**-0.5, 0))
    v_masked = v.copy()
    v_masked[10:] = 1e30  # keys 10.. are invisible to queries 0..9 at offset 0
    got2 = ops.attention(q, k, v_masked, 32**-0.5, 0)
    np.testing.assert_array_equal(got2[:10], got[:10])


def test_offset_past_the_keys_and_empty_queries() -> None:
    q, k, v = inputs(12, 12, 4, 2, 16)
    # an offset beyond the cache: every query sees every key
    np.testing.assert_allclose(ops.attention(q, k, v, 0.25, 100), ops.attention(q, k, v, 0.25, None), rtol=0, atol=0)
    assert ops.attention(q[:0], k, v, 0.25, None).shape == (0, 4, 16)


def test_work_too_small_is_refused() -> None:
    kernels = cpu.load_variant(VARIANTS[0])
    q, k, v = inputs(9, 12, 4, 2, 16)
    need = kernels.attention_fused_work_size(9, 12, 4, 2, 16, 3, 2)
    out = np.empty(q.shape, np.float32)
    with pytest.raises(ValueError, match=f"work holds {need - 1} values; these shapes on 2 threads need {need}"):
        kernels.attention_fused(q, k, v, 0.25, -1, out, 3, 64, np.empty(need - 1, np.float32), 2)
    with pytest.raises(ValueError, match="n_heads=4 is not a multiple of n_kv_heads=3"):
        kernels.attention_fused_work_size(9, 12, 4, 3, 16, 3, 2)
