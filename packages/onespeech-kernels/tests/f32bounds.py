"""Float32 error bounds that hold for any summation order, computed from the inputs.

The kernels sum in orders of their own (vector lanes, register tiles, K
blocks, threads), and a variant built for another instruction set sums in
another order again. A tolerance observed on one machine therefore fails on
the next; these bounds are the classic worst-case ones (Higham, "Accuracy and
Stability of Numerical Algorithms", ch. 3), elementwise and in float64, so
they scale with the inputs and hold for every order and every machine.

With u = 2**-24 (float32 unit roundoff) and gamma(n) = n u / (1 - n u):

- a dot product of length n, any order, with or without FMA:
  |fl(x . w) - x . w| <= gamma(n) |x| . |w|;
- exp / reciprocal / sqrt: a few units in the last place (ulp <= 2u relative).
"""

from __future__ import annotations

import numpy as np

U = 2.0**-24
# exp in the kernels is Cephes expf (<= 2 ulp), libm's (<= 1 ulp) in the generic
# build, numpy's own in the numpy path; 4 ulp covers each of them
EXP_ULPS = 4


def gamma(n: int | np.ndarray) -> np.ndarray:
    """gamma(n) = n u / (1 - n u): the relative bound of n accumulated roundings."""
    n = np.asarray(n, np.float64)
    return n * U / (1.0 - n * U)


def linear_bound(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """Elementwise bound on |fl(x @ w.T + bias) - exact| for float32 x (M, K), w (N, K) (exact values)."""
    x64, w64 = np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64))
    k = x.shape[-1]
    mag = x64 @ w64.T
    if bias is None:
        return gamma(k) * mag
    return gamma(k + 1) * (mag + np.abs(bias.astype(np.float64)))


def softmax_rel_bound(s: np.ndarray, score_err: np.ndarray | float, n: np.ndarray | int) -> np.ndarray:
    """Relative bound on each normalised weight of softmax over the last axis of the exact scores s.

    score_err bounds each computed score's absolute error. exp(fl(s_j) - fl(max)) has
    argument error score_err_j plus the subtraction's rounding u |s_j - max|, and exp
    adds EXP_ULPS ulp; a common shift cancels in the normalisation, so each weight
    moves by a factor within exp(+-2 d) with d the row's largest such error; the
    positive sum of n terms adds gamma(n) and the division one ulp.
    """
    finite = np.isfinite(s)
    m = np.where(finite, s, -np.inf).max(-1, keepdims=True)
    arg = np.where(finite, score_err + U * np.abs(np.where(finite, s - m, 0.0)), 0.0)
    d = arg.max(-1, keepdims=True) + EXP_ULPS * 2 * U
    return np.expm1(2 * d) + gamma(n) + 2 * U


def softmax_bound(x: np.ndarray) -> np.ndarray:
    """Elementwise bound on |fl(softmax(x)) - exact| over the last axis, float32 x."""
    s = x.astype(np.float64)
    e = np.exp(s - s.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    return p * softmax_rel_bound(s, 0.0, x.shape[-1])


def attention_exact(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float,
                    causal_offset: int | None) -> np.ndarray:
    """The definition in float64: softmax over the visible keys, head h reads kv head h // group."""
    n_q, n_heads, _ = q.shape
    n_kv, n_kv_heads, _ = k.shape
    group = n_heads // n_kv_heads
    qh = q.astype(np.float64).transpose(1, 0, 2)
    kh = np.repeat(k.astype(np.float64).transpose(1, 0, 2), group, axis=0)
    vh = np.repeat(v.astype(np.float64).transpose(1, 0, 2), group, axis=0)
    s = qh @ kh.transpose(0, 2, 1) * scale  # [n_heads, n_q, n_kv]
    if causal_offset is not None:
        s[:, np.arange(n_kv)[None, :] > causal_offset + np.arange(n_q)[:, None]] = -np.inf
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True) @ vh).transpose(1, 0, 2)


