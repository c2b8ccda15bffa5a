"""The bfloat16 x bfloat16 GEMM in VDPBF16PS's arithmetic (`gemm_bf16dp`, _bf16dp_impl.h).

Every built variant's portable kernel is compared bit for bit with an
independent model of the instruction written here in numpy (per 32-value step
and lane l: acc += x[2l+1] w[2l+1], then acc += x[2l] w[2l], each rounded to
float32, denormal inputs read as zero, denormal results flushed; then the 16
lanes in os_hsum's order). The AVX512_BF16 build runs the instruction itself
and must give the same bits as the portable kernel; that test needs a CPU with
AVX512_BF16 and skips elsewhere, naming why.
"""

from __future__ import annotations

import numpy as np
import pytest
from f32bounds import assert_within, linear_bound

from onespeech.kernels import cpu, ops

VARIANTS = [v for v in cpu.supported_variants() if cpu.load_variant(v) is not None]
pytestmark = pytest.mark.skipif(not VARIANTS, reason="compiled kernels are not built")
NATIVE = [v for v in VARIANTS if cpu.load_variant(v).BF16DP_NATIVE]
RNG = np.random.default_rng(0)  # reseeded for each test by conftest._per_test_seed
FLT_MIN = 2.0**-126


def native_missing() -> str:
    if "AVX512BF16" not in cpu.cpu_features():
        return "this CPU has no AVX512_BF16 (VDPBF16PS): only the portable kernel runs here"
    return "the avx512bf16 variant was not built (the compiler lacks -mavx512bf16)"


def bf16_values(*shape: int, scale: float = 1.0) -> np.ndarray:
    """float32 array of bfloat16 values."""
    return ops.bf16_to_f32(ops.f32_to_bf16((RNG.standard_normal(shape) * scale).astype(np.float32)))


def flush(a: np.ndarray) -> np.ndarray:
    return np.where(np.abs(a) < FLT_MIN, np.copysign(0.0, a), a)


