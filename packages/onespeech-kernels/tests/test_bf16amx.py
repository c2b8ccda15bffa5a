"""The bfloat16 x bfloat16 GEMM in AMX's arithmetic (`gemm_bf16amx`, _bf16amx_impl.h).

Every built variant's portable kernel is compared bit for bit with an
independent model of TDPBF16PS written here in numpy (per 32-value step: an
even chain and an odd chain from +0 over the step's 16 pairs, their sum added
to the accumulator; each operation rounded to float32, denormal inputs read as
zero, denormal results flushed). The amx build runs the tiles themselves where
the CPU has AMX-BF16 and the OS grants the tile state, and must give the same
bits as the portable kernel; those tests skip elsewhere, naming why.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from f32bounds import assert_within, linear_bound
from test_bf16dp import bf16_values, flush, flushing_inputs, fma_f32, same_bits

from onespeech.kernels import cpu, ops

VARIANTS = [v for v in cpu.supported_variants() if cpu.load_variant(v) is not None]
pytestmark = pytest.mark.skipif(not VARIANTS, reason="compiled kernels are not built")
TILES = [v for v in VARIANTS if cpu.load_variant(v).AMX_NATIVE]
RNG = np.random.default_rng(0)  # reseeded for each test by conftest._per_test_seed


def tiles_missing() -> str:
    if "AMX_BF16" not in cpu.cpu_features():
        return "this CPU has no AMX-BF16 (TDPBF16PS): only the portable kernel runs here"
    if "amx" not in VARIANTS:
        return "the amx variant was not built (the compiler lacks -mamx-bf16)"
    return "the OS did not grant this process the AMX tile state"


def model(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """TDPBF16PS over 32-value steps: two chains per step, their sum into the accumulator, then the bias."""
    xs, ws = flush(x.astype(np.float64)), flush(w.astype(np.float64))

    def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return fma_f32(a, b, np.ones_like(b))

    acc = np.zeros((x.shape[0], w.shape[0]))
    for k0 in range(0, x.shape[1], 32):
        even = np.zeros_like(acc)
        odd = np.zeros_like(acc)
        for k in range(k0, k0 + 32, 2):
            even = fma_f32(even, xs[:, None, k], ws[None, :, k])
            odd = fma_f32(odd, xs[:, None, k + 1], ws[None, :, k + 1])
        acc = add(acc, add(even, odd))
    if bias is not None:
        acc = add(acc, flush(bias.astype(np.float64))[None, :])
    return acc.astype(np.float32)


def gemm(variant: str, x, w16, bias=None, *, threads: int = 2, portable: bool = False):
    y = np.full((x.shape[0], w16.shape[0]), np.nan, np.float32)
    kernels = cpu.load_variant(variant)
    scratch = np.empty(kernels.amx_scratch_size(*x.shape, threads), np.uint16)
    assert kernels.gemm_bf16amx(x, w16, bias, y, scratch, threads, portable)
    return y


SHAPES = [(1, 1, 32), (2, 3, 64), (5, 17, 32), (17, 33, 96), (3, 11, 128)]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_portable_kernel_is_the_tile_model(variant: str, m: int, n: int, k: int, with_bias: bool) -> None:
    x, w = bf16_values(m, k), bf16_values(n, k, scale=0.1)
    bias = RNG.standard_normal(n).astype(np.float32) if with_bias else None
    want = model(x, w, bias)
    w16 = ops.f32_to_bf16(w)
    assert same_bits(gemm(variant, x, w16, bias, portable=True), want)
    assert same_bits(gemm(variant, x, w16, bias), want)  # the build's own kernel (tiles where granted)
    exact = x.astype(np.float64) @ w.astype(np.float64).T + (0 if bias is None else bias)
    assert_within(want, exact, linear_bound(x, w, bias))


@pytest.mark.parametrize("variant", VARIANTS)
def test_denormals_are_read_as_zero_and_flushed(variant: str) -> None:
    x, w = flushing_inputs()
    want = model(x, w, None)
    assert (want[1] == 0).any(), "the case must reach the flush"
    w16 = ops.f32_to_bf16(w)
    for portable in (True, False):
        assert same_bits(gemm(variant, x, w16, portable=portable), want)


@pytest.mark.parametrize("variant", VARIANTS)
def test_k_scratch_and_x_are_checked(variant: str) -> None:
    kernels = cpu.load_variant(variant)
    x, w16 = bf16_values(3, 64), ops.f32_to_bf16(bf16_values(5, 64))
    y = np.full((3, 5), 7.0, np.float32)
    scratch = np.empty(kernels.amx_scratch_size(3, 64, 2), np.uint16)
    # whole blocks of 16 x rows, two bands of 32 w rows per thread, room to start on a cache line
    assert scratch.size == 16 * 64 + 2 * 2 * 32 * 64 + 32
    with pytest.raises(ValueError, match="multiple of 32, got 40"):
        kernels.gemm_bf16amx(x[:, :40].copy(), w16[:, :40].copy(), None, y, scratch, 2, False)
    with pytest.raises(ValueError, match=r"scratch holds 9247 values; x of shape \(3, 64\) on 2 threads needs 9248"):
        kernels.gemm_bf16amx(x, w16, None, y, scratch[:-1], 2, False)
    for portable in (False, True):
        bad = x.copy()
        bad[2, 17] = np.nextafter(bad[2, 17], np.float32(np.inf))  # low bits set: not a bfloat16 value
        assert kernels.gemm_bf16amx(bad, w16, None, y, scratch, 2, portable) is False
        assert (y == 7.0).all()
    assert kernels.gemm_bf16amx(x[:0], w16, None, np.empty((0, 5), np.float32), scratch, 2, False) is True


def test_ops_keeps_one_scratch_per_thread() -> None:
    first = ops._scratch_u16(1000)
    assert ops._scratch_u16(500) is first  # smaller: the same buffer
    bigger = ops._scratch_u16(5000)
    assert bigger.size >= 5000 and ops._scratch_u16(1000) is bigger
    seen = []
    thread = threading.Thread(target=lambda: seen.append(ops._scratch_u16(1000)))
    thread.start()
    thread.join()
    assert seen[0] is not bigger  # another thread never shares it


@pytest.mark.skipif(not TILES, reason=tiles_missing())
# (200, 70, 4320) and (300, 20, 4320): several groups of x rows (a group's tiles fill half of L2),
# several bands or one, a ragged last band; tasks split mid-group between threads
@pytest.mark.parametrize("m,n,k", [(130, 96, 896), (7, 5, 3584), (13, 10, 4320), (33, 17, 64), (300, 50, 1024),
                                   (16, 16, 32), (129, 897, 128), (200, 70, 4320), (300, 20, 4320)])
def test_tiles_equal_the_portable_kernel_bit_for_bit(m: int, n: int, k: int) -> None:
    variant = TILES[0]
    x, w = bf16_values(m, k, scale=3.0), bf16_values(n, k, scale=0.05)
    x[0, :7] = np.float32(2.0**-130)
    x[-1] *= np.float32(2.0**-70)
    w16 = ops.f32_to_bf16(w)
    bias = RNG.standard_normal(n).astype(np.float32)
    tiles = gemm(variant, x, w16, bias)
    assert same_bits(tiles, gemm(variant, x, w16, bias, portable=True))
    assert same_bits(tiles, gemm("generic", x, w16, bias))
    assert same_bits(tiles, gemm(variant, x, w16, bias, threads=1))


def conv_input(n: int, h: int, w: int, c: int) -> np.ndarray:
    x = bf16_values(n, h, w, c, scale=3.0)
    x[0, 0, 0, :5] = np.float32(2.0**-130)  # denormal: read as zero
    return x


def conv(variant: str, x: np.ndarray, w16: np.ndarray, bias, *, threads: int = 2) -> np.ndarray:
    n, h, w, c = x.shape
    m = n * ((h + 1) // 2) * ((w + 1) // 2)
    y = np.full((m, w16.shape[0]), np.nan, np.float32)
    kernels = cpu.load_variant(variant)
    scratch = np.empty(kernels.amx_scratch_size(m, 9 * c, threads), np.uint16)
    assert kernels.conv3x3s2_bf16amx(x, w16, bias, y, scratch, threads)
    return y


@pytest.mark.skipif(not TILES, reason=tiles_missing())
@pytest.mark.parametrize("n,h,w,c,co", [(2, 13, 10, 64, 40), (1, 7, 5, 32, 17), (3, 16, 9, 96, 33), (1, 2, 1, 32, 3)])
@pytest.mark.parametrize("threads", [1, 2])
def test_convolution_reads_the_patches_im2col_would_form(n: int, h: int, w: int, c: int, co: int,
                                                          threads: int) -> None:
    """The patches are packed straight from the images: the same bits as the product of im2col's rows."""
    x = conv_input(n, h, w, c)
    w16 = ops.f32_to_bf16(bf16_values(co, 9 * c, scale=0.05))
    bias = RNG.standard_normal(co).astype(np.float32)
    cols = ops._ref.im2col_3x3s2(x)
    got = conv(TILES[0], x, w16, bias, threads=threads)
    assert same_bits(got, gemm("generic", cols, w16, bias))  # the portable definition
    assert same_bits(got, gemm(TILES[0], cols, w16, bias))


