"""INT8 products: every kernel variant this machine runs and the numpy reference, bit for bit.

The integer sums are exact and every float32 step (quantize, dequantize) is
defined once (`_int8_impl.h`, `reference.quantize_int8`), so there is no
tolerance anywhere here except where the int8 result is compared with the
float64 value of its own dequantized codes (three float32 roundings).
The AVX-512 (VPMADDUBSW on 64 bytes, VPDPBUSD) paths are only compiled on
an AVX2 machine; they are checked wherever a CPU runs those builds. VNNI
builds take products of PANEL_ROWS or more activation rows through packed
weight panels (codes offset to unsigned, a column-sum correction taken modulo
2^32), so the exactness tests run with that many rows too.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onespeech.kernels import cpu, ops, reference

VARIANTS = [v for v in cpu.supported_variants() if cpu.load_variant(v) is not None]
pytestmark = pytest.mark.skipif(not VARIANTS, reason="compiled kernels are not built")
RNG = np.random.default_rng(0)  # reseeded for each test by conftest._per_test_seed

# odd N and K, K below / off every vector width (32 and 64 bytes), one token and batches
SHAPES = [(1, 1, 1), (1, 7, 31), (1, 33, 32), (1, 130, 1024), (1, 5, 1000), (2, 9, 63), (3, 64, 65),
          (5, 67, 129), (70, 131, 200), (129, 66, 97)]


# activation rows from which VNNI builds run packed panels (I8_PANEL_MIN_ROWS in _kernels.pyx)
PANEL_ROWS = 16


def _variant(name: str):
    return cpu.load_variant(name)


def _linear(name: str, x, w, s, bias, threads: int = 2) -> np.ndarray:
    y = np.full((x.shape[0], w.shape[0]), np.nan, np.float32)
    _variant(name).linear_int8(x, w, s, bias, y, threads)
    return y


def _quantize(name: str, x, threads: int = 2) -> tuple[np.ndarray, np.ndarray]:
    q = np.full(x.shape, 99, np.int8)
    s = np.full(x.shape[0], np.nan, np.float32)
    _variant(name).quantize_int8(x, q, s, threads)
    return q, s


def _inputs(m: int, n: int, k: int) -> tuple[np.ndarray, ...]:
    x = (RNG.standard_normal((m, k)) * RNG.uniform(0.01, 100, (m, 1))).astype(np.float32)
    w = RNG.integers(-128, 128, (n, k), dtype=np.int8)
    scale = RNG.uniform(1e-4, 1e-1, n).astype(np.float32)
    bias = RNG.standard_normal(n).astype(np.float32)
    return x, w, scale, bias


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-identical (NaN payloads included)."""
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_every_variant_and_numpy_give_the_same_bits(m: int, n: int, k: int) -> None:
    x, w, scale, bias = _inputs(m, n, k)
    if m > 1:
        x[1] = 0  # a zero row: exactly the bias
    for b in (None, bias):
        want = reference.linear_int8(x, w, scale, b)
        for name in VARIANTS:
            for threads in (1, 2, 3):
                assert _same(_linear(name, x, w, scale, b, threads), want), (name, threads, b is None)
    if m > 1:
        assert _same(reference.linear_int8(x, w, scale, bias)[1], bias)


@pytest.mark.parametrize("k", [1, 31, 32, 64, 127, 1024, 4099])
def test_extreme_codes_sum_exactly(k: int) -> None:
    """Activations at +-127 against weights at -128 / 127 / -127: the largest products VPMADDUBSW
    sees (|w| 128 x 127, pairs of the same sign) stay below int16 saturation and sum exactly."""
    x = np.where(RNG.random((4, k)) < 0.5, -1.0, 1.0).astype(np.float32)  # codes +-127 (scale 1/127)
    x[1] = np.float32(1)  # all +127
    x[2] = np.float32(-1)  # all -127
    w = np.stack([np.full(k, -128, np.int8), np.full(k, 127, np.int8), np.full(k, -127, np.int8),
                  np.where(x[0] < 0, -128, 127).astype(np.int8), RNG.integers(-128, 128, k, dtype=np.int8)])
    scale = np.ones(w.shape[0], np.float32)
    q, sx = reference.quantize_int8(x)
    assert np.array_equal(np.abs(q), np.full((4, k), 127, np.int8))
    exact = q.astype(np.int64) @ w.astype(np.int64).T
    want = reference.linear_int8(x, w, scale, None)
    assert np.array_equal(want, exact.astype(np.float32) * (sx[:, None] * scale))
    for name in VARIANTS:
        assert _same(_linear(name, x, w, scale, None), want), name