def fma_f32(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32(acc + a * b) rounded once, in float64 where the sum is exact (checked), then flushed."""
    p = a * b  # two bf16 values: exact in float64
    s = acc + p
    bb = s - acc
    assert np.all((acc - (s - bb)) + (p - bb) == 0), "the model's float64 sum was not exact"
    return flush(s.astype(np.float32).astype(np.float64))


def model(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """VDPBF16PS over 32-value steps (zero-padded), 16 lanes, then the lanes in os_hsum's order."""
    m, k = x.shape
    kp = -(-k // 32) * 32
    xs = flush(np.pad(x.astype(np.float64), ((0, 0), (0, kp - k))))
    ws = flush(np.pad(w.astype(np.float64), ((0, 0), (0, kp - k))))
    acc = np.zeros((m, w.shape[0], 16))
    for k0 in range(0, kp, 32):
        for first in (1, 0):  # the odd element of each pair, then the even one
            cols = slice(k0 + first, k0 + 32, 2)
            acc = fma_f32(acc, xs[:, None, cols], ws[None, :, cols])

    def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return fma_f32(a, b, np.ones_like(b))

    a = [acc[..., lane] for lane in range(16)]
    t = [add(add(a[i], a[i + 8]), add(a[i + 4], a[i + 12])) for i in range(4)]
    y = add(add(t[0], t[2]), add(t[1], t[3]))
    if bias is not None:
        y = add(y, flush(bias.astype(np.float64))[None, :])
    return y.astype(np.float32)


def gemm(variant: str, x, w16, bias=None, *, threads: int = 2, mb: int = 8, nb: int = 6, portable: bool = False):
    y = np.full((x.shape[0], w16.shape[0]), np.nan, np.float32)
    kernels = cpu.load_variant(variant)
    scratch = np.empty(kernels.bf16dp_scratch_size(*x.shape), np.uint16)
    ok = kernels.gemm_bf16dp(x, w16, bias, y, scratch, mb, nb, threads, portable)
    assert ok
    return y


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


SHAPES = [(1, 1, 1), (2, 3, 31), (5, 7, 32), (4, 3, 33), (9, 8, 70), (6, 5, 96), (3, 11, 100)]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_portable_kernel_is_the_instruction_model(variant: str, m: int, n: int, k: int, with_bias: bool) -> None:
    x, w = bf16_values(m, k), bf16_values(n, k, scale=0.1)
    bias = RNG.standard_normal(n).astype(np.float32) if with_bias else None
    want = model(x, w, bias)
    w16 = ops.f32_to_bf16(w)
    assert same_bits(gemm(variant, x, w16, bias, portable=True), want)
    assert same_bits(gemm(variant, x, w16, bias), want)  # the build's own kernel (native where built)
    # and it is a dot product: within float32's bound of the exact value
    exact = x.astype(np.float64) @ w.astype(np.float64).T + (0 if bias is None else bias)
    assert_within(want, exact, linear_bound(x, w, bias))


def flushing_inputs(k: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """x (3, k), w (4, k) bf16 values with denormal inputs, products below the normal range, -0."""
    x, w = bf16_values(3, k), bf16_values(4, k)
    x[0, :5] = np.float32(2.0**-130)  # bf16 denormal inputs: read as zero
    x[1] = bf16_values(k) * np.float32(2.0**-70)  # products near 2**-140: below the normal range
    w[2, ::3] = np.float32(-(2.0**-127))
    x[2, 1::2] = np.float32(-0.0)
    w[3] = bf16_values(k) * np.float32(2.0**-60)  # with x[1]: sums that round to denormals and flush
    return x, w


@pytest.mark.parametrize("variant", VARIANTS)
def test_denormals_are_read_as_zero_and_flushed(variant: str) -> None:
    x, w = flushing_inputs()
    want = model(x, w, None)
    assert (want[1] == 0).any(), "the case must reach the flush"
    w16 = ops.f32_to_bf16(w)
    for portable in (True, False):
        assert same_bits(gemm(variant, x, w16, portable=portable), want)


@pytest.mark.parametrize("variant", VARIANTS)
def test_split_and_threads_do_not_change_a_bit(variant: str) -> None:
    x, w16 = bf16_values(37, 200), ops.f32_to_bf16(bf16_values(29, 200))
    bias = RNG.standard_normal(29).astype(np.float32)
    one = gemm(variant, x, w16, bias, threads=1)
    for threads, mb, nb in ((2, 8, 6), (3, 5, 7), (2, 1, 1), (2, 1000, 1000)):
        assert same_bits(gemm(variant, x, w16, bias, threads=threads, mb=mb, nb=nb), one)


@pytest.mark.parametrize("variant", VARIANTS)
def test_x_that_is_not_bf16_is_refused(variant: str) -> None:
    kernels = cpu.load_variant(variant)
    x, w16 = bf16_values(3, 40), ops.f32_to_bf16(bf16_values(5, 40))
    scratch = np.empty(kernels.bf16dp_scratch_size(3, 40), np.uint16)
    assert scratch.size == 3 * 64 + 32  # rows padded to whole 32-value steps, and room to start on a cache line
    with pytest.raises(ValueError, match=r"scratch holds 223 values; x of shape \(3, 40\) needs 224"):
        kernels.gemm_bf16dp(x, w16, None, np.empty((3, 5), np.float32), scratch[:-1], 4, 3, 2, False)
    x[2, 17] = np.nextafter(x[2, 17], np.float32(np.inf))  # low bits set: not a bfloat16 value
    y = np.full((3, 5), 7.0, np.float32)
    assert kernels.gemm_bf16dp(x, w16, None, y, scratch, 4, 3, 2, False) is False
    assert (y == 7.0).all()
    empty = np.empty((0, 5), np.float32)
    assert kernels.gemm_bf16dp(x[:0], w16, None, empty, scratch, 4, 3, 2, False) is True


@pytest.mark.skipif(not NATIVE, reason=native_missing())
@pytest.mark.parametrize("m,n,k", [(130, 96, 896), (7, 5, 3584), (13, 10, 4320), (33, 17, 45)])
def test_instruction_equals_the_portable_kernel_bit_for_bit(m: int, n: int, k: int) -> None:
    variant = NATIVE[0]
    x, w = bf16_values(m, k, scale=3.0), bf16_values(n, k, scale=0.05)
    x[0, :7] = np.float32(2.0**-130)
    x[-1] *= np.float32(2.0**-70)
    w16 = ops.f32_to_bf16(w)
    bias = RNG.standard_normal(n).astype(np.float32)
    native = gemm(variant, x, w16, bias, mb=16, nb=12)
    assert same_bits(native, gemm(variant, x, w16, bias, mb=16, nb=12, portable=True))
    assert same_bits(native, gemm("generic", x, w16, bias))


def test_ops_linear_takes_the_instruction_only_where_it_runs(monkeypatch) -> None:
    """bf16 weights, many rows: VDPBF16PS where the CPU has it and x holds bf16 values, else the float32 path."""
    x, w16 = bf16_values(40, 64), ops.f32_to_bf16(bf16_values(50, 64))
    calls = []
    real = ops._kernels

    class Spy:
        BF16DP_NATIVE = True
        AMX_NATIVE = False  # the tiles come first where they run (test_bf16amx.py)

        def __getattr__(self, name):
            return getattr(real, name)

        def gemm_bf16dp(self, *args, **kwargs):
            calls.append(1)
            return real.gemm_bf16dp(*args, **kwargs)

    monkeypatch.setattr(ops, "_kernels", Spy())
    y = ops.linear(x, w16)
    assert calls and same_bits(y, model(x, ops.bf16_to_f32(w16), None))
    calls.clear()
    x_f32 = x + np.float32(1e-3)  # not bf16 values: the products would not be exact
    y32 = ops.linear(x_f32, w16)
    w64 = ops.bf16_to_f32(w16).astype(np.float64)
    assert calls and y32.dtype == np.float32
    assert_within(y32, x_f32.astype(np.float64) @ w64.T, linear_bound(x_f32, w64))
    monkeypatch.setattr(Spy, "BF16DP_NATIVE", False)
    calls.clear()
    ops.linear(x, w16)
    assert not calls


def conv_input(n: int, h: int, w: int, c: int) -> np.ndarray:
    x = bf16_values(n, h, w, c, scale=3.0)
    x[0, 0, 0, :5] = np.float32(2.0**-130)  # denormal: read as zero
    return x


def conv(variant: str, x: np.ndarray, w16: np.ndarray, bias, *, threads: int = 2, portable: bool = False):
    n, h, w, c = x.shape
    m = n * ((h + 1) // 2) * ((w + 1) // 2)
    kernels = cpu.load_variant(variant)
    y = np.full((m, w16.shape[0]), np.nan, np.float32)
    scratch = np.empty(kernels.bf16dp_scratch_size(m, 9 * c), np.uint16)
    assert kernels.conv3x3s2_bf16dp(x, w16, bias, y, scratch, 16, 12, threads, portable)
    return y


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n,h,w,c,co", [(1, 5, 7, 4, 6), (2, 9, 6, 40, 13), (3, 4, 11, 32, 5)])
@pytest.mark.parametrize("threads", [1, 2])
def test_convolution_reads_the_patches_im2col_would_form(variant: str, n: int, h: int, w: int, c: int, co: int,
                                                          threads: int) -> None:
    """The patches go straight to the packed rows: the same bits as the product of im2col's rows."""
    x = conv_input(n, h, w, c)
    w16 = ops.f32_to_bf16(bf16_values(co, 9 * c, scale=0.05))
    bias = RNG.standard_normal(co).astype(np.float32)
    cols = ops._ref.im2col_3x3s2(x)
    expected = gemm("generic", cols, w16, bias)  # the portable definition
    assert same_bits(conv(variant, x, w16, bias, threads=threads, portable=True), expected)
    assert same_bits(conv(variant, x, w16, bias, threads=threads), expected)


@pytest.mark.parametrize("variant", VARIANTS)
def test_convolution_arguments_and_x_are_checked(variant: str) -> None:
    kernels = cpu.load_variant(variant)
    x, w16 = conv_input(1, 6, 6, 8), ops.f32_to_bf16(bf16_values(5, 72))
    scratch = np.empty(kernels.bf16dp_scratch_size(9, 72), np.uint16)
    y = np.full((9, 5), 7.0, np.float32)
    with pytest.raises(ValueError, match=r"w of shape \(Co, 72\).*w \(5, 64\)"):
        kernels.conv3x3s2_bf16dp(x, w16[:, :64].copy(), None, y, scratch, 4, 3, 2)
    with pytest.raises(ValueError, match=r"y of shape \(9, Co\).*y \(8, 5\)"):
        kernels.conv3x3s2_bf16dp(x, w16, None, y[:8], scratch, 4, 3, 2)
    with pytest.raises(ValueError, match="scratch holds 895 values; 9 rows of 72 need 896"):
        kernels.conv3x3s2_bf16dp(x, w16, None, y, scratch[:-1], 4, 3, 2)
    x[0, 5, 5, 7] = np.nextafter(x[0, 5, 5, 7], np.float32(np.inf))  # not a bfloat16 value
    assert kernels.conv3x3s2_bf16dp(x, w16, None, y, scratch, 4, 3, 2) is False
    assert (y == 7.0).all()


def test_ops_convolution_takes_the_instruction_only_where_it_runs(monkeypatch) -> None:
    """bf16 kernels, K of at least one step, more rows than the product-by-rows kernel: VDPBF16PS on packed patches."""
    calls: list[str] = []
    real = ops._kernels

    class Spy:
        BF16DP_NATIVE = True
        AMX_NATIVE = False  # the tiles come first where they run (test_bf16amx.py)

        def __getattr__(self, name):
            return getattr(real, name)

        def conv3x3s2_bf16dp(self, *args, **kwargs):
            calls.append("conv")
            return real.conv3x3s2_bf16dp(*args, **kwargs)

    monkeypatch.setattr(ops, "_kernels", Spy())
    x = conv_input(2, 12, 10, 8)
    w16 = ops.f32_to_bf16(bf16_values(24, 9 * 8, scale=0.05))
    bias16 = ops.f32_to_bf16(bf16_values(24))
    y = ops.conv3x3s2(x, w16, bias16)
    assert calls == ["conv"]
    assert same_bits(y.reshape(60, 24), model(ops._ref.im2col_3x3s2(x), ops.bf16_to_f32(w16), ops.bf16_to_f32(bias16)))
    calls.clear()
    ops.conv3x3s2(conv_input(2, 12, 10, 3), ops.f32_to_bf16(bf16_values(24, 27)))  # K = 27: less than a step
    ops.conv3x3s2(conv_input(1, 4, 4, 8), w16)  # 4 output rows: the product-by-rows kernel
    x_f32 = x + np.float32(1e-3)  # not bf16 values: packed, refused, then the float32 path
    ops.conv3x3s2(x_f32, w16)
    assert calls == ["conv"]
    monkeypatch.setattr(Spy, "BF16DP_NATIVE", False)
    calls.clear()
    ops.conv3x3s2(x, w16)
    assert not calls


@pytest.mark.parametrize("variant", VARIANTS)
def test_rounding_within_the_tasks_is_rounding_the_result(variant: str) -> None:
    """to_bf16 rounds each task's outputs in its cache: exactly round_bf16 of the plain result."""
    kernels = cpu.load_variant(variant)
    x, w16 = bf16_values(37, 200), ops.f32_to_bf16(bf16_values(29, 200))
    bias = RNG.standard_normal(29).astype(np.float32)
    scratch = np.empty(kernels.bf16dp_scratch_size(37, 200), np.uint16)
    image = conv_input(2, 9, 6, 40)
    cw16 = ops.f32_to_bf16(bf16_values(13, 360, scale=0.05))
    cscratch = np.empty(kernels.bf16dp_scratch_size(30, 360), np.uint16)
    for portable in (True, False):
        plain = gemm(variant, x, w16, bias, portable=portable)
        y = np.full_like(plain, np.nan)
        assert kernels.gemm_bf16dp(x, w16, bias, y, scratch, 8, 6, 2, portable, to_bf16=True)
        assert not np.array_equal(plain, ops.round_bf16(plain))
        assert same_bits(y, ops.round_bf16(plain))
        plain = conv(variant, image, cw16, bias[:13], portable=portable)
        y = np.full_like(plain, np.nan)
        assert kernels.conv3x3s2_bf16dp(image, cw16, bias[:13], y, cscratch, 16, 12, 2, portable, to_bf16=True)
        assert same_bits(y, ops.round_bf16(plain))