@pytest.mark.skipif(not TILES, reason=tiles_missing())
def test_convolution_arguments_and_x_are_checked() -> None:
    kernels = cpu.load_variant(TILES[0])
    x, w16 = conv_input(1, 6, 6, 32), ops.f32_to_bf16(bf16_values(8, 9 * 32))
    scratch = np.empty(kernels.amx_scratch_size(9, 9 * 32, 2), np.uint16)
    y = np.full((9, 8), 7.0, np.float32)
    with pytest.raises(ValueError, match="C a multiple of 32.*got C = 40"):
        kernels.conv3x3s2_bf16amx(conv_input(1, 6, 6, 40), ops.f32_to_bf16(bf16_values(8, 360)), None, y,
                                  scratch, 2)
    with pytest.raises(ValueError, match=r"y of shape \(9, Co\).*y \(8, 8\)"):
        kernels.conv3x3s2_bf16amx(x, w16, None, y[:8], scratch, 2)
    with pytest.raises(ValueError, match="scratch holds"):
        kernels.conv3x3s2_bf16amx(x, w16, None, y, scratch[:-1], 2)
    x[0, 5, 5, 31] = np.nextafter(x[0, 5, 5, 31], np.float32(np.inf))  # not a bfloat16 value
    assert kernels.conv3x3s2_bf16amx(x, w16, None, y, scratch, 2) is False
    assert (y == 7.0).all()


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v not in TILES])
def test_convolution_without_tiles_is_refused(variant: str) -> None:
    kernels = cpu.load_variant(variant)
    y = np.empty((9, 8), np.float32)
    with pytest.raises(RuntimeError, match="AMX tiles only"):
        kernels.conv3x3s2_bf16amx(conv_input(1, 6, 6, 32), ops.f32_to_bf16(bf16_values(8, 288)), None, y,
                                  np.empty(1, np.uint16), 2)