@pytest.mark.parametrize("k", [1, 3, 4, 5, 64, 1027, ops.INT8_MAX_K])
def test_extreme_codes_sum_exactly_on_many_rows(k: int) -> None:
    """The same extremes through the panel path: (x + 128) w sums wrap past 2^32 at the largest K
    (255 x 127 x 131072), and the correction 128 sum(w) brings them back to the exact sum."""
    m = PANEL_ROWS + 1
    signs = np.where(RNG.random((m, k)) < 0.5, -1.0, 1.0).astype(np.float32)
    x = signs.copy()
    x[1::3] = 1  # all +127
    x[2::3] = -1  # all -127
    w = np.stack([np.full(k, -128, np.int8), np.full(k, 127, np.int8), np.full(k, -127, np.int8)]
                 + [np.where(signs[i] < 0, -128, 127).astype(np.int8) for i in range(0, m, 4)]
                 + [RNG.integers(-128, 128, k, dtype=np.int8) for _ in range(48)])
    scale = np.ones(w.shape[0], np.float32)
    q, sx = reference.quantize_int8(x)
    exact = q.astype(np.int64) @ w.astype(np.int64).T
    assert np.abs(exact).max() < 2**31
    want = reference.linear_int8(x, w, scale, None)
    assert np.array_equal(want, exact.astype(np.float32) * (sx[:, None] * scale))
    for name in VARIANTS:
        assert _same(_linear(name, x, w, scale, None), want), name


def test_the_largest_k_does_not_overflow() -> None:
    k = ops.INT8_MAX_K
    x = np.ones((1, k), np.float32)
    w = np.full((2, k), -128, np.int8)
    w[1] = 127
    scale = np.ones(2, np.float32)
    want = np.array([[-128 * 127 * k, 127 * 127 * k]], np.int64).astype(np.float32) / np.float32(127)
    ref = reference.linear_int8(x, w, scale, None)
    # the definition: float32(acc) * (1/127 * 1)
    assert np.array_equal(ref, np.array([[-128 * 127 * k, 127 * 127 * k]]).astype(np.float32)
                          * (np.float32(1) / np.float32(127)))
    np.testing.assert_allclose(ref, want, rtol=1e-6)
    for name in VARIANTS:
        assert _same(_linear(name, x, w, scale, None), ref), name


def test_quantizer_rule_on_special_rows() -> None:
    """Round half to even, zero / tiny / inf / NaN rows, denormals: the same codes and scales everywhere."""
    k = 9
    x = np.zeros((8, k), np.float32)
    x[0] = [127, 2.5, 3.5, -2.5, -3.5, 0.5, -0.5, 1.5, -0.0]  # amax 127: inv = 1, exact halves
    x[1] = 0  # zeros
    x[2, 3] = 1e-38  # 127 / amax overflows: a zero row
    x[3, 0] = np.inf
    x[4, 5] = np.nan
    x[5] = RNG.standard_normal(k).astype(np.float32)
    x[5, 2] = np.float32(1e-45)  # a denormal among normal values
    x[6] = np.float32(4e-37)  # just above the overflow of 127 / amax: inv finite
    x[7] = -np.float32(np.finfo(np.float32).max)
    q, s = reference.quantize_int8(x)
    assert q[0].tolist() == [127, 2, 4, -2, -4, 0, 0, 2, 0] and s[0] == np.float32(1)
    assert not q[1:5].any() and s[1] == 0 and s[2] == 0 and np.isnan(s[3]) and np.isnan(s[4])
    assert np.all(q[6] == 127) and s[6] > 0 and np.all(q[7] == -127)
    for name in VARIANTS:
        for threads in (1, 3):
            gq, gs = _quantize(name, x, threads)
            assert np.array_equal(gq, q) and _same(gs, s), (name, threads)
    gq, gs = ops.quantize_int8(x.reshape(2, 4, k))
    assert gq.shape == (2, 4, k) and gs.shape == (2, 4)
    assert np.array_equal(gq.reshape(8, k), q) and _same(gs.reshape(8), s)


