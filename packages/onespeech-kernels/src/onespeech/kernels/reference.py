"""Pure-numpy reference implementations of every op (the test oracle).

These follow the formulas of the reference toolkit (HF transformers Qwen3 and
Qwen3-ASR on CPU torch, float32) step by step, in float32, so that the compiled
kernels can be checked against them and so that the runtime works (slowly)
when the extension is not built. No validation happens here: `ops` checks
inputs once and then calls either these or the compiled kernels.
"""

from __future__ import annotations

import numpy as np

# bfloat16 (uint16 bit patterns) <-> float32 -------------------------------------

_BF16_QUIET_NAN = np.uint16(0x7FC0)


def bf16_to_f32(u16: np.ndarray) -> np.ndarray:
    """Exact expansion: the bf16 bits become the high half of a float32."""
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round to nearest even, as c10::BFloat16 does; NaN becomes 0x7FC0."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    # round half to even: add 0x7FFF plus the lowest kept bit, then truncate
    rounded = ((bits + (((bits >> 16) & 1) + np.uint32(0x7FFF))) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), _BF16_QUIET_NAN, rounded)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest-even bfloat16 -> float32."""
    return bf16_to_f32(f32_to_bf16(x))


def as_f32_weight(w: np.ndarray) -> np.ndarray:
    """A float32 view/expansion of a float32 or bf16 (uint16) weight."""
    return bf16_to_f32(w) if w.dtype == np.uint16 else w


# matrix products ----------------------------------------------------------------

# rows of a bf16 weight expanded at a time, so the 151936 x 1024 head never
# exists in float32 as a whole (about 16 MiB of float32 per block at K=1024)
_BF16_ROW_BLOCK = 4096


def linear(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """y[..., N] = x[..., K] @ w[N, K].T + bias[N], float32 accumulation."""
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    n = w.shape[0]
    if w.dtype == np.uint16:
        y = np.empty((x2.shape[0], n), dtype=np.float32)
        for r0 in range(0, n, _BF16_ROW_BLOCK):
            r1 = min(n, r0 + _BF16_ROW_BLOCK)
            np.matmul(x2, bf16_to_f32(w[r0:r1]).T, out=y[:, r0:r1])
    else:
        y = x2 @ w.T
    if bias is not None:
        y += as_f32_weight(bias)
    return y.reshape(*lead, n)



# int8 products (the rule of _int8_impl.h, the same bits) --------------------------

_I8_LIMIT = np.float32(127)


def quantize_int8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row symmetric int8 codes (M, K) and float32 scales (M,) of x (M, K).

    amax is the largest |x| (NaN counts as largest); a row with inf or NaN gets
    scale NaN, a row where 127 / amax is not finite (all zeros, or tiny) scale 0,
    both with all codes 0; else scale = amax / 127 and q = clip(rint(x * (127 / amax)),
    -127, 127), every step one float32 operation.
    """
    x = np.asarray(x, dtype=np.float32)
    amax_bits = (x.view(np.uint32) & np.uint32(0x7FFFFFFF)).max(axis=1, initial=0)
    amax = amax_bits.view(np.float32)
    finite = amax_bits < np.uint32(0x7F800000)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        inv = _I8_LIMIT / amax
        scale = amax / _I8_LIMIT
        live = finite & np.isfinite(inv)
        codes = np.rint(x * np.where(live, inv, np.float32(0))[:, None])
    q = np.where(live[:, None], np.clip(codes, -_I8_LIMIT, _I8_LIMIT), np.float32(0)).astype(np.int8)
    scale = np.where(live, scale, np.where(finite, np.float32(0), np.float32(np.nan))).astype(np.float32)
    return q, scale


