"""The unpacked float32 GEMM (`gemm_f32`, y = x @ w.T + bias) of every compiled variant.

Each variant against float64 numpy within the float32 error bound of any
summation order (`f32bounds.linear_bound`), on shapes that leave
remainders in every direction (rows of x and w not multiples of the register
tile, K not a multiple of the vector width or of the K block), and bit-identical
results whatever the thread count or the task split.
"""

from __future__ import annotations

import numpy as np
import pytest
from f32bounds import assert_within, linear_bound

from onespeech.kernels import cpu, ops

VARIANTS = [v for v in cpu.supported_variants() if cpu.load_variant(v) is not None]
pytestmark = pytest.mark.skipif(not VARIANTS, reason="compiled kernels are not built")
RNG = np.random.default_rng(0)  # reseeded for each test by conftest._per_test_seed

# (M, N, K): 1..70 each, around and off the 4 x 3 tile and the 8 / 16 lanes
SHAPES = [(1, 1, 1), (2, 5, 7), (3, 4, 8), (4, 3, 16), (5, 7, 17), (7, 2, 33), (8, 9, 64), (13, 11, 70),
          (1, 70, 65), (70, 1, 31), (64, 48, 64), (69, 70, 67), (37, 29, 1)]


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def gemm(variant: str, x, w, bias, mb: int = 64, nb: int = 48, kc: int = 512, threads: int = 2) -> np.ndarray:
    y = np.full((x.shape[0], w.shape[0]), np.nan, np.float32)
    cpu.load_variant(variant).gemm_f32(x, w, bias, y, mb, nb, kc, threads)
    return y


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_gemm_matches_float64(variant: str, m: int, n: int, k: int, with_bias: bool) -> None:
    x, w = randn(m, k), randn(n, k)
    b = randn(n) if with_bias else None
    want = x.astype(np.float64) @ w.astype(np.float64).T + (0 if b is None else b.astype(np.float64))
    # kc = 16 splits every K above 16 into several blocks
    for kc in (16, 512):
        assert_within(gemm(variant, x, w, b, kc=kc), want, linear_bound(x, w, b), f"kc {kc}:")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("m,n,k", [(69, 70, 67), (130, 96, 300)])
def test_gemm_is_bit_identical_for_any_thread_count_and_split(variant: str, m: int, n: int, k: int) -> None:
    x, w, b = randn(m, k), randn(n, k), randn(n)
    one = gemm(variant, x, w, b, threads=1)
    assert np.array_equal(one, gemm(variant, x, w, b, threads=2))
    # smaller tasks (more of them, edge tiles elsewhere) sum every element the same way
    for mb, nb in ((4, 3), (5, 7), (1, 1), (1000, 1000)):
        assert np.array_equal(one, gemm(variant, x, w, b, mb=mb, nb=nb, threads=2)), (mb, nb)


@pytest.mark.parametrize("variant", VARIANTS)
def test_gemm_empty_shapes(variant: str) -> None:
    assert gemm(variant, randn(0, 5), randn(3, 5), None).shape == (0, 3)
    assert gemm(variant, randn(4, 5), randn(0, 5), None).shape == (4, 0)
    y = gemm(variant, randn(4, 0), randn(3, 0), np.arange(3, dtype=np.float32))
    assert np.array_equal(y, np.broadcast_to(np.arange(3, dtype=np.float32), (4, 3)))


@pytest.mark.parametrize("variant", VARIANTS)
# whether the kernel runs on builds of (1, 8, 16) lanes
@pytest.mark.parametrize("lead,k,by_lanes", [((2,), 67, (1, 1, 1)), ((5, 7), 67, (1, 1, 1)), ((130,), 1024, (1, 1, 1)),
                                             ((130,), 1031, (0, 1, 1)), ((200,), 3584, (0, 1, 1)),
                                             ((201,), 1031, (0, 1, 0)), ((130,), 4097, (0, 1, 0)),
                                             ((401,), 67, (0, 1, 0)), ((800,), 7680, (0, 1, 0)),
                                             ((801,), 67, (0, 0, 0))])