def test_rows_with_inf_or_nan_give_nan_outputs_and_leave_the_others() -> None:
    x, w, scale, bias = _inputs(4, 10, 40)
    x[1, 7] = np.inf
    x[2, 0] = np.nan
    want = reference.linear_int8(x, w, scale, bias)
    assert np.isnan(want[1:3]).all() and np.isfinite(want[[0, 3]]).all()
    for name in VARIANTS:
        assert _same(_linear(name, x, w, scale, bias), want), name


def test_rows_are_independent_so_batches_equal_single_rows() -> None:
    x, w, scale, bias = _inputs(37, 70, 300)
    for name in VARIANTS:
        batch = _linear(name, x, w, scale, bias)
        for i in (0, 1, 17, 36):
            assert _same(_linear(name, x[i : i + 1], w, scale, bias), batch[i : i + 1]), (name, i)


def test_result_is_the_dequantized_product_up_to_three_roundings() -> None:
    """y is float32(acc) * (sx * sw): within 3 float32 roundings of the exact product of the
    dequantized codes (|acc| < 2^24 here, so the conversion is exact and two remain)."""
    x, w32, _, _ = _inputs(6, 50, 257)
    w32 = (w32.astype(np.float32) * np.float32(0.013)).astype(np.float32)
    w, ws = ops.quantize_int8(w32)  # per output channel
    assert w.dtype == np.int8 and np.abs(w).max() <= 127 and ws.shape == (50,)
    y = ops.linear_int8(x, w, ws)
    q, sx = ops.quantize_int8(x)
    exact = (q.astype(np.float64) * sx[:, None].astype(np.float64)) @ (w.astype(np.float64) * ws[:, None]).T
    assert np.all(np.abs(y - exact) <= 3 * 2.0**-24 * np.abs(exact))
    # and within the quantization error of the float product
    err = np.abs(y - x.astype(np.float64) @ w32.astype(np.float64).T)
    bound = (sx[:, None] / 2) * np.abs(w32).sum(1) + np.abs(x).sum(1, keepdims=True) * (ws / 2) + np.abs(exact) * 1e-6
    assert np.all(err <= bound)


def test_ops_numpy_path_equals_the_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    x, w, scale, bias = _inputs(3, 21, 77)
    compiled = ops.linear_int8(x.reshape(3, 1, 77), w, scale, bias)
    cq, cs = ops.quantize_int8(x)
    monkeypatch.setattr(ops, "_kernels", None)
    assert _same(ops.linear_int8(x.reshape(3, 1, 77), w, scale, bias), compiled)
    q, s = ops.quantize_int8(x)
    assert np.array_equal(q, cq) and _same(s, cs)