def linear_int8(x: np.ndarray, w: np.ndarray, w_scale: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """y[..., N] = dequant(quantize_int8(x) @ w.T) + bias: exact int32 sums, then
    float32(acc) * (x_scale * w_scale) and the bias, each step rounded to float32."""
    lead = x.shape[:-1]
    q, sx = quantize_int8(x.reshape(int(np.prod(lead, dtype=np.int64)), x.shape[-1]))
    acc = (q.astype(np.int32) @ w.astype(np.int32).T).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        y = acc * (sx[:, None] * w_scale[None, :])
        if bias is not None:
            y = y + bias
    return y.reshape(*lead, w.shape[0])


def im2col_3x3s2(x: np.ndarray) -> np.ndarray:
    """Patches (n * Ho * Wo, 9 * C), ordered (kh, kw, c), of a 3x3 stride-2 pad-1 convolution."""
    n, h, w, c = x.shape
    ho, wo = (h + 1) // 2, (w + 1) // 2
    xp = np.zeros((n, h + 2, w + 2, c), dtype=np.float32)
    xp[:, 1:-1, 1:-1, :] = x
    sn, sh, sw, sc = xp.strides
    patches = np.lib.stride_tricks.as_strided(
        xp, shape=(n, ho, wo, 3, 3, c), strides=(sn, 2 * sh, 2 * sw, sh, sw, sc)
    )
    return patches.reshape(n * ho * wo, 9 * c)


def embedding(table: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Rows of the table, expanded to float32."""
    return np.ascontiguousarray(as_f32_weight(table[ids]), dtype=np.float32)


# normalisation ------------------------------------------------------------------


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """weight * (x * rsqrt(mean(x**2) + eps)), as Qwen3RMSNorm in float32."""
    var = np.mean(np.square(x), axis=-1, keepdims=True, dtype=np.float32)
    inv = np.float32(1.0) / np.sqrt(var + np.float32(eps))
    return as_f32_weight(weight) * (x * inv)


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """(x - mean) * rsqrt(var + eps) * weight + bias; biased variance, like torch."""
    # moments in float64: torch's float32 kernel uses a compensated cascade, so
    # the exactly-rounded moments are the closest numpy can get to it
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    var = np.square(x64 - mean).mean(axis=-1, keepdims=True)
    rstd = (1.0 / np.sqrt(var + eps)).astype(np.float32)
    y = (x - mean.astype(np.float32)) * rstd
    return y * as_f32_weight(weight) + as_f32_weight(bias)


# activations --------------------------------------------------------------------

# Abramowitz & Stegun 7.1.26, the erf that ATen's vectorised float32 GELU uses
_ERF_P = np.float32(0.3275911)
_ERF_A = [np.float32(c) for c in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)]


def erf_f32(z: np.ndarray) -> np.ndarray:
    """erf in float32 by ATen's vectorised formula (|error| < 1.5e-7)."""
    a = np.abs(z)
    t = np.float32(1.0) / (_ERF_P * a + np.float32(1.0))
    r = _ERF_A[0]
    for c in _ERF_A[1:]:
        r = r * t + c
    y = np.float32(1.0) + (-np.exp(-(z * z)) * t) * r
    return np.copysign(y, z)


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU: x * 0.5 * (1 + erf(x / sqrt(2))), torch's default."""
    return x * np.float32(0.5) * (np.float32(1.0) + erf_f32(x * np.float32(0.7071067811865476)))


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x) = x / (1 + exp(-x))."""
    with np.errstate(over="ignore"):  # exp(-x) -> inf gives the right limit, -0
        return x / (np.float32(1.0) + np.exp(-x))


def swiglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """silu(gate) * up (the Qwen3 MLP's activation)."""
    return silu(gate) * up


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """exp(x - max) / sum, in float32."""
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


# positions and attention ----------------------------------------------------------


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1) (HF Qwen3)."""
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


# queries per block, so scores stay near 32 MiB even for 300 s aligner inputs
_SCORE_BYTES = 32 << 20


def attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, causal_offset: int | None
) -> np.ndarray:
    """softmax(q k^T * scale + mask) v per head; head h reads kv head h // group."""
    n_q, n_heads, head_dim = q.shape
    n_kv, n_kv_heads, _ = k.shape
    group = n_heads // n_kv_heads
    # [n_kv_heads, group, n_q, hd]: the heads sharing one kv head side by side
    qh = q.transpose(1, 0, 2).reshape(n_kv_heads, group, n_q, head_dim)
    kh = k.transpose(1, 2, 0)  # [n_kv_heads, hd, n_kv]
    vh = v.transpose(1, 0, 2)  # [n_kv_heads, n_kv, hd]
    out = np.empty((n_kv_heads, group, n_q, head_dim), dtype=np.float32)
    block = max(1, _SCORE_BYTES // (4 * n_heads * max(1, n_kv)))
    keys = np.arange(n_kv)
    for i0 in range(0, n_q, block):
        i1 = min(n_q, i0 + block)
        scores = np.matmul(qh[:, :, i0:i1], kh[:, None])  # [n_kv_heads, group, b, n_kv]
        scores *= np.float32(scale)
        if causal_offset is not None:
            visible = keys[None, :] <= (causal_offset + np.arange(i0, i1))[:, None]
            scores = np.where(visible, scores, np.float32(-np.inf))
        p = softmax(scores, axis=-1)
        out[:, :, i0:i1] = np.matmul(p, vh[:, None])
    return np.ascontiguousarray(out.reshape(n_heads, n_q, head_dim).transpose(1, 0, 2))


def argmax(x: np.ndarray) -> int:
    """Index of the first maximum (NaN counts as the maximum, like torch)."""
    return int(np.argmax(x))