def attention_bound(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float,
                    causal_offset: int | None) -> np.ndarray:
    """Elementwise bound on |fl(attention) - exact|, shapes as `ops.attention` (float32 or widened bf16 k, v).

    Each score q . k * scale (hd products and the scale: gamma(hd + 2) of
    |q| . |k| |scale|) errs in the exponent, which scales with the largest
    score; then the softmax bound above, and P.V over n visible keys adds
    gamma(n) of sum_j p_j |v_j|. The weights' error times sum_j p_j |v_j|
    bounds what reaches each output.
    """
    n_q, n_heads, hd = q.shape
    n_kv, n_kv_heads, _ = k.shape
    group = n_heads // n_kv_heads
    qh = q.astype(np.float64).transpose(1, 0, 2)  # [heads, n_q, hd]
    kh = np.repeat(k.astype(np.float64).transpose(1, 0, 2), group, axis=0)
    vh = np.repeat(v.astype(np.float64).transpose(1, 0, 2), group, axis=0)
    s = qh @ kh.transpose(0, 2, 1) * scale
    err = gamma(hd + 2) * (np.abs(qh) @ np.abs(kh).transpose(0, 2, 1)) * abs(scale)
    visible = np.ones((n_q, n_kv), bool)
    if causal_offset is not None:
        visible = np.arange(n_kv)[None, :] <= causal_offset + np.arange(n_q)[:, None]
    s = np.where(visible, s, -np.inf)
    n = visible.sum(-1)[None, :, None]
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    weight_err = softmax_rel_bound(s, err, n)
    bound = (weight_err + gamma(n)) * (p @ np.abs(vh))
    return bound.transpose(1, 0, 2)


def rms_norm_bounded(x: np.ndarray, w: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(exact, bound) of weight * x / sqrt(mean(x**2) + eps) over the last axis (D = x.shape[-1]).

    The sum of D positive squares, the division by D and the eps add gamma(D + 2)
    relative; the square root halves it and adds an ulp; the reciprocal or
    division and the two products add at most three more roundings.
    """
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    d = x.shape[-1]
    y = w64 * (x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + eps))
    return y, (gamma(d + 2) / 2 + gamma(4)) * np.abs(y)


def layer_norm_bounded(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(exact, bound) of torch's LayerNorm (biased variance) over the last axis.

    The moments are taken in float64 (the kernels' and the reference's rule), so
    what remains are roundings of float32 steps: the mean to float32 (u |mu|),
    x - mean, the reciprocal deviation, the products by it and by the weight,
    and the bias: gamma(5) of |w| rstd (|mu| + |x - mu|) + |b|.
    """
    x64, w64, b64 = x.astype(np.float64), w.astype(np.float64), b.astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x64 - mu) ** 2).mean(-1, keepdims=True) + eps)
    y = (x64 - mu) * rstd * w64 + b64
    return y, gamma(5) * (np.abs(w64) * rstd * (np.abs(mu) + np.abs(x64 - mu)) + np.abs(b64))


def rope_bounded(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(exact, bound) of x cos + rotate_half(x) sin for the given float32 cos / sin: two products and a sum."""
    half = x.shape[-1] // 2
    x64 = x.astype(np.float64)
    rot = np.concatenate([-x64[..., half:], x64[..., :half]], axis=-1)
    c, s = cos.astype(np.float64)[:, None, :], sin.astype(np.float64)[:, None, :]
    return x64 * c + rot * s, gamma(2) * (np.abs(x64 * c) + np.abs(rot * s))


def assert_within(got: np.ndarray, want: np.ndarray, bound: np.ndarray, what: str = "") -> None:
    """|got - want| <= bound everywhere (want in float64); the message names the worst element."""
    assert got.shape == want.shape, (got.shape, want.shape)
    err = np.abs(got.astype(np.float64) - want)
    ratio = err / np.maximum(bound, np.finfo(np.float64).tiny)
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape) if ratio.size else ()
    assert not ratio.size or ratio[worst] <= 1.0, (
        f"{what} error {err[worst]:.3g} at {worst} exceeds its float32 bound {bound[worst]:.3g}")