def test_ops_convolution_takes_the_tiles_where_they_run(monkeypatch) -> None:
    """bf16 kernels, C whole tile steps, more rows than the product-by-rows kernel takes: the tiles."""
    calls: list[str] = []
    real = ops._kernels

    tiles = bool(getattr(real, "AMX_NATIVE", False))  # the build this process loaded (ONESPEECH_KERNELS)

    class Spy:
        AMX_NATIVE = tiles

        def __getattr__(self, name):
            return getattr(real, name)

        def conv3x3s2_bf16amx(self, *args):
            calls.append("conv")
            return real.conv3x3s2_bf16amx(*args)

    monkeypatch.setattr(ops, "_kernels", Spy())
    x = conv_input(2, 12, 10, 32)
    w16 = ops.f32_to_bf16(bf16_values(24, 9 * 32, scale=0.05))
    bias16 = ops.f32_to_bf16(bf16_values(24))
    y = ops.conv3x3s2(x, w16, bias16)
    assert y.shape == (2, 6, 5, 24)
    assert same_bits(y.reshape(60, 24), ops.linear(ops._ref.im2col_3x3s2(x), w16, bias16))
    assert calls == (["conv"] if tiles else [])
    calls.clear()
    ops.conv3x3s2(conv_input(2, 12, 10, 40), ops.f32_to_bf16(bf16_values(24, 9 * 40)))  # C = 40: im2col rows
    ops.conv3x3s2(conv_input(1, 4, 4, 32), w16)  # 4 output rows: the product-by-rows kernel
    assert not calls


