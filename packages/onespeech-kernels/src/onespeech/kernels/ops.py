"""The math of the models: the only module model code imports for computation.

Every op checks its inputs once (dtype, rank, matching sizes) and then runs
either numpy (float32 GEMM goes to numpy's BLAS where it wins) or a
compiled kernel chosen at import by CPU features (see `onespeech.kernels.info`).
Inputs are float32 unless said; bfloat16 tensors are uint16 arrays holding the
bfloat16 bit patterns. Outputs are new C-contiguous float32 arrays.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np

from . import cpu as _cpu
from . import reference as _ref
from .threads import get_threads

# the compiled kernels chosen by CPU features (None: not built, numpy only)
_kernels: Any = _cpu.select_variant()  # a compiled module (no type stubs), or None

# batches up to this many rows go through the compiled bf16 GEMV (weights read
# once, activations reused from cache); larger ones run AMX tiles or VDPBF16PS where
# the CPU has them and x holds bf16 values (`_linear_bf16_dot`), else the float32 product
# the same shape takes, on exactly widened weights (`_linear_bf16_blocked`)
_BF16_GEMV_MAX_ROWS = 16
# float32 weights: compiled GEMV for single-row (decode) products, else BLAS
_F32_GEMV_MAX_ROWS = 1
# float32 products with more than one row run our unpacked GEMM (`gemm_f32`)
# instead of BLAS up to this many rows and K <= _GEMM_KC: there the whole K
# is one block (a 4-row x tile stays in L1, one reduction per output) and BLAS
# pays most for packing w on every call. Measured (2 threads, AVX2,
# benchmarks/bench_kernels.py --only gemm, three runs, noisy machine): about
# 1.03-1.15x of OpenBLAS at M 130-390 with K 896 / 1024; 0.89-1.03x at M 420,
# 0.7-0.96x with K 3072-7680 or M 800-1600
_GEMM_MAX_ROWS = 400
# AVX-512 builds (16 lanes, 6 x 4 tiles) also win with a few K blocks at up to
# 200 rows. Measured (2 threads, Zen 4, bench_kernels.py --only gemm, 5 rounds):
# 1.10x OpenBLAS at 130 x 3584 x 896, 1.19x at 150 x 3072 x 1024, the same at
# 208 x 7680 x 896, 0.92-0.97x at 390-420 rows, 0.85-0.92x at 800-1600 rows
_GEMM_LONG_K_MAX_ROWS = 200
_GEMM_LONG_K_MAX = 4096
# bf16 weights where bf16 dot products do not run: BLAS needs them widened to
# float32 first (a pass over every weight byte), our GEMM widens bands in cache,
# so on AVX2 builds ours wins up to twice the rows with K <= 1024. Measured against
# widened BLAS (2 threads, Zen 4, weights read from memory, 20 interleaved pairs):
# 0.87-0.94 at 410-800 x 1024 x 2048-3072; in the 0.6B model on an Intel Xeon
# (OpenBLAS's Haswell kernels, as on an AVX2-only CPU) prefill 0.95 at 10 s, 1.02
# at 30 s. AVX-512 builds keep float32's limits: the CPUs that run them without
# bf16 dot products are Intel's, and there OpenBLAS's AVX-512 kernels won at 390-410
# rows (the 0.6B model on an Intel Xeon, 4 interleaved pairs: twice the rows made
# the 30 s encoder 1.035x and the prefill 1.07x slower)
_GEMM_WIDENED_MAX_ROWS = 800
# and with K > 1024, AVX2 builds widen in cache up to _GEMM_LONG_K_MAX_ROWS at any K.
# Measured against widened BLAS on an AVX2-only AMD EPYC (2 threads, weights read
# from memory, 15-20 interleaved calls): 0.77-0.84 at 130-150 x 3072-4320, 0.93-0.97
# at 208 x 7680 x 896; 0.94-1.06 at 390-420 rows, so not there. In the 0.6B model
# at 10 s (three runs of 6-12 interleaved pairs): BF16 encoder 0.96-0.98x, prefill 0.95-0.96x
# AVX2 builds (8 lanes) take our GEMM up to this many rows at any K, float32 weights.
# OpenBLAS's small-M products lose most where K is long: per product shape of the
# encoder, the prefill and the aligner, against a 3072-cube BLAS product interleaved
# with it (2 threads, AMD EPYC AVX2 shared with other jobs, benchmarks/flops.py
# --breakdown and three interleaved rounds per shape), ours / BLAS reached of that
# rate: 0.79 / 0.24 at 130 x 896 x 3584, 0.91 / 0.33 at 148 x 1024 x 3072, 0.74 /
# 0.32 at 148 x 1024 x 2048, 0.86 / 0.38 at 130 x 896 x 7680, 0.87 / 0.46 at
# 416 x 480 x 4320, 0.94 / 0.79 at 400 x 1024 x 3072, 0.90 / 0.81 at 732 x 1024 x
# 3072, 0.98 / 0.79 at 732 x 1024 x 1024; mixed at 1000 rows (0.83-0.90 / 0.80-0.97)
# and BLAS ahead at 1600 x 480 x 4320 (0.84 / 1.13)
_GEMM_EIGHT_LANES_MAX_ROWS = 800
# its K block: a tile of 4 x rows (16 KiB) and 3 w rows (12 KiB) fit L1;
# fixed, never derived from the thread count, since the summation order of
# every output depends on it
_GEMM_KC = 1024
# bytes of one band of w rows (nb x kc float32) per task: 48 rows at
# K >= 1024 measured best (12-96 tried; more rows cost TLB and prefetch)
_GEMM_BAND_BYTES = 192 << 10
# weight rows widened per BLAS block: 16 MiB of float32 hold every decoder matrix and
# all encoder ones but the 896 x 7680 projection whole, so a product is one BLAS call
# (4 MiB blocks cost 20-55 % over float32 BLAS at prefill shapes, 16 MiB 5-22 %)
_BF16_BLOCK_BYTES = 16 << 20
# queries up to which attention runs the compiled per-row kernel (decode);
# longer ones (prefill, encoder, aligner) run the fused kernel
_ATTENTION_MAX_QUERIES = 8
# fused attention: score rows (queries x the heads of one kv head) per task;
# their scores (rows x n_kv float32) are the task's scratch, and each chunk
# of keys and values is read once per task for all of them
_ATTENTION_TASK_ROWS = 48
# keys per chunk: a chunk of values (16 KiB at head_dim 64) stays in L1
# while every row tile of the task runs over it
_ATTENTION_KEY_CHUNK = 64

__all__ = [
    "argmax",
    "attention",
    "bf16_to_f32",
    "conv3x3s2",
    "embedding",
    "f32_to_bf16",
    "gelu",
    "im2col_3x3s2",
    "layer_norm",
    "linear",
    "linear_int8",
    "linear_many",
    "linear_rows",
    "rms_norm",
    "rope",
    "round_bf16",
    "silu",
    "quantize_int8",
    "softmax",
    "swiglu",
]


# input checks ---------------------------------------------------------------------


def _array(name: str, a: object, dtypes: tuple[type, ...] = (np.float32,)) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(a).__name__}")
    if a.dtype.type not in dtypes:
        allowed = " or ".join(np.dtype(d).name for d in dtypes)
        raise ValueError(f"{name} has dtype {a.dtype}; expected {allowed}")
    # (np.ascontiguousarray would turn a 0-d array into a 1-d one)
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _ndim(name: str, a: np.ndarray, ndim: int, layout: str) -> None:
    if a.ndim != ndim:
        raise ValueError(f"{name} has shape {a.shape}; expected {ndim} dims {layout}")


def _weight(name: str, w: object) -> np.ndarray:
    return _array(name, w, (np.float32, np.uint16))


def _vector(name: str, v: object, size: int) -> np.ndarray:
    v = _weight(name, v)
    if v.shape != (size,):
        raise ValueError(f"{name} has shape {v.shape}; expected ({size},)")
    return v


def _matrix_for(name: str, w: object, x: np.ndarray) -> np.ndarray:
    """A weight (N, K) checked against activations x (..., K)."""
    w = _weight(name, w)
    _ndim(name, w, 2, "(N, K)")
    if x.ndim < 1 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"x has shape {x.shape} but {name} has shape {w.shape}; x[..., K] needs K={w.shape[1]}")
    return w


def _eps(eps: object) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"eps={eps!r} is invalid; expected a float >= 0")
    return float(eps)


# bfloat16 -------------------------------------------------------------------------


def bf16_to_f32(u16: np.ndarray) -> np.ndarray:
    """Expand bfloat16 bit patterns exactly to float32.

    Parameters
    ----------
    u16 : ndarray[uint16], any shape

    Returns
    -------
    ndarray[float32], same shape
    """
    u16 = _array("u16", u16, (np.uint16,))
    if _kernels is None:
        return _ref.bf16_to_f32(u16)
    out = _empty(u16.shape)
    _kernels.bf16_to_f32(u16.reshape(-1), out.reshape(-1), get_threads())
    return out


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 to the nearest-even bfloat16 (NaN -> 0x7FC0), as torch does.

    Parameters
    ----------
    x : ndarray[float32], any shape

    Returns
    -------
    ndarray[uint16], same shape (bfloat16 bit patterns)
    """
    x = _array("x", x)
    if _kernels is None:
        return _ref.f32_to_bf16(x)
    out = np.empty(x.shape, np.uint16)
    _kernels.f32_to_bf16(x.reshape(-1), out.reshape(-1), get_threads())
    return out