def test_linear_runs_the_kernel_where_it_wins(variant: str, lead: tuple[int, ...], k: int,
                                              by_lanes: tuple[int, int, int], monkeypatch) -> None:
    """Up to 400 rows with one K block on every build; AVX2 builds (8 lanes) up to 800 rows at any K;
    AVX-512 builds up to 200 rows at K <= 4096: where each was measured faster than BLAS."""
    real = cpu.load_variant(variant)
    kernel = bool(by_lanes[{1: 0, 8: 1, 16: 2}[real.LANES]])
    calls = []
    spy = type("Spy", (), {"gemm_f32": lambda *a: calls.append(1) or real.gemm_f32(*a), "LANES": real.LANES})
    monkeypatch.setattr(ops, "_kernels", spy)
    x, w, b = randn(*lead, k), randn(69, k), randn(69)
    want = x.astype(np.float64) @ w.astype(np.float64).T + b
    y = ops.linear(x, w, b)
    assert bool(calls) == kernel and y.shape == (*lead, 69)
    assert_within(y, want, linear_bound(x.reshape(-1, k), w, b).reshape(want.shape))
    # blas=True keeps BLAS's summation order
    calls.clear()
    y_blas = ops.linear(x, w, b, blas=True)
    assert not calls and np.array_equal(y_blas, (x.reshape(-1, k) @ w.T + b).reshape(*lead, 69))
    assert [a.shape for a in ops.linear_many(x, [w, w[:5]], blas=True)] == [(*lead, 69), (*lead, 5)] and not calls


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("m,n,k", SHAPES + [(130, 96, 300)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_bf16_weight_gemm_is_the_float32_gemm_on_widened_weights(variant: str, m: int, n: int, k: int,
                                                                 with_bias: bool) -> None:
    """`gemm_bf16w` widens bands of w as it goes: bit for bit `gemm_f32` on the widened matrix."""
    x, w16 = randn(m, k), ops.f32_to_bf16(randn(n, k))
    b = randn(n) if with_bias else None
    want = gemm(variant, x, ops.bf16_to_f32(w16), b, kc=16)
    for mb, nb, kc, threads in ((64, 48, 16, 2), (4, 3, 16, 1), (5, 7, 16, 2), (1000, 1000, 16, 2)):
        y = np.full((m, n), np.nan, np.float32)
        cpu.load_variant(variant).gemm_bf16w(x, w16, b, y, mb, nb, kc, threads)
        assert np.array_equal(y, want), (mb, nb, kc, threads)


def test_widened_blocks_reuse_the_kept_scratch(monkeypatch) -> None:
    """BLAS over bf16 weights widens them into this thread's kept scratch, the same memory every call."""
    real = ops._kernels

    class NoDot:
        BF16DP_NATIVE = False
        AMX_NATIVE = False

        def __getattr__(self, name):
            return getattr(real, name)

    monkeypatch.setattr(ops, "_kernels", NoDot())
    x, w16 = randn(900, 300), ops.f32_to_bf16(randn(700, 300))  # 900 rows: BLAS, not our GEMM
    first = ops.linear(x, w16)
    where = ops._scratch.u16.ctypes.data
    assert np.array_equal(ops._scratch_f32(700 * 300).reshape(700, 300), ops.bf16_to_f32(w16))
    again = ops.linear(x, w16)
    assert ops._scratch.u16.ctypes.data == where
    assert np.array_equal(first, again)  # the earlier output is not the scratch
    w64 = ops.bf16_to_f32(w16).astype(np.float64)
    assert_within(first, x.astype(np.float64) @ w64.T, linear_bound(x, w64))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("m,n,k,kernel", [(40, 69, 67, True), (40, 3000, 400, True), (400, 69, 67, True),
                                          (401, 69, 67, "avx2"), (800, 69, 67, "avx2"), (801, 69, 67, False),
                                          (40, 900, 1031, True), (200, 69, 1031, True),
                                          (200, 69, 4100, "avx2"), (201, 69, 1031, False),
                                          (401, 69, 1031, False)])
def test_bf16_weights_take_our_gemm_where_it_beats_widened_blas(variant: str, m: int, n: int, k: int,
                                                                 kernel: bool | str, monkeypatch) -> None:
    """Many rows over bf16 weights (no bf16 dot products): our GEMM widening bands in cache where a
    float32 weight takes it, on AVX2 builds up to twice the rows with K <= 1024 and up to 200 rows at
    any K (BLAS would need the weights widened first), else BLAS on widened blocks."""
    real = cpu.load_variant(variant)
    if kernel == "avx2":  # twice float32's rows, or K > 4096: builds other than AVX-512's only
        kernel = real.LANES != 16
    calls = []

    class Spy:
        BF16DP_NATIVE = False  # the float32 path, even on a CPU with VDPBF16PS

        def __getattr__(self, name):
            return getattr(real, name)

        def gemm_bf16w(self, *args):
            calls.append(args[1].shape[0])
            return real.gemm_bf16w(*args)

    monkeypatch.setattr(ops, "_kernels", Spy())
    monkeypatch.setattr(ops, "_BF16_BLOCK_BYTES", 4 * 400 * 1024)  # BLAS: blocks of 397 rows at K 1031
    x, w16 = randn(m, k), ops.f32_to_bf16(randn(n, k))
    w64 = ops.bf16_to_f32(w16).astype(np.float64)
    b = randn(n)
    y = ops.linear(x, w16, b)
    assert bool(calls) == kernel and (not kernel or sum(calls) == n)
    assert_within(y, x.astype(np.float64) @ w64.T + b, linear_bound(x, w64, b))
    calls.clear()
    y_blas = ops.linear(x, w16, b, blas=True)
    assert not calls
    assert_within(y_blas, x.astype(np.float64) @ w64.T + b, linear_bound(x, w64, b))