@pytest.mark.skipif(not TILES, reason=tiles_missing())
def test_the_manuals_single_chain_is_not_what_the_tiles_compute() -> None:
    """Why the definition is two chains: Intel's pseudo-code (one chain over the pairs,
    odd element first, as VDPBF16PS) disagrees with the tiles in about half the outputs."""
    x, w = bf16_values(32, 128, scale=3.0), bf16_values(32, 128, scale=0.05)
    tiles = gemm(TILES[0], x, ops.f32_to_bf16(w))
    one_chain = np.zeros((32, 32))
    xs, ws = x.astype(np.float64), w.astype(np.float64)
    for k in range(0, 128, 2):
        for j in (k + 1, k):
            one_chain = fma_f32(one_chain, xs[:, None, j], ws[None, :, j])
    assert same_bits(tiles, model(x, w, None))
    assert (tiles != one_chain.astype(np.float32)).mean() > 0.3


def test_ops_linear_takes_the_tiles_where_they_run(monkeypatch) -> None:
    """bf16 weights, many rows: the tiles where granted and K is whole steps, else VDPBF16PS, else float32."""
    calls: list[str] = []
    real = ops._kernels

    class Spy:
        AMX_NATIVE = True
        BF16DP_NATIVE = True

        def __getattr__(self, name):
            return getattr(real, name)

        def gemm_bf16amx(self, *args):
            calls.append("amx")
            return real.gemm_bf16amx(*args)

        def gemm_bf16dp(self, *args, **kwargs):
            calls.append("dp")
            return real.gemm_bf16dp(*args, **kwargs)

    monkeypatch.setattr(ops, "_kernels", Spy())
    x, w16 = bf16_values(40, 64), ops.f32_to_bf16(bf16_values(50, 64))
    y = ops.linear(x, w16)
    assert calls == ["amx"] and same_bits(y, model(x, ops.bf16_to_f32(w16), None))
    calls.clear()
    ops.linear(x[:, :48].copy(), w16[:, :48].copy())  # K = 48: not whole tile steps
    assert calls == ["dp"]
    calls.clear()
    x_f32 = x + np.float32(1e-3)  # not bf16 values: the float32 path
    y32 = ops.linear(x_f32, w16)
    w64 = ops.bf16_to_f32(w16).astype(np.float64)
    assert calls == ["amx"]
    assert_within(y32, x_f32.astype(np.float64) @ w64.T, linear_bound(x_f32, w64))
    monkeypatch.setattr(Spy, "AMX_NATIVE", False)
    monkeypatch.setattr(Spy, "BF16DP_NATIVE", False)
    calls.clear()
    ops.linear(x, w16)
    assert not calls


def test_amx_build_is_chosen_only_where_the_tiles_are_granted(monkeypatch) -> None:
    class Build:
        def __init__(self, name: str, granted: bool) -> None:
            self.VARIANT, self.AMX_NATIVE = name, granted
            self.RUNNABLE = granted or name != "amx"  # as each compiled module sets it

    monkeypatch.delenv(cpu.ENV_VAR, raising=False)
    monkeypatch.setattr(cpu, "supported_variants", lambda: ["amx", "avx512bf16", "generic"])
    for granted, chosen in ((True, "amx"), (False, "avx512bf16")):
        monkeypatch.setattr(cpu, "load_variant", lambda name, g=granted: Build(name, g and name == "amx"))
        assert cpu.select_variant().VARIANT == chosen
    monkeypatch.setenv(cpu.ENV_VAR, "amx")  # asked for, not granted: said, and the next variant runs
    with pytest.warns(UserWarning, match="did not grant this process the AMX tile state"):
        assert cpu.select_variant().VARIANT == "avx512bf16"
    monkeypatch.setenv(cpu.ENV_VAR, "generic")
    assert cpu.select_variant().VARIANT == "generic"