@pytest.mark.parametrize("numpy_path", [False, True])
def test_empty_and_one_dimensional_shapes(numpy_path: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """No rows, no outputs, K = 0 (each output exactly the bias), and a 1-D x."""
    if numpy_path:
        monkeypatch.setattr(ops, "_kernels", None)
    x, w, scale, bias = _inputs(1, 5, 7)
    assert ops.linear_int8(np.zeros((0, 7), np.float32), w, scale).shape == (0, 5)
    assert ops.linear_int8(x, w[:0], scale[:0]).shape == (1, 0)
    assert _same(ops.linear_int8(x[0], w, scale, bias), ops.linear_int8(x, w, scale, bias)[0])
    y = ops.linear_int8(np.ones((2, 3, 0), np.float32), np.zeros((5, 0), np.int8), scale, bias)
    assert y.shape == (2, 3, 5) and _same(y, np.broadcast_to(bias, (2, 3, 5)).copy())
    q, s = ops.quantize_int8(np.ones((3, 0), np.float32))
    assert q.shape == (3, 0) and _same(s, np.zeros(3, np.float32))


def test_ops_checks_its_arguments() -> None:
    x, w, scale, bias = _inputs(2, 4, 8)
    with pytest.raises(ValueError, match="w has dtype int16; expected int8"):
        ops.linear_int8(x, w.astype(np.int16), scale)
    with pytest.raises(ValueError, match="x has dtype float64"):
        ops.linear_int8(x.astype(np.float64), w, scale)
    with pytest.raises(ValueError, match=r"needs K=8"):
        ops.linear_int8(x[:, :7], w, scale)
    with pytest.raises(ValueError, match=r"w_scale has shape \(3,\); expected \(4,\)"):
        ops.linear_int8(x, w, scale[:3])
    with pytest.raises(ValueError, match=r"bias has shape \(5,\); expected \(4,\)"):
        ops.linear_int8(x, w, scale, np.zeros(5, np.float32))
    with pytest.raises(ValueError, match=r"K <= 131072"):
        ops.linear_int8(np.zeros((1, ops.INT8_MAX_K + 1), np.float32), np.zeros((1, ops.INT8_MAX_K + 1), np.int8),
                        np.ones(1, np.float32))
    with pytest.raises(TypeError, match="x must be a numpy array"):
        ops.quantize_int8([1.0, 2.0])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected"):
        ops.quantize_int8(np.zeros((), np.float32))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.sampled_from([1, 2, 3, 9, PANEL_ROWS - 1, PANEL_ROWS, PANEL_ROWS + 1, 25, 40]), n=st.integers(1, 110),
       k=st.integers(1, 300), seed=st.integers(0, 2**32 - 1),
       spread=st.sampled_from([1e-30, 1.0, 1e30]))
def test_any_shape_gives_the_same_bits_everywhere(m: int, n: int, k: int, seed: int, spread: float) -> None:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, k)) * spread).astype(np.float32)
    x[rng.random(m) < 0.2] = 0
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    scale = rng.uniform(0, 1, n).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32) if seed % 2 else None
    want = reference.linear_int8(x, w, scale, bias)
    for name in VARIANTS:
        assert _same(_linear(name, x, w, scale, bias, threads=1 + seed % 3), want), name


@pytest.mark.parametrize("numpy_path", [False, True])
def test_int8_convolution_is_linear_int8_on_the_patches(numpy_path: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """`int8matrix.conv3x3s2` with an int8 kernel: each output pixel's patch (`ops.im2col_3x3s2`)
    quantized per row and multiplied as `linear_int8` does; a float kernel goes to `ops.conv3x3s2`."""
    from onespeech.kernels import int8matrix

    if numpy_path:
        monkeypatch.setattr(ops, "_kernels", None)
    x = (RNG.standard_normal((2, 9, 14, 5)) * 3).astype(np.float32)
    kernel = (RNG.standard_normal((7, 45)) * 0.1).astype(np.float32)
    bias = RNG.standard_normal(7).astype(np.float32)
    cols = ops.im2col_3x3s2(x)
    assert cols.shape == (2 * 5 * 7, 45) and np.array_equal(cols, reference.im2col_3x3s2(x))
    codes = int8matrix.quantize(kernel)
    y = int8matrix.conv3x3s2(x, codes, bias)
    assert y.shape == (2, 5, 7, 7)
    assert _same(y.reshape(-1, 7), reference.linear_int8(reference.im2col_3x3s2(x), codes.codes, codes.scale, bias))
    assert _same(int8matrix.conv3x3s2(x, kernel, bias), ops.conv3x3s2(x, kernel, bias))
    with pytest.raises(ValueError, match=r"expected 4 dims|\(n, H, W, C\)"):
        ops.im2col_3x3s2(x[0])