def round_bf16(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Round float32 values to bfloat16 precision, keeping float32 storage.

    Parameters
    ----------
    x : ndarray[float32], any shape
    out : ndarray[float32], C-contiguous, x's shape, or None
        Where to write the result; may be ``x`` itself (BF16 decoding rounds every
        operator's fresh output in place: no allocation per call).

    Returns
    -------
    ndarray[float32], same shape (``out`` if given); every value exactly
    representable in bfloat16
    """
    x = _array("x", x)
    _check_out(out, x)
    if _kernels is None:
        if out is None:
            return _ref.round_bf16(x)
        out[...] = _ref.round_bf16(x)
        return out
    if out is None:
        out = _empty(x.shape)
    _kernels.round_bf16(x.reshape(-1), out.reshape(-1), get_threads())
    return out


def _check_out(out: object, x: np.ndarray) -> None:
    """Refuse an ``out=`` array the kernels cannot write x's result into."""
    if out is None:
        return
    if not isinstance(out, np.ndarray) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError("out must be a C-contiguous float32 numpy array")
    if out.shape != x.shape:
        raise ValueError(f"out has shape {out.shape} but x has shape {x.shape}; they must match")
    if not out.flags.writeable:
        raise ValueError("out is read-only")


def _rounded(y: np.ndarray, round_to_bf16: bool) -> np.ndarray:
    """y, rounded to bfloat16 values in place if asked (paths whose kernel cannot fuse it)."""
    if round_to_bf16:
        if _kernels is not None and y.flags.c_contiguous:
            flat = y.reshape(-1)  # a view, so the kernel writes into y
            _kernels.round_bf16(flat, flat, get_threads())
        else:
            y[...] = round_bf16(y)
    return y


# matrix products --------------------------------------------------------------------


def linear(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    blas: bool = False,
    round_to_bf16: bool = False,
) -> np.ndarray:
    """y = x @ w.T + bias with float32 accumulation.

    Parameters
    ----------
    x : ndarray[float32], shape (..., K)
    w : ndarray[float32 | uint16 (bf16)], shape (N, K)
        bfloat16 weights are read directly, never expanded as a whole.
    bias : ndarray[float32 | uint16 (bf16)], shape (N,), optional
    blas : bool
        Multi-row float32 products (and bf16 weights expanded to float32 for
        them) always go to BLAS, never to our GEMM kernel.
        Both are exact to float32 rounding but sum in different orders; a caller
        that must reproduce BLAS's order (a comparison against a BLAS run) says so.
    round_to_bf16 : bool
        Round the result to bfloat16 values (float32 storage) within the call, each
        thread its own outputs; the same values as ``round_bf16`` of the result
        (BF16 precision rounds at every operator boundary, and a separate call per
        small decode output costs more than the operator).

    Returns
    -------
    ndarray[float32], shape (..., N)
    """
    x = _array("x", x)
    w = _matrix_for("w", w, x)
    if bias is not None:
        bias = _f32(_vector("bias", bias, w.shape[0]))
    if _kernels is None:
        return _rounded(_ref.linear(x, w, bias), round_to_bf16)
    x2 = x.reshape(-1, w.shape[1])
    m, n = x2.shape[0], w.shape[0]
    if w.dtype == np.uint16:
        if m <= _BF16_GEMV_MAX_ROWS:
            y = _empty((m, n))
            _kernels.linear_bf16(x2, w, bias, y, get_threads(), round_to_bf16)
        else:
            dot = _linear_bf16_dot(x2, w, bias, round_to_bf16)
            y = dot if dot is not None else _rounded(_linear_bf16_blocked(x2, w, bias, blas), round_to_bf16)
    elif m <= _F32_GEMV_MAX_ROWS:
        y = _empty((m, n))
        _kernels.linear_f32(x2, w, bias, y, get_threads(), round_to_bf16)
    elif not blas and _gemm_wins(m, n, w.shape[1]):
        y = _empty((m, n))
        _kernels.gemm_f32(x2, w, bias, y, *_gemm_plan(m, n, w.shape[1], get_threads()), get_threads())
        _rounded(y, round_to_bf16)
    else:
        y = np.matmul(x2, w.T, out=_empty((m, n)))
        if bias is not None:
            y += bias
        _rounded(y, round_to_bf16)
    return y.reshape(*x.shape[:-1], n)


def linear_many(
    x: np.ndarray,
    ws: list[np.ndarray] | tuple[np.ndarray, ...],
    *,
    blas: bool = False,
    round_to_bf16: bool = False,
) -> list[np.ndarray]:
    """``[linear(x, w) for w in ws]``, computed together when x is one row.

    Decode multiplies one activation row by several matrices (q/k/v, gate/up);
    the compiled kernel runs them in one parallel region instead of one each.
    Every output equals ``linear(x, w)`` bit for bit.

    Parameters
    ----------
    x : ndarray[float32], shape (..., K)
    ws : sequence of ndarray[float32 | uint16 (bf16)], shape (N_i, K), one dtype
        At most 8.
    blas, round_to_bf16 : bool
        As for `linear`.

    Returns
    -------
    list of ndarray[float32], shapes (..., N_i)
    """
    x = _array("x", x)
    if not 1 <= len(ws) <= 8:
        raise ValueError(f"linear_many takes 1 to 8 weights, got {len(ws)}")
    ws = [_matrix_for(f"ws[{i}]", w, x) for i, w in enumerate(ws)]
    if len({w.dtype for w in ws}) != 1:
        raise ValueError(f"ws mix dtypes {sorted({str(w.dtype) for w in ws})}; give one dtype (float32 or uint16 bf16)")
    rows = int(np.prod(x.shape[:-1], dtype=np.int64))
    if _kernels is None or rows != 1:
        return [linear(x, w, blas=blas, round_to_bf16=round_to_bf16) for w in ws]
    x2 = x.reshape(1, -1)
    ys = tuple(np.empty((1, w.shape[0]), np.float32) for w in ws)
    _kernels.linear_many(x2, tuple(ws), ys, get_threads(), round_to_bf16)
    return [y.reshape(*x.shape[:-1], y.shape[1]) for y in ys]


# int8 products ---------------------------------------------------------------------

# K up to which int32 sums of int8 x int8 products cannot overflow (K * 127 * 128 < 2^31)
INT8_MAX_K = 131072


def _rows(x: np.ndarray) -> int:
    """Rows of x (..., K) taken as a matrix (reshape(-1, K) fails for K = 0)."""
    return int(np.prod(x.shape[:-1], dtype=np.int64))


def quantize_int8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 codes per row (per token, or per output channel of a weight).

    scale = max|row| / 127 and q = rint(x * (127 / max|row|)) (round half to even),
    in [-127, 127]; a row with inf or NaN gets scale NaN and codes 0, a row of
    zeros (or so small that 127 / max|row| overflows, below about 3.7e-37) scale 0
    and codes 0. The same bits on every kernel variant and in numpy.

    Parameters
    ----------
    x : ndarray[float32], shape (..., K)

    Returns
    -------
    (ndarray[int8] of x's shape, ndarray[float32] of shape x.shape[:-1])
    """
    x = _array("x", x)
    if x.ndim < 1:
        raise ValueError(f"x has shape {x.shape}; expected at least 1 dim (..., K)")
    x2 = x.reshape(_rows(x), x.shape[-1])
    if _kernels is None:
        q, scale = _ref.quantize_int8(x2)
    else:
        q = np.empty(x2.shape, np.int8)
        scale = np.empty(x2.shape[0], np.float32)
        _kernels.quantize_int8(x2, q, scale, get_threads())
    return q.reshape(x.shape), scale.reshape(x.shape[:-1])


def linear_int8(
    x: np.ndarray, w: np.ndarray, w_scale: np.ndarray, bias: np.ndarray | None = None
) -> np.ndarray:
    """y = dequant(quantize_int8(x) @ w.T) + bias: int8 weights, activations quantized per row.

    Each row of x is quantized as `quantize_int8` does, the products summed
    exactly in int32, and each output is float32(sum) * (x_scale * w_scale[n]),
    then + bias[n] (each step one float32 rounding). Every output row depends
    only on its own x row, and every kernel variant and the numpy path give the
    same bits.

    Parameters
    ----------
    x : ndarray[float32], shape (..., K), K <= INT8_MAX_K
    w : ndarray[int8], shape (N, K)
        Any int8 values (-128 included); `quantize_int8` of a float32 weight gives
        codes in [-127, 127] and its per-row scales.
    w_scale : ndarray[float32], shape (N,)
    bias : ndarray[float32], shape (N,), optional

    Returns
    -------
    ndarray[float32], shape (..., N)
    """
    x = _array("x", x)
    w = _array("w", w, (np.int8,))
    _ndim("w", w, 2, "(N, K)")
    if x.ndim < 1 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"x has shape {x.shape} but w has shape {w.shape}; x[..., K] needs K={w.shape[1]}")
    if w.shape[1] > INT8_MAX_K:
        raise ValueError(f"w has K={w.shape[1]}; int8 products take K <= {INT8_MAX_K} (int32 sums must not overflow)")
    w_scale = _array("w_scale", w_scale)
    if w_scale.shape != (w.shape[0],):
        raise ValueError(f"w_scale has shape {w_scale.shape}; expected ({w.shape[0]},)")
    if bias is not None:
        bias = _array("bias", bias)
        if bias.shape != (w.shape[0],):
            raise ValueError(f"bias has shape {bias.shape}; expected ({w.shape[0]},)")
    if _kernels is None:
        return _ref.linear_int8(x, w, w_scale, bias)
    x2 = x.reshape(_rows(x), w.shape[1])
    y = _empty((x2.shape[0], w.shape[0]))
    _kernels.linear_int8(x2, w, w_scale, bias, y, get_threads())
    return y.reshape(*x.shape[:-1], w.shape[0])


def _gemm_wins(m: int, n: int, k: int, widened: bool = False) -> bool:
    """Whether our unpacked GEMM beats BLAS at this shape (see _GEMM_MAX_ROWS and below it).

    ``widened``: the weights are bf16 and BLAS would take them widened to float32.
    """
    lanes = getattr(_kernels, "LANES", 1)
    sixteen_lanes = lanes == 16
    if widened and not sixteen_lanes:
        return m <= (_GEMM_WIDENED_MAX_ROWS if k <= _GEMM_KC else _GEMM_LONG_K_MAX_ROWS)
    if lanes == 8 and m <= _GEMM_EIGHT_LANES_MAX_ROWS:
        return True
    if k <= _GEMM_KC:
        return m <= _GEMM_MAX_ROWS
    return sixteen_lanes and m <= _GEMM_LONG_K_MAX_ROWS and k <= _GEMM_LONG_K_MAX


def _gemm_plan(m: int, n: int, k: int, threads: int) -> tuple[int, int, int]:
    """(x rows, w rows, K block) per task of `gemm_f32`: bands of w that fit L2, the same count per thread."""
    kc = _GEMM_KC
    return (*_gemm_tasks(m, n, 4 * min(kc, max(1, k)), threads), kc)


def _gemm_tasks(m: int, n: int, row_bytes: int, threads: int) -> tuple[int, int]:
    """(x rows, w rows) per task: bands of w rows (``row_bytes`` each) that fit L2, the same count per thread."""
    band_rows = max(1, _GEMM_BAND_BYTES // max(1, row_bytes))
    n_bands = -(-n // band_rows)
    if n_bands > 1:
        # equal bands, a multiple of the thread count (no thread waits on a last band)
        n_bands = -(-n_bands // threads) * threads
    m_blocks = -(-threads // n_bands) if n_bands < threads else 1
    return -(-m // m_blocks), -(-n // n_bands)


def _f32(a: np.ndarray) -> np.ndarray:
    """float32 view of a float32 / bf16 vector (small: biases, norm weights)."""
    return _ref.bf16_to_f32(a) if a.dtype == np.uint16 else a


# per-thread buffer for the bf16 dot-product kernels' packed x (and AMX's bands of
# w), kept across calls and grown as needed: a fresh multi-MiB buffer per call was
# mapped anew each time, and its page faults (about 1 ms per MiB here) cost more
# than the products of the encoder's convolutions
_scratch = threading.local()


def _scratch_u16(n: int) -> np.ndarray:
    """This Python thread's uint16 scratch of at least ``n`` values."""
    buf = getattr(_scratch, "u16", None)
    if buf is None or buf.size < n:
        buf = _scratch.u16 = np.empty(n, np.uint16)
    return buf


def _scratch_f32(n: int) -> np.ndarray:
    """``n`` float32 values over this thread's kept scratch, from a 64-byte boundary.

    For weights widened block by block (`_linear_bf16_blocked`): the paths that
    widen are those without bf16 dot products, which never use the scratch
    otherwise, so no second buffer is kept. From the output pool instead, a
    convolution's widened kernel (8 MiB) was evicted by the encoder's larger
    outputs and faulted in afresh on every call.
    """
    buf = _scratch_u16(2 * n + 32)
    skip = (-buf.ctypes.data % 64) // 2
    return buf[skip : skip + 2 * n].view(np.float32)


# Outputs of a mebibyte or more come from a per-thread pool of buffers that
# nothing else references any more (by reference count: a view of the buffer, or
# any other holder, keeps it out). numpy would free such an array and allocate
# the next one afresh, and the allocator often gives the pages back to the OS in
# between: each new page then faults again (about 1 ms per MiB here), which cost
# the BF16 prefill of a 30 s clip about a fifth of its time. At most 16 buffers
# and 16 MiB per thread are kept: what the pool keeps adds to the peak memory
# (64 MiB raised a 0.6B FP32 recognizer's peak by 55 MiB, 16 MiB by 30, for
# nearly the same speed).
_POOL_MIN_VALUES = 1 << 18
_POOL_BUFFERS = 16
_POOL_MAX_VALUES = 1 << 22


def _references(pool: list[np.ndarray], i: int) -> int:
    return sys.getrefcount(pool[i])


# what _references counts for a buffer only the pool holds (calibrated rather than
# assumed: interpreters differ in which references they count)
_UNREFERENCED = _references([np.empty(0, np.float32)], 0)


def _empty(shape: tuple[int, ...]) -> np.ndarray:
    """An uninitialised float32 array of ``shape`` whose data starts on a 64-byte boundary.

    The tile kernel stores whole 64-byte rows of outputs, and numpy's arrays start
    16 bytes past a boundary, which splits every such store across two cache
    lines (the products ran 5-15 % slower). Large ones are recycled (above).
    """
    n = 1
    for d in shape:
        n *= d
    size = n + 16
    if n < _POOL_MIN_VALUES:
        buf = np.empty(size, np.float32)
    else:
        pool: list[np.ndarray] = _scratch.__dict__.setdefault("pool", [])
        free = [i for i in range(len(pool)) if _references(pool, i) <= _UNREFERENCED]
        fits = [i for i in free if pool[i].size >= size]
        if fits:  # the smallest free buffer that holds it: any size up to the largest one kept
            buf = pool[min(fits, key=lambda i: pool[i].size)]
        else:
            # free buffers smaller than this one are dropped, not kept beside it: the pool then
            # holds the largest outputs that are alive at once, not one buffer per size ever
            # seen (inputs of varying length, such as a file's chunks, made it grow with the file)
            for i in reversed(free):
                del pool[i]
            buf = np.empty(size, np.float32)
            pool.append(buf)
            while len(pool) > _POOL_BUFFERS or sum(b.size for b in pool) > _POOL_MAX_VALUES:
                del pool[0]  # only forgotten: whoever still holds it keeps it
    skip = (-buf.ctypes.data % 64) // 4
    return buf[skip : skip + n].reshape(shape)


def _linear_bf16_dot(
    x2: np.ndarray, w: np.ndarray, bias: np.ndarray | None, round_to_bf16: bool = False
) -> np.ndarray | None:
    """x2 @ w.T by bf16 dot products where this CPU has them and x2 holds bfloat16 values, else None.

    AMX tiles (`gemm_bf16amx`) where the OS grants them and K is a multiple of
    32, else VDPBF16PS (`gemm_bf16dp`); never for K < 32, which both pad to 32
    (the first convolution's K = 9 ran twice as long as the float32 product).
    BF16 precision rounds activations to bfloat16 at operator boundaries, so x2
    is usually such; then every product is exact, as in the float32 paths, and
    only the summation order differs. ``round_to_bf16`` as for `linear`.
    """
    k = w.shape[1]
    amx = getattr(_kernels, "AMX_NATIVE", False) and k % 32 == 0
    if k < 32 or not (amx or getattr(_kernels, "BF16DP_NATIVE", False)):
        return None
    y = _empty((x2.shape[0], w.shape[0]))
    nt = get_threads()
    if amx:
        scratch = _scratch_u16(_kernels.amx_scratch_size(x2.shape[0], k, nt))
        done = _kernels.gemm_bf16amx(x2, w, bias, y, scratch, nt)
        return _rounded(y, round_to_bf16) if done else None
    scratch = _scratch_u16(_kernels.bf16dp_scratch_size(x2.shape[0], k))
    tasks = _gemm_tasks(x2.shape[0], w.shape[0], 2 * k, nt)
    done = _kernels.gemm_bf16dp(x2, w, bias, y, scratch, *tasks, nt, to_bf16=round_to_bf16)
    return y if done else None


def _linear_bf16_blocked(x2: np.ndarray, w: np.ndarray, bias: np.ndarray | None, blas: bool) -> np.ndarray:
    """x2 @ bf16(w).T for many rows, as exact float32 products of the widened weights.

    Where our GEMM beats BLAS on widened weights (`_gemm_wins`: on AVX2 builds up to twice the
    rows of float32 weights at K <= 1024 and up to 200 rows at any K; never with ``blas``),
    `gemm_bf16w` runs it with each band of w widened in cache as it is used (bit-identical
    to `gemm_f32` on the widened matrix, and no widened copy is written). Elsewhere blocks of weight rows are widened and
    go to BLAS, as float32 weights do.
    """
    n, k = w.shape
    m = x2.shape[0]
    nt = get_threads()
    y = _empty((m, n))
    if not blas and _gemm_wins(m, n, k, widened=True):
        _kernels.gemm_bf16w(x2, w, bias, y, *_gemm_plan(m, n, k, nt), nt)
        return y
    rows = max(1, min(n, _BF16_BLOCK_BYTES // (4 * max(1, k))))
    buf = _scratch_f32(rows * k).reshape(rows, k)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        block = buf[: r1 - r0]
        _kernels.bf16_to_f32(w[r0:r1].reshape(-1), block.reshape(-1), nt)
        np.matmul(x2, block.T, out=y[:, r0:r1])
    if bias is not None:
        y += bias
    return y


def conv3x3s2(
    x: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None = None, *, round_to_bf16: bool = False
) -> np.ndarray:
    """3x3, stride-2, pad-1 convolution over channels-last images: im2col, then one `linear`.

    With bf16 kernels where bf16 dot products run, the patches go straight into the
    products' packed layout instead (`_conv3x3s2_bf16_dot`; the same bits). One
    input channel (the encoder's first convolution, K = 9) is computed directly
    (`conv3x3s2_c1`): nine taps, then the bias, as im2col's row times the kernel.

    Parameters
    ----------
    x : ndarray[float32], shape (n, H, W, Ci)
    kernel : ndarray[float32 | uint16 (bf16)], shape (Co, 9 * Ci)
        torch's [Co, Ci, 3, 3] kernel re-laid out as [Co, kh, kw, Ci] and flattened.
    bias : ndarray[float32 | uint16 (bf16)], shape (Co,), optional
    round_to_bf16 : bool
        As for `linear`: the result rounded to bfloat16 values within the call.

    Returns
    -------
    ndarray[float32], shape (n, ceil(H / 2), ceil(W / 2), Co)
    """
    x = _array("x", x)
    _ndim("x", x, 4, "(n, H, W, Ci)")
    kernel = _weight("kernel", kernel)
    _ndim("kernel", kernel, 2, "(Co, 9 * Ci)")
    n, h, w, c = x.shape
    if kernel.shape[1] != 9 * c:
        raise ValueError(f"kernel has shape {kernel.shape} but x has {c} channels; expected (Co, {9 * c})")
    ho, wo = (h + 1) // 2, (w + 1) // 2
    co = kernel.shape[0]
    if bias is not None:
        bias = _vector("bias", bias, co)
    if kernel.dtype == np.uint16 and 9 * c >= 32 and n * ho * wo > _BF16_GEMV_MAX_ROWS:
        y = _conv3x3s2_bf16_dot(x, kernel, bias, round_to_bf16)
        if y is not None:
            return y.reshape(n, ho, wo, co)
    if _kernels is not None and c == 1:
        y = _empty((n * ho * wo, co))
        taps = np.ascontiguousarray((_ref.bf16_to_f32(kernel) if kernel.dtype == np.uint16 else kernel).T)
        _kernels.conv3x3s2_c1(x, taps, None if bias is None else _f32(bias), y, get_threads(), round_to_bf16)
        return y.reshape(n, ho, wo, co)
    return linear(im2col_3x3s2(x), kernel, bias, round_to_bf16=round_to_bf16).reshape(n, ho, wo, co)


def im2col_3x3s2(x: np.ndarray) -> np.ndarray:
    """The patches of a 3x3, stride-2, pad-1 convolution over channels-last images.

    Row ``(i * Ho + r) * Wo + c`` holds image i's 3 x 3 window centred on input
    pixel (2r, 2c), ordered (kh, kw, channel), zeros outside the image: the rows
    `conv3x3s2` multiplies with its [Co, kh, kw, Ci] kernel (any product of them
    with a weight matrix is that convolution).

    Parameters
    ----------
    x : ndarray[float32], shape (n, H, W, C)

    Returns
    -------
    ndarray[float32], shape (n * ceil(H / 2) * ceil(W / 2), 9 * C)
    """
    x = _array("x", x)
    _ndim("x", x, 4, "(n, H, W, C)")
    if _kernels is None:
        return np.ascontiguousarray(_ref.im2col_3x3s2(x))
    n, h, w, c = x.shape
    cols = _empty((n * ((h + 1) // 2) * ((w + 1) // 2), 9 * c))
    _kernels.im2col_3x3s2(x, cols, get_threads())
    return cols


def _conv3x3s2_bf16_dot(
    x: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None, round_to_bf16: bool
) -> np.ndarray | None:
    """`conv3x3s2` by bf16 dot products with the patches packed from x, else None (as `_linear_bf16_dot`).

    The same bits as `linear` on im2col's rows: the patches go straight into the
    products' packed layout (AMX tiles where C is a multiple of 32, else
    VDPBF16PS's rows), since forming them in float32 first moved four times the
    bytes through memory. Returns the (rows, Co) output.
    """
    if _kernels is None:
        return None
    n, h, w, c = x.shape
    rows, co = n * ((h + 1) // 2) * ((w + 1) // 2), kernel.shape[0]
    amx = getattr(_kernels, "AMX_NATIVE", False) and c % 32 == 0
    if not (amx or getattr(_kernels, "BF16DP_NATIVE", False)):
        return None
    y = _empty((rows, co))
    nt = get_threads()
    b = None if bias is None else _f32(bias)
    if amx:
        scratch = _scratch_u16(_kernels.amx_scratch_size(rows, 9 * c, nt))
        done = _kernels.conv3x3s2_bf16amx(x, kernel, b, y, scratch, nt)
        return _rounded(y, round_to_bf16) if done else None
    scratch = _scratch_u16(_kernels.bf16dp_scratch_size(rows, 9 * c))
    tasks = _gemm_tasks(rows, co, 18 * c, nt)
    done = _kernels.conv3x3s2_bf16dp(x, kernel, b, y, scratch, *tasks, nt, to_bf16=round_to_bf16)
    return y if done else None


def embedding(table: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Look up rows of an embedding table.

    Parameters
    ----------
    table : ndarray[float32 | uint16 (bf16)], shape (V, D)
    ids : ndarray[int32 | int64], shape (n,), each in [0, V)

    Returns
    -------
    ndarray[float32], shape (n, D)
    """
    table = _weight("table", table)
    _ndim("table", table, 2, "(V, D)")
    ids = _array("ids", ids, (np.int32, np.int64, np.intp, np.uint32))
    _ndim("ids", ids, 1, "(n,)")
    if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
        bad = int(ids[(ids < 0) | (ids >= table.shape[0])][0])
        raise ValueError(f"token id {bad} is outside the table's 0..{table.shape[0] - 1}")
    if _kernels is None or table.dtype != np.uint16:
        return _ref.embedding(table, ids)
    return bf16_to_f32(table[ids])


# normalisation ----------------------------------------------------------------------


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float, *, round_to_bf16: bool = False) -> np.ndarray:
    """RMS norm over the last axis: weight * x / sqrt(mean(x**2) + eps).

    Parameters
    ----------
    x : ndarray[float32], shape (..., D)
    weight : ndarray[float32 | uint16 (bf16)], shape (D,)
    eps : float
    round_to_bf16 : bool
        As for `linear`: the result rounded to bfloat16 values within the call.

    Returns
    -------
    ndarray[float32], shape (..., D)
    """
    x = _array("x", x)
    weight = _vector("weight", weight, x.shape[-1] if x.ndim else -1)
    eps = _eps(eps)
    if _kernels is None:
        return _rounded(_ref.rms_norm(x, weight, eps), round_to_bf16)
    y = _empty(x.shape)
    d = x.shape[-1]
    _kernels.rms_norm(x.reshape(-1, d), _f32(weight), eps, y.reshape(-1, d), get_threads(), round_to_bf16)
    return y


def layer_norm(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float, *, round_to_bf16: bool = False
) -> np.ndarray:
    """Layer norm over the last axis (biased variance), as torch.nn.LayerNorm.

    Parameters
    ----------
    x : ndarray[float32], shape (..., D)
    weight, bias : ndarray[float32 | uint16 (bf16)], shape (D,)
    eps : float
    round_to_bf16 : bool
        As for `linear`: the result rounded to bfloat16 values within the call.

    Returns
    -------
    ndarray[float32], shape (..., D)
    """
    x = _array("x", x)
    d = x.shape[-1] if x.ndim else -1
    weight, bias, eps = _vector("weight", weight, d), _vector("bias", bias, d), _eps(eps)
    if _kernels is None or d == 0:
        return _rounded(_ref.layer_norm(x, weight, bias, eps), round_to_bf16)
    y = _empty(x.shape)
    _kernels.layer_norm(
        x.reshape(-1, d), _f32(weight), _f32(bias), eps, y.reshape(-1, d), get_threads(), round_to_bf16
    )
    return y


# activations --------------------------------------------------------------------------


def gelu(x: np.ndarray, out: np.ndarray | None = None, *, round_to_bf16: bool = False) -> np.ndarray:
    """Exact (erf) GELU in float32, torch's default ``approximate="none"``.

    Parameters
    ----------
    x : ndarray[float32], any shape
    out : ndarray[float32], C-contiguous, x's shape, or None
        Where to write the result; may be ``x`` itself. The encoder applies GELU to
        fresh convolution and MLP outputs, the largest of its arrays (61 MB for a
        10 s clip's first convolution): writing them anew cost more than the GELU.
    round_to_bf16 : bool
        As for `linear`: the result rounded to bfloat16 values within the call.

    Returns
    -------
    ndarray[float32], same shape (``out`` if given)
    """
    x = _array("x", x)
    _check_out(out, x)
    if _kernels is None:
        y = _rounded(_ref.gelu(x), round_to_bf16)
        if out is None:
            return y
        out[...] = y
        return out
    if out is None:
        out = _empty(x.shape)
    _kernels.gelu(x.reshape(-1), out.reshape(-1), get_threads(), round_to_bf16)
    return out


def silu(x: np.ndarray) -> np.ndarray:
    """SiLU: x * sigmoid(x).

    Parameters
    ----------
    x : ndarray[float32], any shape

    Returns
    -------
    ndarray[float32], same shape
    """
    return _elementwise("silu", _array("x", x))


def swiglu(gate: np.ndarray, up: np.ndarray, *, round_to_bf16: bool = False) -> np.ndarray:
    """silu(gate) * up.

    Parameters
    ----------
    gate, up : ndarray[float32], same shape
    round_to_bf16 : bool
        As for `linear`: the result rounded to bfloat16 values within the call.

    Returns
    -------
    ndarray[float32], same shape
    """
    gate = _array("gate", gate)
    up = _array("up", up)
    if gate.shape != up.shape:
        raise ValueError(f"gate has shape {gate.shape} but up has shape {up.shape}; they must match")
    if _kernels is None:
        return _rounded(_ref.swiglu(gate, up), round_to_bf16)
    y = _empty(gate.shape)
    _kernels.swiglu(gate.reshape(-1), up.reshape(-1), y.reshape(-1), get_threads(), round_to_bf16)
    return y


def _elementwise(name: str, x: np.ndarray) -> np.ndarray:
    if _kernels is None:
        return getattr(_ref, name)(x)
    y = _empty(x.shape)
    getattr(_kernels, name)(x.reshape(-1), y.reshape(-1), get_threads())
    return y


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax along ``axis`` in float32.

    Parameters
    ----------
    x : ndarray[float32], any shape with at least one dimension
    axis : int

    Returns
    -------
    ndarray[float32], same shape
    """
    x = _array("x", x)
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of range for x of shape {x.shape}")
    return _ref.softmax(x, axis)


# positions and attention ----------------------------------------------------------------


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, *, round_to_bf16: bool = False) -> np.ndarray:
    """Rotary positions, rotate_half convention: x * cos + rotate_half(x) * sin.

    Parameters
    ----------
    x : ndarray[float32], shape (n_tokens, n_heads, head_dim), head_dim even
    cos, sin : ndarray[float32], shape (n_tokens, head_dim)
    round_to_bf16 : bool
        As for `linear`: the result rounded to bfloat16 values within the call.

    Returns
    -------
    ndarray[float32], shape (n_tokens, n_heads, head_dim)
    """
    x = _array("x", x)
    _ndim("x", x, 3, "(n_tokens, n_heads, head_dim)")
    if x.shape[2] % 2:
        raise ValueError(f"head_dim={x.shape[2]} must be even for rotate_half")
    want = (x.shape[0], x.shape[2])
    cos = _array("cos", cos)
    sin = _array("sin", sin)
    if cos.shape != want or sin.shape != want:
        raise ValueError(f"cos {cos.shape} and sin {sin.shape} must both be (n_tokens, head_dim) = {want}")
    if _kernels is None:
        return _rounded(_ref.rope(x, cos, sin), round_to_bf16)
    y = _empty(x.shape)
    _kernels.rope(x, cos, sin, y, get_threads(), round_to_bf16)
    return y


def attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    scale: float,
    causal_offset: int | None,
    *,
    round_to_bf16: bool = False,
) -> np.ndarray:
    """Scaled dot-product attention with grouped kv heads, softmax in float32.

    Parameters
    ----------
    q : ndarray[float32], shape (n_q, n_heads, head_dim)
    k, v : ndarray[float32 | uint16 (bf16)], shape (n_kv, n_kv_heads, head_dim), one dtype;
        n_heads % n_kv_heads == 0, query head h reads kv head h // (n_heads // n_kv_heads).
        bfloat16 keys and values (a BF16 KV cache) give exactly the result of their
        float32 widening.
    scale : float
        Multiplies q . k (usually head_dim ** -0.5).
    causal_offset : int >= 0 or None
        If given, query i attends keys j <= causal_offset + i (decode: the number of
        cached tokens before the first query); None attends every key.
    round_to_bf16 : bool
        As for `linear`: the result rounded to bfloat16 values within the call.

    Returns
    -------
    ndarray[float32], shape (n_q, n_heads, head_dim)
    """
    q, k, v = _array("q", q), _weight("k", k), _weight("v", v)
    if k.dtype != v.dtype:
        raise ValueError(f"k is {k.dtype} but v is {v.dtype}; give both as float32 or both as uint16 (bf16)")
    _ndim("q", q, 3, "(n_q, n_heads, head_dim)")
    _ndim("k", k, 3, "(n_kv, n_kv_heads, head_dim)")
    if v.shape != k.shape:
        raise ValueError(f"k has shape {k.shape} but v has shape {v.shape}; they must match")
    if k.shape[2] != q.shape[2]:
        raise ValueError(f"q head_dim {q.shape[2]} differs from k head_dim {k.shape[2]}")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(f"n_heads={q.shape[1]} is not a multiple of n_kv_heads={k.shape[1]}")
    if causal_offset is not None:
        if isinstance(causal_offset, bool) or not isinstance(causal_offset, (int, np.integer)):
            raise TypeError(f"causal_offset must be an int or None, got {type(causal_offset).__name__}")
        if causal_offset < 0:
            raise ValueError(f"causal_offset={causal_offset} is invalid; expected >= 0 or None")
        causal_offset = int(causal_offset)
    if k.shape[0] == 0 and q.shape[0]:
        raise ValueError("attention needs at least one key")
    bf16 = k.dtype == np.uint16
    if _kernels is None or q.shape[0] > _ATTENTION_MAX_QUERIES:
        if bf16:  # prefill over a BF16 cache: widen once (exact), then the float32 path
            k, v = bf16_to_f32(k), bf16_to_f32(v)
        if _kernels is None:
            return _rounded(_ref.attention(q, k, v, float(scale), causal_offset), round_to_bf16)
        return _rounded(_attention_fused(q, k, v, float(scale), causal_offset), round_to_bf16)
    out = _empty(q.shape)
    offset = -1 if causal_offset is None else causal_offset
    _kernels.attention(q, k, v, float(scale), offset, out, get_threads(), round_to_bf16)
    return out


def _attention_fused(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, causal_offset: int | None
) -> np.ndarray:
    """Prefill/encoder attention in one OpenMP kernel: scores, exact softmax and P.V per task.

    A task is a block of queries for the heads of one kv head. No BLAS call, so
    no second thread pool spins against ours.
    """
    n_q, n_heads, _ = q.shape
    n_kv_heads = k.shape[1]
    group = n_heads // n_kv_heads
    nt = get_threads()
    block = max(1, _ATTENTION_TASK_ROWS // group)
    # at least two tasks per thread, so no thread idles on short inputs
    per_head = -(-2 * nt // n_kv_heads)
    block = max(1, min(block, -(-n_q // per_head)))
    out = _empty(q.shape)
    work = _empty((_kernels.attention_fused_work_size(n_q, k.shape[0], n_heads, n_kv_heads, q.shape[2], block, nt),))
    _kernels.attention_fused(
        q, k, v, scale, -1 if causal_offset is None else causal_offset, out, block, _ATTENTION_KEY_CHUNK, work, nt
    )
    return out


def argmax(x: np.ndarray) -> int:
    """Index of the first maximum of a vector (NaN counts as maximal, like torch).

    Parameters
    ----------
    x : ndarray[float32], shape (N,), N >= 1

    Returns
    -------
    int
    """
    x = _array("x", x)
    _ndim("x", x, 1, "(N,)")
    if x.size == 0:
        raise ValueError("argmax of an empty vector")
    return _ref.argmax(x)


# fused decode step --------------------------------------------------------------------


class DecoderLayer:
    """One token through a pre-norm decoder layer (Qwen3's) in a single compiled call.

    Runs, in this order and over the same kernels and thread splits as the ops
    above: input RMS norm; q, k, v (`linear_many`); per-head q and k RMS norms;
    `rope`; the new key and value into row ``pos`` of the caches (as bfloat16
    bits when the caches are uint16); `attention` over keys ``0..pos``; o and
    the residual; post-attention RMS norm; gate and up; `swiglu`; down and the
    residual. Every value equals that op-by-op computation bit for bit. A decode
    step calls about 20 ops per layer, each costing a few microseconds of Python
    and allocation around a little arithmetic; this makes it one call.

    With int8 matrices every product is `linear_int8`'s (the row quantized per
    call, exact int32 sums, the same dequantization), so the layer equals the
    op-by-op path that runs `linear_int8` per matrix; q, k and v take one
    quantization of their shared row (the codes `linear_int8` would compute
    for each), gate and up another.

    Build it with `decoder_layer`, which returns None where no compiled kernels
    are loaded (the caller then runs the ops one by one).
    """

    def __init__(self, kernel: Any) -> None:  # a compiled kernel object (no type stubs)
        self._kernel = kernel

    def step(
        self,
        hidden: np.ndarray,
        k_cache: np.ndarray,
        v_cache: np.ndarray,
        pos: int,
        cos: np.ndarray,
        sin: np.ndarray,
        scale: float,
        *,
        round_to_bf16: bool = False,
    ) -> None:
        """Advance the residual stream of one token through the layer, in place.

        Parameters
        ----------
        hidden : ndarray[float32], shape (hidden_size,), C-contiguous, writable
            The token's residual stream; replaced by the layer's output.
        k_cache, v_cache : ndarray[float32 | uint16 (bf16)], shape (capacity, n_kv_heads, head_dim)
            One dtype; row ``pos`` receives the token's key and value.
        pos : int, 0 <= pos < capacity
            The token's position: keys ``0..pos`` are attended.
        cos, sin : ndarray[float32], shape (head_dim,)
            The rotary table rows of ``pos``.
        scale : float
            Multiplies q . k (usually head_dim ** -0.5).
        round_to_bf16 : bool
            Round every operator's output to bfloat16 values (BF16 precision).
        """
        self._kernel.step(hidden, k_cache, v_cache, pos, cos, sin, scale, get_threads(), round_to_bf16)

    def step_batch(
        self,
        hidden: np.ndarray,
        k_caches: list[np.ndarray] | tuple[np.ndarray, ...],
        v_caches: list[np.ndarray] | tuple[np.ndarray, ...],
        layer: int,
        positions: np.ndarray,
        cos: np.ndarray,
        sin: np.ndarray,
        scale: float,
        *,
        round_to_bf16: bool = False,
    ) -> None:
        """`step` for one token of each of several sequences, each matrix read once for all.

        Row ``b`` of ``hidden`` ends bit-identical to ``step`` on that row alone
        with sequence ``b``'s cache (see `linear_rows` for why the products keep
        each row's summation order).

        Parameters
        ----------
        hidden : ndarray[float32], shape (B, hidden_size), C-contiguous, writable
            One residual stream per sequence, replaced by the layer's outputs.
        k_caches, v_caches : B ndarrays[float32 | uint16 (bf16)], shape (n_layers, capacity_b, n_kv_heads, head_dim)
            Each sequence's whole cache (all of one dtype); row ``positions[b]`` of
            layer ``layer`` of cache ``b`` receives its key and value.
        layer : int
            The index of this layer in the caches.
        positions : ndarray[int64], shape (B,)
            Each token's position; keys ``0..positions[b]`` of its own cache are attended.
        cos, sin : ndarray[float32], shape (B, head_dim)
            The rotary table rows of the positions.
        scale, round_to_bf16
            As for `step`.
        """
        positions = np.ascontiguousarray(positions, dtype=np.int64)
        _kernels.decoder_layer_step_batch(
            self._kernel, hidden, tuple(k_caches), tuple(v_caches), layer, positions,
            _array("cos", cos), _array("sin", sin), scale, get_threads(), round_to_bf16,
        )


def decoder_layer(
    matrices: tuple[np.ndarray, ...],
    norms: tuple[np.ndarray, ...],
    *,
    n_heads: int,
    n_kv_heads: int,
    head_dim: int,
    eps: float,
    scales: tuple[np.ndarray, ...] | None = None,
) -> DecoderLayer | None:
    """A fused `DecoderLayer` over one layer's weights, or None without compiled kernels.

    Parameters
    ----------
    matrices : 7 ndarrays[float32 | uint16 (bf16) | int8], one dtype
        q (n_heads * head_dim, D), k and v (n_kv_heads * head_dim, D),
        o (D, n_heads * head_dim), gate and up (I, D), down (D, I). int8: the
        codes of `linear_int8`'s weights (K <= INT8_MAX_K).
    norms : 4 ndarrays[float32 | uint16 (bf16)]
        input and post-attention RMS norm weights (D,), q and k norm weights (head_dim,).
    n_heads, n_kv_heads, head_dim : int
        n_heads a multiple of n_kv_heads, head_dim even.
    eps : float
        The RMS norms' epsilon.
    scales : 7 ndarrays[float32], shape (N_i,), optional
        With int8 matrices (and only then): each one's per-row scales, as
        `linear_int8` takes them.

    Returns
    -------
    DecoderLayer or None

    Raises
    ------
    ValueError
        Matrices of mixed dtypes, int8 matrices without their scales (or float
        ones with scales), or a shape that does not fit the dimensions.
    """
    if _kernels is None:
        return None
    mats = tuple(_array(f"matrices[{i}]", m, (np.float32, np.uint16, np.int8)) for i, m in enumerate(matrices))
    vecs = tuple(_weight(f"norms[{i}]", v) for i, v in enumerate(norms))
    for i, m in enumerate(mats):
        _ndim(f"matrices[{i}]", m, 2, "(N, K)")
    for i, v in enumerate(vecs):
        _ndim(f"norms[{i}]", v, 1, "(D,)")
    dtypes = sorted({str(m.dtype) for m in mats})
    if len(dtypes) > 1:
        raise ValueError(f"matrices mix dtypes {dtypes}; give all float32, all uint16 (bf16) or all int8 codes")
    vecs = tuple(_f32(v) for v in vecs)
    if dtypes == ["int8"]:
        kernel_scales: tuple[np.ndarray, ...] | None = _int8_scales(mats, scales)
    elif scales is not None:
        raise ValueError(f"scales were given for {' '.join(dtypes) or 'no'} matrices; only int8 matrices take scales")
    else:
        kernel_scales = None
    return DecoderLayer(_kernels.DecoderLayer(mats, vecs, n_heads, n_kv_heads, head_dim, _eps(eps), kernel_scales))


def _int8_scales(codes: tuple[np.ndarray, ...], scales: tuple[np.ndarray, ...] | None) -> tuple[np.ndarray, ...]:
    """The per-row scales of int8 matrices, checked as `linear_int8` checks them."""
    if scales is None or len(scales) != len(codes):
        given = "none" if scales is None else len(scales)
        raise ValueError(f"int8 matrices need one float32 scale vector each: {len(codes)} expected, {given} given")
    checked = tuple(_array(f"scales[{i}]", s) for i, s in enumerate(scales))
    for i, (w, s) in enumerate(zip(codes, checked, strict=True)):
        if s.shape != (w.shape[0],):
            raise ValueError(f"scales[{i}] has shape {s.shape}; expected ({w.shape[0]},), one per row of matrices[{i}]")
        if w.shape[1] > INT8_MAX_K:
            raise ValueError(f"matrices[{i}] has K={w.shape[1]}; int8 products take K <= {INT8_MAX_K}")
    return checked


# batched decode --------------------------------------------------------------------------


def linear_rows(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, *, round_to_bf16: bool = False) -> np.ndarray:
    """``[linear(x[b], w, bias) for b]``, bit for bit, with the weights read once for all rows.

    Batched decoding multiplies one row per live sequence by each matrix. `linear`
    on those rows would take the small-batch GEMM, BLAS or our GEMM, which sum
    each output in another order than the one-row decode GEMV, so a sequence
    decoded beside others would get other bits than decoded alone. Here each
    output is the one-row GEMV's arithmetic on its own row (`_batch_gemv_impl.h`);
    only the order in which outputs are computed changes: a tile of weight rows is
    used for every activation row while it is in cache.

    Parameters
    ----------
    x : ndarray[float32], shape (B, K)
    w : ndarray[float32 | uint16 (bf16)], shape (N, K)
    bias : ndarray[float32 | uint16 (bf16)], shape (N,), optional
    round_to_bf16 : bool
        As for `linear`.

    Returns
    -------
    ndarray[float32], shape (B, N)
    """
    x = _array("x", x)
    _ndim("x", x, 2, "(B, K)")
    w = _matrix_for("w", w, x)
    if bias is not None:
        bias = _f32(_vector("bias", bias, w.shape[0]))
    if _kernels is None:
        # the numpy path of a single row, row by row
        rows = [linear(x[b], w, bias, round_to_bf16=round_to_bf16) for b in range(x.shape[0])]
        return np.stack(rows) if rows else np.empty((0, w.shape[0]), np.float32)
    y = _empty((x.shape[0], w.shape[0]))
    _kernels.linear_rows(x, w, bias, y, get_threads(), round_to_bf16)
    return y
