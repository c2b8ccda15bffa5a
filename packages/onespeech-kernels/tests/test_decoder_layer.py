"""The fused one-token decoder layer equals the op-by-op computation bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from onespeech.kernels import cpu, ops
from onespeech.kernels import threads as thread_counts
from onespeech.kernels.threads import thread_limit

VARIANTS = [v for v in cpu.supported_variants() if cpu.load_variant(v) is not None] or [
    # the fused layer exists only in the compiled kernels; without them decode runs
    # op by op (test_without_compiled_kernels_there_is_no_fused_layer)
    pytest.param(None, marks=pytest.mark.skip(reason="no compiled kernel variant is built here"))
]
# odd sizes: every GEMV, norm and attention kernel also runs its scalar tails
D, H, HKV, HD, FF, EPS = 72, 4, 2, 18, 100, 1e-6


@pytest.fixture(params=VARIANTS)
def variant(request, monkeypatch) -> str:
    monkeypatch.setattr(ops, "_kernels", cpu.load_variant(request.param))
    return request.param


def _weights(bf16: bool, seed: int = 0) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    rng = np.random.default_rng(seed)
    shapes = [(H * HD, D), (HKV * HD, D), (HKV * HD, D), (D, H * HD), (FF, D), (FF, D), (D, FF)]
    mats = tuple((rng.standard_normal(s) / np.sqrt(s[1])).astype(np.float32) for s in shapes)
    norms = tuple((1 + 0.1 * rng.standard_normal(n)).astype(np.float32) for n in (D, D, HD, HD))
    if bf16:
        mats, norms = tuple(ops.f32_to_bf16(m) for m in mats), tuple(ops.f32_to_bf16(v) for v in norms)
    return mats, norms


def _op_by_op(h, mats, norms, kc, vc, pos, cos, sin, scale, b):
    """The layer as the decoder's op path computes it (one row)."""
    x = ops.rms_norm(h[None], norms[0], EPS, round_to_bf16=b)
    q, k, v = ops.linear_many(x, list(mats[:3]), round_to_bf16=b)
    q = ops.rms_norm(q.reshape(1, H, HD), norms[2], EPS, round_to_bf16=b)
    k = ops.rms_norm(k.reshape(1, HKV, HD), norms[3], EPS, round_to_bf16=b)
    q, k = (
        ops.rope(q, cos[None], sin[None], round_to_bf16=b),
        ops.rope(k, cos[None], sin[None], round_to_bf16=b),
    )
    v = v.reshape(1, HKV, HD)
    if kc.dtype == np.uint16:
        k, v = ops.f32_to_bf16(k), ops.f32_to_bf16(v)
    kc[pos], vc[pos] = k[0], v[0]
    att = ops.attention(q, kc[: pos + 1], vc[: pos + 1], scale, pos, round_to_bf16=b).reshape(1, H * HD)
    h = h + ops.linear(att, mats[3], round_to_bf16=b)[0]
    h = ops.round_bf16(h) if b else h
    x = ops.rms_norm(h[None], norms[1], EPS, round_to_bf16=b)
    gate, up = ops.linear_many(x, list(mats[4:6]), round_to_bf16=b)
    h = h + ops.linear(ops.swiglu(gate, up, round_to_bf16=b), mats[6], round_to_bf16=b)[0]
    return ops.round_bf16(h) if b else h


@pytest.mark.parametrize("bf16_weights", [False, True])
@pytest.mark.parametrize("cache_dtype", [np.float32, np.uint16])
@pytest.mark.parametrize("round_to_bf16", [False, True])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_step_equals_op_by_op(variant, bf16_weights, cache_dtype, round_to_bf16, threads, monkeypatch) -> None:
    # 3 threads split unevenly, also on a 2-CPU machine, where the count would be clamped
    monkeypatch.setattr(thread_counts, "available_cpus", lambda: 3)
    with thread_limit(threads):
        mats, norms = _weights(bf16_weights)
        layer = ops.decoder_layer(mats, norms, n_heads=H, n_kv_heads=HKV, head_dim=HD, eps=EPS)
        assert layer is not None
        rng = np.random.default_rng(1)
        cap = 40
        k_ops = np.zeros((cap, HKV, HD), cache_dtype)
        # a filled past: earlier positions' keys/values as the decoder would hold them
        past = rng.standard_normal((cap, HKV, HD)).astype(np.float32)
        k_ops[:] = ops.f32_to_bf16(past) if cache_dtype == np.uint16 else past
        v_ops = k_ops[::-1].copy()
        k_fused, v_fused = k_ops.copy(), v_ops.copy()
        scale = HD**-0.5
        for pos in (0, 1, 9, 37):
            h = rng.standard_normal(D).astype(np.float32)
            if round_to_bf16:
                h = ops.round_bf16(h)
            cos, sin = rng.standard_normal(HD).astype(np.float32), rng.standard_normal(HD).astype(np.float32)
            want = _op_by_op(h, mats, norms, k_ops, v_ops, pos, cos, sin, scale, round_to_bf16)
            got = h.copy()
            layer.step(got, k_fused, v_fused, pos, cos, sin, scale, round_to_bf16=round_to_bf16)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"hidden at pos {pos}"
            assert np.array_equal(k_fused, k_ops) and np.array_equal(v_fused, v_ops), f"cache at pos {pos}"
            assert not np.array_equal(got, h)


def test_without_compiled_kernels_there_is_no_fused_layer(monkeypatch) -> None:
    monkeypatch.setattr(ops, "_kernels", None)
    mats, norms = _weights(False)
    assert ops.decoder_layer(mats, norms, n_heads=H, n_kv_heads=HKV, head_dim=HD, eps=EPS) is None


def test_bad_weights_and_step_arguments_are_refused(variant) -> None:
    mats, norms = _weights(False)
    dims = dict(n_heads=H, n_kv_heads=HKV, head_dim=HD, eps=EPS)
    with pytest.raises(ValueError, match="matrix 6"):
        ops.decoder_layer(mats[:6] + (mats[6][:, :-1].copy(),), norms, **dims)
    with pytest.raises(ValueError, match="mix dtypes"):
        ops.decoder_layer(mats[:6] + (ops.f32_to_bf16(mats[6]),), norms, **dims)
    with pytest.raises(ValueError, match="norm weight 2"):
        ops.decoder_layer(mats, norms[:2] + (norms[2][:-1].copy(), norms[3]), **dims)
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        ops.decoder_layer(mats, norms, **{**dims, "n_kv_heads": 3})
    with pytest.raises(ValueError, match="7 matrices"):
        ops.decoder_layer(mats[:6], norms, **dims)
    layer = ops.decoder_layer(mats, norms, **dims)
    kc = np.zeros((8, HKV, HD), np.float32)
    vc, cos, h = kc.copy(), np.ones(HD, np.float32), np.ones(D, np.float32)
    with pytest.raises(ValueError, match="outside the cache"):
        layer.step(h, kc, vc, 8, cos, cos, 0.1)
    with pytest.raises(ValueError, match="expected 72"):
        layer.step(np.ones(D + 1, np.float32), kc, vc, 0, cos, cos, 0.1)
    with pytest.raises(ValueError, match="caches of shape"):
        layer.step(h, kc, np.zeros((7, HKV, HD), np.float32), 0, cos, cos, 0.1)
    assert np.array_equal(h, np.ones(D, np.float32)) and not kc.any()
