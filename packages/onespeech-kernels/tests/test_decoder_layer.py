"""The fused one-token decoder layer equals the op-by-op computation bit for bit.

Float32, bf16 and int8 matrices; the op-by-op reference runs the products through
`int8matrix` (`ops.linear_int8` per int8 matrix), as the decoder's op path does.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onespeech.kernels import cpu, int8matrix, ops
from onespeech.kernels import threads as thread_counts
from onespeech.kernels.int8matrix import Int8Matrix
from onespeech.kernels.threads import thread_limit

BUILT = [v for v in cpu.supported_variants() if cpu.load_variant(v) is not None]
VARIANTS = BUILT or [
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


def _int8(mats: tuple[np.ndarray, ...]) -> tuple[Int8Matrix, ...]:
    return tuple(int8matrix.quantize(m) for m in mats)


def _fused(mats, norms, n_heads=H, n_kv_heads=HKV, head_dim=HD) -> ops.DecoderLayer:
    """`ops.decoder_layer` over float matrices or Int8Matrix ones (codes plus scales)."""
    int8 = all(isinstance(m, Int8Matrix) for m in mats)
    layer = ops.decoder_layer(
        tuple(m.codes for m in mats) if int8 else mats, norms, n_heads=n_heads, n_kv_heads=n_kv_heads,
        head_dim=head_dim, eps=EPS, scales=tuple(m.scale for m in mats) if int8 else None,
    )
    assert layer is not None
    return layer


def _op_by_op(h, mats, norms, kc, vc, pos, cos, sin, scale, b, heads=H, kv_heads=HKV, hd=HD):
    """The layer as the decoder's op path computes it (one row), float or Int8Matrix matrices."""
    x = ops.rms_norm(h[None], norms[0], EPS, round_to_bf16=b)
    q, k, v = int8matrix.linear_many(x, list(mats[:3]), round_to_bf16=b)
    q = ops.rms_norm(q.reshape(1, heads, hd), norms[2], EPS, round_to_bf16=b)
    k = ops.rms_norm(k.reshape(1, kv_heads, hd), norms[3], EPS, round_to_bf16=b)
    q, k = (
        ops.rope(q, cos[None], sin[None], round_to_bf16=b),
        ops.rope(k, cos[None], sin[None], round_to_bf16=b),
    )
    v = v.reshape(1, kv_heads, hd)
    if kc.dtype == np.uint16:
        k, v = ops.f32_to_bf16(k), ops.f32_to_bf16(v)
    kc[pos], vc[pos] = k[0], v[0]
    att = ops.attention(q, kc[: pos + 1], vc[: pos + 1], scale, pos, round_to_bf16=b).reshape(1, heads * hd)
    h = h + int8matrix.linear(att, mats[3], round_to_bf16=b)[0]
    h = ops.round_bf16(h) if b else h
    x = ops.rms_norm(h[None], norms[1], EPS, round_to_bf16=b)
    gate, up = int8matrix.linear_many(x, list(mats[4:6]), round_to_bf16=b)
    h = h + int8matrix.linear(ops.swiglu(gate, up, round_to_bf16=b), mats[6], round_to_bf16=b)[0]
    return ops.round_bf16(h) if b else h


@pytest.mark.parametrize("kind", ["float32", "bf16", "int8"])
@pytest.mark.parametrize("cache_dtype", [np.float32, np.uint16])
@pytest.mark.parametrize("round_to_bf16", [False, True])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_step_equals_op_by_op(variant, kind, cache_dtype, round_to_bf16, threads, monkeypatch) -> None:
    # 3 threads split unevenly, also on a 2-CPU machine, where the count would be clamped
    monkeypatch.setattr(thread_counts, "available_cpus", lambda: 3)
    with thread_limit(threads):
        mats, norms = _weights(kind == "bf16")
        if kind == "int8":
            mats = _int8(mats)
        layer = _fused(mats, norms)
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


@pytest.mark.skipif(not BUILT, reason="no compiled kernel variant is built here")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kv_heads=st.integers(1, 3), group=st.integers(1, 3), half_hd=st.integers(1, 40), d=st.integers(1, 300),
       ff=st.integers(1, 300), seed=st.integers(0, 2**32 - 1), spread=st.sampled_from([1e-3, 1.0, 1e3]))
