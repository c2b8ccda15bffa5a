"""ops against independent float64 formulas, for the numpy path and every compiled variant."""

from __future__ import annotations

import math

import numpy as np
import pytest
from f32bounds import (
    EXP_ULPS,
    U,
    assert_within,
    attention_bound,
    attention_exact,
    gamma,
    layer_norm_bounded,
    linear_bound,
    rms_norm_bounded,
    rope_bounded,
    softmax_bound,
)

from onespeech.kernels import cpu, ops

RNG = np.random.default_rng(0)  # reseeded for each test by conftest._per_test_seed

# numpy alone, then every compiled variant this CPU runs and the build produced
BACKENDS = ["numpy"] + [v for v in cpu.supported_variants() if cpu.load_variant(v) is not None]


@pytest.fixture(autouse=True, params=BACKENDS)
def backend(request, monkeypatch) -> str:
    monkeypatch.setattr(ops, "_kernels", None if request.param == "numpy" else cpu.load_variant(request.param))
    return request.param


def randn(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


# bfloat16 -------------------------------------------------------------------------


def test_bf16_to_f32_is_exact_high_half() -> None:
    bits = np.arange(0, 1 << 16, dtype=np.uint32).astype(np.uint16)
    f = ops.bf16_to_f32(bits)
    assert f.dtype == np.float32
    assert np.array_equal(f.view(np.uint32) >> 16, bits.astype(np.uint32))
    assert np.array_equal(f.view(np.uint32) & 0xFFFF, np.zeros(bits.shape, np.uint32))


def _bf16_rne_scalar(v: np.float32) -> int:
    # independent formulation: pick the nearer of the two neighbouring bf16
    # values, ties to the even pattern
    if np.isnan(v):
        return 0x7FC0
    u = int(np.array(v, np.float32).view(np.uint32))
    lo, rem = u >> 16, u & 0xFFFF
    if rem > 0x8000 or (rem == 0x8000 and lo & 1):
        lo += 1
    return lo & 0xFFFF


@pytest.mark.parametrize(
    "value",
    [0.0, -0.0, 1.0, 1.00390625, 1.005859375, 1.0078125 + 2**-9, 3.4e38, -3.4e38, 1e-40, float("inf"), -float("inf")],
)
def test_f32_to_bf16_rounds_to_nearest_even(value: float) -> None:
    v = np.float32(value)
    assert int(ops.f32_to_bf16(np.array([v]))[0]) == _bf16_rne_scalar(v)


def test_f32_to_bf16_random_bits_and_ties() -> None:
    bits = RNG.integers(0, 1 << 32, size=20000, dtype=np.uint64).astype(np.uint32)
    # force exact ties on half of them
    bits[::2] = (bits[::2] & 0xFFFF0000) | 0x8000
    x = bits.view(np.float32)
    got = ops.f32_to_bf16(x)
    want = np.array([_bf16_rne_scalar(v) for v in x], dtype=np.uint16)
    assert np.array_equal(got, want)


def test_nan_becomes_quiet_nan_and_round_bf16_roundtrips() -> None:
    x = np.array([np.nan, 1.0, -2.5], np.float32)
    assert int(ops.f32_to_bf16(x)[0]) == 0x7FC0
    r = ops.round_bf16(randn(1000))
    assert np.array_equal(ops.round_bf16(r), r)
    assert np.array_equal(r.view(np.uint32) & 0xFFFF, np.zeros(1000, np.uint32))


def test_round_bf16_into_out_and_in_place() -> None:
    x = randn(3, 700)
    want = ops.round_bf16(x)
    out = np.full(x.shape, 7.0, np.float32)
    assert ops.round_bf16(x, out=out) is out and np.array_equal(out, want)
    assert not np.array_equal(x, want)  # x itself untouched so far
    assert ops.round_bf16(x, out=x) is x and np.array_equal(x, want)
    with pytest.raises(ValueError, match="out has shape"):
        ops.round_bf16(x, out=np.empty((700, 3), np.float32))
    with pytest.raises(ValueError, match="C-contiguous float32"):
        ops.round_bf16(x, out=np.empty(x.shape, np.float64))
    with pytest.raises(ValueError, match="C-contiguous float32"):
        ops.round_bf16(x, out=np.empty((700, 3), np.float32).T)
    frozen = np.empty(x.shape, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ops.round_bf16(x, out=frozen)


# matrix products --------------------------------------------------------------------


@pytest.mark.parametrize("lead", [(1,), (5,), (2, 3), (12,)])
@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_matches_float64(lead: tuple[int, ...], bf16: bool, with_bias: bool) -> None:
    x = randn(*lead, 99)  # K not a multiple of any vector width: tails run too
    w32 = randn(80, 99, scale=0.1)
    w = ops.f32_to_bf16(w32) if bf16 else w32
    w64 = ops.bf16_to_f32(w).astype(np.float64) if bf16 else w32.astype(np.float64)
    b = randn(80) if with_bias else None
    y = ops.linear(x, w, b)
    want = x.astype(np.float64) @ w64.T + (0 if b is None else b.astype(np.float64))
    assert y.shape == (*lead, 80) and y.dtype == np.float32
    assert_within(y, want, linear_bound(x.reshape(-1, 99), w64, b).reshape(want.shape))


def test_linear_bf16_larger_than_a_row_block() -> None:
    x = randn(2, 16)
    w = ops.f32_to_bf16(randn(9000, 16))
    w64 = ops.bf16_to_f32(w).astype(np.float64)
    assert_within(ops.linear(x, w), x.astype(np.float64) @ w64.T, linear_bound(x, w64))


def test_linear_rejects_bad_shapes_and_dtypes() -> None:
    with pytest.raises(ValueError, match="K=4"):
        ops.linear(randn(2, 3), randn(5, 4))
    with pytest.raises(ValueError, match="dtype float64"):
        ops.linear(np.zeros((2, 4)), randn(5, 4))
    with pytest.raises(ValueError, match=r"bias has shape \(4,\)"):
        ops.linear(randn(2, 4), randn(5, 4), randn(4))


def test_embedding_rows_and_bf16() -> None:
    table = randn(50, 8)
    ids = np.array([3, 0, 49, 3], np.int64)
    assert np.array_equal(ops.embedding(table, ids), table[ids])
    t16 = ops.f32_to_bf16(table)
    assert np.array_equal(ops.embedding(t16, ids.astype(np.int32)), ops.bf16_to_f32(t16)[ids])
    with pytest.raises(ValueError, match="token id 50 is outside"):
        ops.embedding(table, np.array([1, 50]))
    with pytest.raises(ValueError, match="token id -1"):
        ops.embedding(table, np.array([-1]))


# norms and activations ------------------------------------------------------------------


def test_rms_norm_matches_float64() -> None:
    x, w = randn(7, 64, scale=3.0), randn(64)
    got = ops.rms_norm(x, w, 1e-6)
    assert got.shape == x.shape
    assert_within(got, *rms_norm_bounded(x, w, 1e-6))
    got16 = ops.rms_norm(x, ops.f32_to_bf16(w), 1e-6)
    assert_within(got16, *rms_norm_bounded(x, ops.bf16_to_f32(ops.f32_to_bf16(w)), 1e-6))
    with pytest.raises(ValueError, match="weight has shape"):
        ops.rms_norm(x, randn(63), 1e-6)
    with pytest.raises(ValueError, match="eps"):
        ops.rms_norm(x, w, -1.0)


def test_layer_norm_matches_float64() -> None:
    x, w, b = randn(5, 3, 48, scale=2.0) + 4, randn(48), randn(48)
    assert_within(ops.layer_norm(x, w, b, 1e-5), *layer_norm_bounded(x, w, b, 1e-5))


def _conv_direct(x: np.ndarray, kernel4: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """torch's Conv2d(k=3, stride=2, padding=1) in float64, channels-last in and out."""
    n, h, w, _ = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    ho, wo = (h + 1) // 2, (w + 1) // 2
    y = np.zeros((n, ho, wo, kernel4.shape[0])) + bias
    for a in range(3):
        for b in range(3):
            y += xp[:, a : a + 2 * ho : 2, b : b + 2 * wo : 2, :] @ kernel4[:, :, a, b].T.astype(np.float64)
    return y


@pytest.mark.parametrize("n,h,w,ci,co", [(2, 7, 10, 5, 6), (1, 128, 13, 1, 8), (3, 2, 1, 4, 3), (1, 16, 25, 32, 16)])
def test_conv3x3s2_matches_a_direct_convolution(n: int, h: int, w: int, ci: int, co: int) -> None:
    x, kernel4, bias = randn(n, h, w, ci), randn(co, ci, 3, 3), randn(co)
    flat = np.ascontiguousarray(kernel4.transpose(0, 2, 3, 1)).reshape(co, 9 * ci)
    got = ops.conv3x3s2(x, flat, bias)
    assert got.shape == (n, (h + 1) // 2, (w + 1) // 2, co)
    # each output is a dot product of 9 * ci terms plus the bias
    bound = gamma(9 * ci + 1) * _conv_direct(np.abs(x), np.abs(kernel4), np.abs(bias))
    assert_within(got, _conv_direct(x, kernel4, bias), bound)


def test_conv3x3s2_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="expected 4 dims"):
        ops.conv3x3s2(randn(3, 4, 5), randn(2, 45))
    with pytest.raises(ValueError, match=r"expected \(Co, 45\)"):
        ops.conv3x3s2(randn(1, 3, 4, 5), randn(2, 44))


def test_gelu_is_the_erf_gelu() -> None:
    x = np.concatenate([randn(4000, scale=4.0), np.array([0, -0.0, 10, -10, 1e-8, 30, -30], np.float32)])
    want = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
    got = ops.gelu(x)
    # A&S erf (|err| < 1.5e-7) as in ATen, its ~20 float32 roundings (t, the
    # polynomial, exp(-z^2)), then 1 + erf and the product
    assert_within(got, want, 0.5 * np.abs(x.astype(np.float64)) * (1.5e-7 + gamma(20)) + gamma(2) * np.abs(want))
    assert got.dtype == np.float32 and np.isfinite(got).all()


def test_gelu_into_out_in_place_and_rounded() -> None:
    # more than one kernel chunk (16384 values) per thread, and a ragged tail
    x = randn(5, 16411, scale=4.0)
    want = ops.gelu(x)
    out = np.full(x.shape, 7.0, np.float32)
    assert ops.gelu(x, out=out) is out and np.array_equal(out, want)
    rounded = ops.round_bf16(want)
    assert not np.array_equal(rounded, want)  # the rounding has work to do
    assert np.array_equal(ops.gelu(x, round_to_bf16=True), rounded)
    assert ops.gelu(x, out=x, round_to_bf16=True) is x and np.array_equal(x, rounded)
    with pytest.raises(ValueError, match="out has shape"):
        ops.gelu(x, out=np.empty((16411, 5), np.float32))
    frozen = np.empty(x.shape, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ops.gelu(x, out=frozen)


def test_silu_and_swiglu() -> None:
    x = np.concatenate([randn(1000, scale=5.0), np.array([-200, 200, 0], np.float32)])
    x64 = x.astype(np.float64)
    want = x64 / (1 + np.exp(-x64))
    got = ops.silu(x)
    # exp within EXP_ULPS ulp, then 1 + e and the division; below float32's range, its
    # smallest step; where exp(-x) overflows float32 (x < -88.7) the formula gives -0
    # (as torch's does), off by all of the true value
    assert np.isfinite(got).all()
    lost = np.where(x64 < -np.log(np.finfo(np.float32).max), np.abs(want), 0.0)
    assert_within(got, want, (2 * EXP_ULPS + 3) * U * np.abs(want) + 2.0**-149 + lost)
    up = randn(x.size)
    bound = (2 * EXP_ULPS + 4) * U * np.abs(want * up) + 2.0**-149 + lost * np.abs(up)
    assert_within(ops.swiglu(x, up), want * up, bound)
    with pytest.raises(ValueError, match="must match"):
        ops.swiglu(x, up[:-1])


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax(axis: int) -> None:
    x = randn(6, 9, scale=10.0)
    x64 = np.moveaxis(x.astype(np.float64), axis, -1)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    want = np.moveaxis(e / e.sum(-1, keepdims=True), -1, axis)
    assert_within(ops.softmax(x, axis), want, np.moveaxis(softmax_bound(np.moveaxis(x, axis, -1)), -1, axis))
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        ops.softmax(x, 2)


# rope and attention ----------------------------------------------------------------------


def test_rope_rotate_half() -> None:
    n, h, d = 5, 3, 8
    x = randn(n, h, d)
    pos = np.arange(n)[:, None] * (10000.0 ** (-np.arange(d // 2) / (d // 2)))[None]
    emb = np.concatenate([pos, pos], -1)
    cos, sin = np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)
    got = ops.rope(x, cos, sin)
    # rotation of each (i, i + d/2) pair by its angle (cos / sin as given, in float32)
    x1, x2 = x[..., : d // 2].astype(np.float64), x[..., d // 2 :].astype(np.float64)
    c, s = cos[:, None, : d // 2].astype(np.float64), sin[:, None, : d // 2].astype(np.float64)
    want = np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)
    assert_within(got, want, rope_bounded(x, cos, sin)[1])
    with pytest.raises(ValueError, match="cos"):
        ops.rope(x, cos[:-1], sin)
    with pytest.raises(ValueError, match="even"):
        ops.rope(randn(2, 1, 3), randn(2, 3), randn(2, 3))


@pytest.mark.parametrize(
    "n_q,n_kv,n_heads,n_kv_heads,causal_offset",
    [(1, 17, 4, 2, 16), (1, 17, 4, 4, None), (6, 6, 4, 1, 0), (5, 12, 6, 2, 7), (9, 9, 2, 2, None), (3, 10, 4, 2, 2),
     (12, 20, 4, 2, 8), (2, 40, 8, 2, 0)],
)
def test_attention_gqa_and_causal(n_q, n_kv, n_heads, n_kv_heads, causal_offset) -> None:
    d = 16
    q, k, v = randn(n_q, n_heads, d), randn(n_kv, n_kv_heads, d), randn(n_kv, n_kv_heads, d)
    got = ops.attention(q, k, v, d**-0.5, causal_offset)
    assert got.shape == q.shape and got.flags.c_contiguous
    assert_within(got, attention_exact(q, k, v, d**-0.5, causal_offset), attention_bound(q, k, v, d**-0.5, causal_offset))


def test_attention_query_blocks(monkeypatch) -> None:
    from onespeech.kernels import reference

    monkeypatch.setattr(reference, "_SCORE_BYTES", 4 * 4 * 20 * 3)  # 3 queries per block
    q, k, v = randn(12, 4, 8), randn(20, 2, 8), randn(20, 2, 8)
    for causal in (2, 8, None):  # causal blocks multiply only the keys they can see
        assert_within(ops.attention(q, k, v, 0.3, causal), attention_exact(q, k, v, 0.3, causal),
                      attention_bound(q, k, v, 0.3, causal))


def test_attention_rejects_bad_input() -> None:
    q, k = randn(2, 6, 8), randn(4, 4, 8)
    with pytest.raises(ValueError, match="not a multiple"):
        ops.attention(q, k, k, 1.0, None)
    with pytest.raises(ValueError, match="causal_offset=-1"):
        ops.attention(randn(2, 4, 8), k, k, 1.0, -1)
    with pytest.raises(ValueError, match="must match"):
        ops.attention(randn(2, 4, 8), k, k[:3], 1.0, None)


def test_argmax_first_maximum() -> None:
    x = np.array([1, 5, 2, 5], np.float32)
    assert ops.argmax(x) == 1 and isinstance(ops.argmax(x), int)
    assert ops.argmax(np.array([1, np.nan, 7], np.float32)) == 1
    with pytest.raises(ValueError, match="empty"):
        ops.argmax(np.zeros(0, np.float32))


def test_readonly_memmapped_weights_and_strided_inputs(tmp_path) -> None:
    from onespeech.kernels.tensorfile import read_tensor_file, write_tensor_file

    w32 = randn(40, 24)
    write_tensor_file(tmp_path / "w.bin", {"w": w32, "w16": ops.f32_to_bf16(w32), "g": randn(24)}, {})
    with read_tensor_file(tmp_path / "w.bin") as tf:
        assert not tf["w"].flags.writeable
        x = randn(24, 3).T  # not C-contiguous
        for name in ("w", "w16"):
            w64 = (ops.bf16_to_f32(tf[name]) if name == "w16" else tf[name]).astype(np.float64)
            assert_within(ops.linear(x, tf[name]), x.astype(np.float64) @ w64.T, linear_bound(x, w64))
            assert_within(ops.linear(x[:1], tf[name]), x[:1].astype(np.float64) @ w64.T, linear_bound(x[:1], w64))
        assert_within(ops.rms_norm(x, tf["g"], 1e-6), *rms_norm_bounded(x, tf["g"], 1e-6))


def test_elementwise_ops_keep_zero_dim_shape() -> None:
    x = np.array(0.5, np.float32)
    for fn in (ops.gelu, ops.silu, ops.round_bf16):
        assert fn(x).shape == ()
    assert ops.swiglu(x, x).shape == () and ops.f32_to_bf16(x).shape == ()


# fused bfloat16 rounding (BF16 precision) -----------------------------------------------


@pytest.mark.parametrize("rows", [1, 3, 40])
def test_round_to_bf16_equals_rounding_the_result(rows: int) -> None:
    """Each op's round_to_bf16=True gives exactly round_bf16 of its plain result,
    on the fused single-row kernels and on the multi-row paths alike."""
    x = randn(rows, 96)
    w32 = randn(200, 96)
    w16 = ops.f32_to_bf16(w32)
    bias = randn(200)
    cases = {
        "linear f32": lambda **kw: ops.linear(x, w32, bias, **kw),
        "linear bf16": lambda **kw: ops.linear(x, w16, **kw),
        "linear bf16 blas": lambda **kw: ops.linear(x, w16, bias, blas=True, **kw),
        "linear blas": lambda **kw: ops.linear(x, w32, blas=True, **kw),
        "linear_many f32": lambda **kw: ops.linear_many(x, [w32, w32[:72]], **kw),
        "linear_many bf16": lambda **kw: ops.linear_many(x, [w16[:72], w16, w16[:8]], **kw),
        "linear bf16 x bf16": lambda **kw: ops.linear(ops.round_bf16(x), w16, bias, **kw),
        "gelu": lambda **kw: ops.gelu(x, **kw),
        "rms_norm": lambda **kw: ops.rms_norm(x, randn_fixed(96), 1e-6, **kw),
        "layer_norm": lambda **kw: ops.layer_norm(x, randn_fixed(96), x[0], 1e-5, **kw),
        "swiglu": lambda **kw: ops.swiglu(x, x[::-1].copy(), **kw),
    }
    q = randn(rows, 4, 32)
    cos, sin = randn(rows, 32), randn(rows, 32)
    cases["rope"] = lambda **kw: ops.rope(q, cos, sin, **kw)
    for kv in (randn(50, 2, 32), ops.f32_to_bf16(randn(50, 2, 32))):
        cases[f"attention {kv.dtype}"] = lambda kv=kv, **kw: ops.attention(q, kv, kv[::-1].copy(), 0.2, 49 - rows, **kw)
    # convolutions: one channel (computed directly), float32 kernels (im2col), bf16 kernels on bf16 values
    for c, dtype in ((1, np.float32), (1, np.uint16), (5, np.float32), (8, np.uint16)):
        image = ops.round_bf16(randn(2, 12, 10, c))
        kernel = randn(7, 9 * c)
        kernel = ops.f32_to_bf16(kernel) if dtype == np.uint16 else kernel
        cases[f"conv3x3s2 C={c} {np.dtype(dtype)}"] = lambda image=image, kernel=kernel, **kw: ops.conv3x3s2(
            image, kernel, bias[:7], **kw
        )
    for name, op in cases.items():
        plain, fused = op(), op(round_to_bf16=True)
        if not isinstance(plain, list):
            plain, fused = [plain], [fused]
        for p, f in zip(plain, fused, strict=True):
            want = ops.round_bf16(p)
            assert not np.array_equal(p, want), f"{name}: the case must need rounding"
            assert np.array_equal(f.view(np.uint32), want.view(np.uint32)), name


def randn_fixed(n: int) -> np.ndarray:
    return (np.random.default_rng(7).standard_normal(n)).astype(np.float32)
