"""Every compiled kernel variant this machine runs against the scalar generic one.

The generic variant (one float per "vector", plain sequential sums) is the
reference for the SIMD variants; all must lie within the float32 error bound
of any summation order (`f32bounds`) of the exact values, and
each must give bit-identical results for any thread count (threads split
rows, never a sum).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from f32bounds import (
    assert_within,
    attention_bound,
    attention_exact,
    layer_norm_bounded,
    linear_bound,
    rms_norm_bounded,
    rope_bounded,
)

import onespeech.kernels
from onespeech.kernels import cpu, ops, reference

GENERIC = cpu.load_variant("generic")
VARIANTS = [v for v in cpu.supported_variants() if cpu.load_variant(v) is not None]
pytestmark = pytest.mark.skipif(GENERIC is None, reason="compiled kernels are not built")
RNG = np.random.default_rng(0)  # reseeded for each test by conftest._per_test_seed


def randn(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def run(variant: str, fn: str, *args, threads: int = 2):
    return getattr(cpu.load_variant(variant), fn)(*args, threads)


def test_generic_is_scalar_and_variants_report_themselves() -> None:
    assert GENERIC.VARIANT == "generic" and GENERIC.LANES == 1
    for v in VARIANTS:
        assert cpu.load_variant(v).VARIANT == v


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("k", [1024, 61])
def test_linear_many_equals_one_call_per_matrix(variant: str, k: int) -> None:
    x = randn(1, k)
    shapes = (2048, 1024, 1024) if k == 1024 else (5, 33, 17, 1)  # blocks of 16 rows and odd tails
    w32 = [randn(n, k, scale=0.05) for n in shapes]
    w16 = [reference.f32_to_bf16(w) for w in w32]
    for ws, single in ((w16, "linear_bf16"), (w32, "linear_f32")):
        want = []
        for w in ws:
            y = np.empty((1, w.shape[0]), np.float32)
            run(variant, single, x, w, None, y, threads=1)
            want.append(y)
        for threads in (1, 2, 3):
            ys = tuple(np.full((1, w.shape[0]), np.nan, np.float32) for w in ws)
            run(variant, "linear_many", x, tuple(ws), ys, threads=threads)
            for y, expected in zip(ys, want, strict=True):
                assert np.array_equal(y, expected)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n,k", [(1030, 1024), (64, 61), (7, 40), (3, 17)])
def test_decode_gemv_sums_each_row_as_its_aligned_group_of_four(variant: str, n: int, k: int) -> None:
    """The float32 decode GEMV reads far-apart rows together, yet every row's sum is the one it
    gets in its aligned group of four rows alone (the last n % 4 rows: alone), for any split."""
    x, w, bias = randn(1, k), randn(n, k, scale=0.05), randn(n)

    def gemv(rows: np.ndarray, b: np.ndarray | None, threads: int) -> np.ndarray:
        y = np.full((1, rows.shape[0]), np.nan, np.float32)
        run(variant, "linear_f32", x, rows, b, y, threads=threads)
        return y[0]

    n4 = n - n % 4
    for b in (None, bias):
        want = np.concatenate(
            [gemv(w[g : g + 4], None if b is None else b[g : g + 4], 1) for g in range(0, n4, 4)]
            + [gemv(w[r : r + 1], None if b is None else b[r : r + 1], 1) for r in range(n4, n)]
        )
        for threads in (1, 2, 3):
            assert np.array_equal(gemv(w, b, threads).view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", [(2, 64, 50, 3), (1, 128, 100, 1), (3, 5, 1, 7), (1, 1, 1, 2)])
def test_im2col_is_an_exact_copy_for_any_thread_count(variant: str, shape: tuple[int, int, int, int]) -> None:
    x = randn(*shape)
    want = reference.im2col_3x3s2(x)
    for threads in (1, 2, 3):
        cols = np.full(want.shape, np.nan, np.float32)
        run(variant, "im2col_3x3s2", x, cols, threads=threads)
        assert np.array_equal(cols, want)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape,co", [((2, 9, 14, 1), 37), ((1, 128, 100, 1), 48), ((3, 1, 2, 1), 16)])
def test_single_channel_convolution_sums_the_nine_taps(variant: str, shape: tuple[int, ...], co: int) -> None:
    x, kernel, bias = randn(*shape), randn(co, 9), randn(co)
    n, h, w, _ = shape
    cols = reference.im2col_3x3s2(x).astype(np.float64)
    exact = cols @ kernel.astype(np.float64).T + bias
    taps = np.ascontiguousarray(kernel.T)
    got = {}
    for threads in (1, 2, 3):
        y = np.full((n * ((h + 1) // 2) * ((w + 1) // 2), co), np.nan, np.float32)
        run(variant, "conv3x3s2_c1", x, taps, bias, y, threads=threads)
        got[threads] = y
    assert all(np.array_equal(got[1].view(np.uint32), got[t].view(np.uint32)) for t in (2, 3))
    assert_within(got[1], exact, linear_bound(reference.im2col_3x3s2(x), kernel, bias))
    plain = np.empty_like(got[1])
    run(variant, "conv3x3s2_c1", x, taps, None, plain)
    assert_within(plain, cols @ kernel.astype(np.float64).T, linear_bound(reference.im2col_3x3s2(x), kernel))
    rounded = np.empty_like(got[1])
    kernels = cpu.load_variant(variant)
    kernels.conv3x3s2_c1(x, taps, bias, rounded, 2, True)
    assert np.array_equal(rounded, reference.round_bf16(got[1]))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape,co", [((2, 17, 23, 1), 37), ((1, 1, 1, 1), 1), ((3, 128, 100, 1), 16),
                                      ((1, 2, 7, 1), 480)])
def test_gelu_and_the_single_channel_convolution_give_the_generic_bits(
    variant: str, shape: tuple[int, int, int, int], co: int
) -> None:
    """No product is fused into an add in either (every build sums with the same roundings) and
    GELU's exp is one polynomial everywhere: the INT8 encoder quantizes their outputs to int8 codes,
    where a last-bit difference would become a step of the code."""
    x = np.concatenate([randn(40_003, scale=3.0), randn(5_000, scale=1e-20), randn(5_000, scale=30.0),
                        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 9.0, -9.0, 20.0], np.float32)])
    want = np.empty_like(x)
    GENERIC.gelu(x, want, 1)
    got = np.empty_like(x)
    run(variant, "gelu", x, got, threads=2)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    image, kernel, bias = randn(*shape), randn(co, 9), randn(co)
    taps = np.ascontiguousarray(kernel.T)
    n, h, w, _ = shape
    outs = []
    for v in ("generic", variant):
        y = np.empty((n * ((h + 1) // 2) * ((w + 1) // 2), co), np.float32)
        run(v, "conv3x3s2_c1", image, taps, bias, y)
        outs.append(y)
    assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))


@pytest.mark.parametrize("variant", VARIANTS)
def test_single_channel_convolution_checks_its_arguments(variant: str) -> None:
    kernels = cpu.load_variant(variant)
    x, taps, y = randn(1, 6, 6, 1), randn(9, 8), np.empty((9, 8), np.float32)
    with pytest.raises(ValueError, match=r"x of shape \(n, H, W, 1\).*x's last dim 2"):
        kernels.conv3x3s2_c1(randn(1, 6, 6, 2), taps, None, y, 2)
    with pytest.raises(ValueError, match=r"wt \(9, Co\).*wt \(8, 8\)"):
        kernels.conv3x3s2_c1(x, taps[:8].copy(), None, y, 2)
    with pytest.raises(ValueError, match=r"y \(9, Co\).*y \(8, 8\)"):
        kernels.conv3x3s2_c1(x, taps, None, y[:8], 2)
    with pytest.raises(ValueError, match="bias has 7 values; wt has 8 output channels"):
        kernels.conv3x3s2_c1(x, taps, randn(7), y, 2)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n_q,n_kv,offset", [(1, 37, 36), (3, 300, 297), (2, 9, -1)])
def test_attention_over_bf16_kv_equals_the_widened_cache(variant: str, n_q: int, n_kv: int, offset: int) -> None:
    q = randn(n_q, 8, 64)
    k16, v16 = (reference.f32_to_bf16(randn(n_kv, 2, 64)) for _ in range(2))
    k32, v32 = reference.bf16_to_f32(k16), reference.bf16_to_f32(v16)
    want = np.empty(q.shape, np.float32)
    run(variant, "attention", q, k32, v32, 0.125, offset, want)
    for threads in (1, 2):
        got = np.full(q.shape, np.nan, np.float32)
        run(variant, "attention", q, k16, v16, 0.125, offset, got, threads=threads)
        assert np.array_equal(got, want)


def test_ops_attention_takes_a_bf16_cache() -> None:
    k16, v16 = (reference.f32_to_bf16(randn(40, 2, 32)) for _ in range(2))
    k32, v32 = reference.bf16_to_f32(k16), reference.bf16_to_f32(v16)
    for n_q in (1, 20):  # decode kernel; fused prefill kernel after widening
        q = randn(n_q, 4, 32)
        assert np.array_equal(ops.attention(q, k16, v16, 0.2, 40 - n_q), ops.attention(q, k32, v32, 0.2, 40 - n_q))
    with pytest.raises(ValueError, match="k is uint16 but v is float32"):
        ops.attention(randn(1, 4, 32), k16, v32, 0.2, None)


def test_ops_linear_many_checks_and_falls_back() -> None:
    x, w = randn(1, 8), randn(4, 8)
    ys = ops.linear_many(x[0], [w, w[:2]])
    assert [y.shape for y in ys] == [(4,), (2,)] and np.array_equal(ys[0], ops.linear(x[0], w))
    rows = ops.linear_many(randn(3, 8), [w])  # several rows: one linear per matrix
    assert rows[0].shape == (3, 4)
    with pytest.raises(ValueError, match="mix dtypes"):
        ops.linear_many(x, [w, reference.f32_to_bf16(w)])
    with pytest.raises(ValueError, match="1 to 8 weights"):
        ops.linear_many(x, [w] * 9)
    with pytest.raises(ValueError, match=r"ws\[1\] has shape \(4, 7\)"):
        ops.linear_many(x, [w, randn(4, 7)])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("m,n,k", [(1, 1024, 1024), (1, 3072, 1024), (1, 1024, 3072), (3, 257, 1031), (4, 64, 128),
                                   (8, 100, 61), (1, 5, 7), (1, 1031, 1033)])
def test_linear_bf16_and_f32_match_generic(variant: str, m: int, n: int, k: int) -> None:
    x = randn(m, k)
    w32 = randn(n, k, scale=0.05)
    w16 = reference.f32_to_bf16(w32)
    bias = randn(n)
    for w, fn in ((w16, "linear_bf16"), (w32, "linear_f32")):
        w64 = (reference.bf16_to_f32(w) if fn == "linear_bf16" else w).astype(np.float64)
        want, bound = x.astype(np.float64) @ w64.T + bias, linear_bound(x, w64, bias)
        ys = {}
        for threads in (1, 2, 3):  # 3: uneven shares and quarters with remainders
            y = np.empty((m, n), np.float32)
            run(variant, fn, x, w, bias, y, threads=threads)
            ys[threads] = y
        assert np.array_equal(ys[1], ys[2]) and np.array_equal(ys[1], ys[3]), "thread count changed the result"
        g = np.empty((m, n), np.float32)
        run("generic", fn, x, w, bias, g)
        assert_within(ys[2], want, bound, fn)
        assert_within(g, want, bound, f"generic {fn}")


@pytest.mark.parametrize("variant", VARIANTS)
def test_bf16_conversions_match_generic_exactly(variant: str) -> None:
    bits = RNG.integers(0, 1 << 32, 100003, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    for fn, src, dtype in (("f32_to_bf16", x, np.uint16), ("round_bf16", x, np.float32),
                           ("bf16_to_f32", (bits >> 16).astype(np.uint16), np.float32)):
        out, ref = np.empty(src.shape, dtype), np.empty(src.shape, dtype)
        run(variant, fn, src, out)
        run("generic", fn, src, ref)
        assert np.array_equal(out.view(np.uint8), ref.view(np.uint8))
    want = reference.f32_to_bf16(x)
    out = np.empty(x.shape, np.uint16)
    run(variant, "f32_to_bf16", x, out)
    assert np.array_equal(out, want)


@pytest.mark.parametrize("variant", VARIANTS)
def test_norm_rope_activations_match_generic(variant: str) -> None:
    x = randn(37, 1031, scale=3.0)
    w = randn(1031)
    outs = {}
    for v in ("generic", variant):
        y = np.empty_like(x)
        run(v, "rms_norm", x, w, 1e-6, y)
        outs[v] = y
    for v in ("generic", variant):
        assert_within(outs[v], *rms_norm_bounded(x, w, 1e-6), f"{v} rms_norm")
    b = randn(1031)
    shifted = x + 5.0  # a mean far from zero, where a float32 one-pass variance would cancel
    for v in ("generic", variant):
        y = np.empty_like(x)
        run(v, "layer_norm", shifted, w, b, 1e-5, y)
        outs[v] = y
    for v in ("generic", variant):
        assert_within(outs[v], *layer_norm_bounded(shifted, w, b, 1e-5), f"{v} layer_norm")
    q = randn(9, 16, 128)
    cos, sin = randn(9, 128), randn(9, 128)
    for v in ("generic", variant):
        y = np.empty_like(q)
        run(v, "rope", q, cos, sin, y)
        outs[v] = y
    assert_within(outs[variant], *rope_bounded(q, cos, sin), "rope")
    flat = randn(50001, scale=6.0)
    up = randn(50001)
    for fn, args, ref in (("gelu", (flat,), reference.gelu(flat)), ("silu", (flat,), reference.silu(flat)),
                          ("swiglu", (flat, up), reference.swiglu(flat, up))):
        y = np.empty_like(flat)
        run(variant, fn, *args, y)
        assert np.abs(y - ref).max() <= 2e-6 * np.abs(ref).max(), fn


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n_q,n_kv,causal", [(1, 300, 299), (1, 300, None), (4, 64, 60), (3, 5, 0)])
def test_attention_decode_matches_generic_and_reference(variant: str, n_q: int, n_kv: int, causal) -> None:
    q, k, v = randn(n_q, 16, 128), randn(n_kv, 8, 128), randn(n_kv, 8, 128)
    scale = 128**-0.5
    got = {}
    for threads in (1, 2, 3, 8):  # kv heads split in 1, 2, 3 (uneven) and 8 shares
        out = np.full_like(q, np.nan)
        run(variant, "attention", q, k, v, scale, -1 if causal is None else causal, out, threads=threads)
        got[threads] = out
    assert all(np.array_equal(got[1], got[t]) for t in (2, 3, 8)), "thread count changed the result"
    assert_within(got[2], attention_exact(q, k, v, scale, causal), attention_bound(q, k, v, scale, causal))


def test_env_var_forces_generic() -> None:
    env = dict(os.environ, ONESPEECH_KERNELS="generic")
    out = subprocess.run(
        [sys.executable, "-c", "import onespeech.kernels as k; print(k.info()['variant'])"],
        env=env, capture_output=True, text=True, check=True,
    )
    assert out.stdout.strip() == "generic"


def test_info_reports_variant_openmp_threads_blas() -> None:
    i = onespeech.kernels.info()
    # the best built variant, unless ONESPEECH_KERNELS chose a supported one (the generic CI run)
    forced = os.environ.get(cpu.ENV_VAR, "").strip().lower()
    assert i["variant"] == ops._kernels.VARIANT == (forced if forced in VARIANTS else VARIANTS[0])
    assert isinstance(i["openmp"], bool) and i["threads"] >= 1
    assert "generic" in i["supported"]
    assert "kernels " in onespeech.kernels.describe()


@pytest.mark.parametrize("variant", VARIANTS)
def test_threads_setting_changes_the_threads_that_run(variant: str) -> None:
    kern = cpu.load_variant(variant)
    assert kern.parallel_threads(1) == 1
    if not kern.OPENMP:
        pytest.skip("built without OpenMP: kernels run on one thread")
    assert kern.parallel_threads(2) == 2
    assert kern.parallel_threads(3) == 3  # not capped by the core count: threads are what the user asked