def test_int8_step_equals_op_by_op_at_any_shape(kv_heads, group, half_hd, d, ff, seed, spread, monkeypatch) -> None:
    # any codes (-128 included) and scales; K below, at and past every vector width (32 and 64 codes)
    rng = np.random.default_rng(seed)
    heads, hd = kv_heads * group, 2 * half_hd
    shapes = [(heads * hd, d), (kv_heads * hd, d), (kv_heads * hd, d), (d, heads * hd), (ff, d), (ff, d), (d, ff)]
    mats = tuple(Int8Matrix(rng.integers(-128, 128, s, dtype=np.int8), rng.uniform(0, 0.1, s[0]).astype(np.float32))
                 for s in shapes)  # fmt: skip
    norms = tuple((1 + 0.1 * rng.standard_normal(n)).astype(np.float32) for n in (d, d, hd, hd))
    pos, cap = int(rng.integers(0, 6)), 6
    h = (rng.standard_normal(d) * spread).astype(np.float32)
    cos, sin = rng.standard_normal((2, hd)).astype(np.float32)
    past = rng.standard_normal((cap, kv_heads, hd)).astype(np.float32)
    for name in BUILT:
        monkeypatch.setattr(ops, "_kernels", cpu.load_variant(name))
        k_ops, v_ops = past.copy(), past[::-1].copy()
        kc, vc, got = k_ops.copy(), v_ops.copy(), h.copy()
        with thread_limit(1 + seed % 2):
            want = _op_by_op(h, mats, norms, k_ops, v_ops, pos, cos, sin, hd**-0.5, False, heads, kv_heads, hd)
            _fused(mats, norms, heads, kv_heads, hd).step(got, kc, vc, pos, cos, sin, hd**-0.5)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), name
        assert np.array_equal(kc, k_ops) and np.array_equal(vc, v_ops), name


def test_int8_layer_runs_the_int8_arithmetic(variant) -> None:
    # the codes' dequantized values in a float32 layer give other bits: the activations'
    # quantization is in the fused int8 step, not a float product on widened weights
    mats, norms = _weights(False)
    codes = _int8(mats)
    widened = tuple((m.codes.astype(np.float32) * m.scale[:, None]).astype(np.float32) for m in codes)
    h = np.random.default_rng(5).standard_normal(D).astype(np.float32)
    cos, sin = np.ones(HD, np.float32), np.zeros(HD, np.float32)
    outs = []
    for layer in (_fused(codes, norms), _fused(widened, norms)):
        got, kc = h.copy(), np.zeros((4, HKV, HD), np.float32)
        layer.step(got, kc, kc.copy(), 0, cos, sin, HD**-0.5)
        outs.append(got)
    assert not np.array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], outs[1], rtol=0, atol=0.05 * np.abs(outs[1]).max())


def test_bad_int8_weights_are_refused(variant) -> None:
    mats, norms = _weights(False)
    codes = _int8(mats)
    q = tuple(m.codes for m in codes)
    s = tuple(m.scale for m in codes)
    dims = dict(n_heads=H, n_kv_heads=HKV, head_dim=HD, eps=EPS)
    with pytest.raises(ValueError, match="need one float32 scale vector each: 7 expected, none given"):
        ops.decoder_layer(q, norms, **dims)
    with pytest.raises(ValueError, match="7 expected, 6 given"):
        ops.decoder_layer(q, norms, **dims, scales=s[:6])
    with pytest.raises(ValueError, match=r"scales\[3\] has shape \(71,\); expected \(72,\)"):
        ops.decoder_layer(q, norms, **dims, scales=s[:3] + (s[3][:-1].copy(),) + s[4:])
    with pytest.raises(ValueError, match=r"scales\[0\] has dtype float64; expected float32"):
        ops.decoder_layer(q, norms, **dims, scales=(s[0].astype(np.float64),) + s[1:])
    with pytest.raises(ValueError, match=r"mix dtypes \['float32', 'int8'\]"):
        ops.decoder_layer(q[:6] + (mats[6],), norms, **dims, scales=s)
    with pytest.raises(ValueError, match="only int8 matrices take scales"):
        ops.decoder_layer(mats, norms, **dims, scales=s)
    with pytest.raises(ValueError, match="matrix 6"):
        ops.decoder_layer(q[:6] + (q[6][:, :-1].copy(),), norms, **dims, scales=s)
    with pytest.raises(ValueError, match=r"matrices\[2\] has dtype uint8"):
        ops.decoder_layer(q[:2] + (q[2].view(np.uint8),) + q[3:], norms, **dims, scales=s)
