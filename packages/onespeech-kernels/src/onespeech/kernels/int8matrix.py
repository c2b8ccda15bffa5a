"""An int8 weight matrix (codes plus one scale per output channel) and products that take either kind.

INT8 runtime files store each quantized Linear weight ``name`` as int8 codes under
its own name and its float32 per-row scales under ``name + SCALE_SUFFIX``
(:func:`onespeech.kernels.ops.quantize_int8` of the exactly widened publisher
values). :func:`matrix` pairs them; :func:`linear`, :func:`linear_many` and
:func:`linear_rows` run an :class:`Int8Matrix` through
:func:`onespeech.kernels.ops.linear_int8` and any float32 / bfloat16 matrix through
the float products, so a model's layers need not know which one they hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np

from onespeech.kernels import ops

__all__ = [
    "SCALE_SUFFIX",
    "Int8Matrix",
    "Matrix",
    "conv3x3s2",
    "linear",
    "linear_many",
    "linear_rows",
    "matrix",
    "quantize",
]

#: Name suffix of a quantized weight's per-row scales in INT8 runtime files.
SCALE_SUFFIX = "_scale"


@dataclass(frozen=True)
class Int8Matrix:
    """Codes int8[N, K] and scales float32[N]: row n stands for ``codes[n] * scale[n]``."""

    codes: np.ndarray
    scale: np.ndarray

    def __post_init__(self) -> None:
        if self.codes.dtype != np.int8 or self.codes.ndim != 2:
            raise ValueError(f"codes have dtype {self.codes.dtype} and shape {self.codes.shape}; expected int8 (N, K)")
        if self.scale.dtype != np.float32 or self.scale.shape != self.codes.shape[:1]:
            raise ValueError(f"scale has dtype {self.scale.dtype} and shape {self.scale.shape}; "
                             f"expected float32 ({self.codes.shape[0]},)")  # fmt: skip

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.codes.shape[0]), int(self.codes.shape[1]))

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes + self.scale.nbytes)


#: A weight matrix as the products take it: float32, bfloat16 bits (uint16) or int8 codes with scales.
Matrix: TypeAlias = "np.ndarray | Int8Matrix"


def quantize(w: np.ndarray) -> Int8Matrix:
    """Per-output-channel int8 codes and scales of a float32 matrix (N, K)."""
    codes, scale = ops.quantize_int8(w)
    return Int8Matrix(codes, scale)


def matrix(weights: Mapping[str, np.ndarray], name: str) -> Matrix:
    """Weight ``name``: an :class:`Int8Matrix` when it is stored as int8 codes (with its scales), else the array.

    Raises
    ------
    KeyError
        ``name`` is missing, or its codes are present without ``name + SCALE_SUFFIX``.
    """
    w = weights[name]
    if w.dtype != np.int8:
        return w
    scale = weights.get(name + SCALE_SUFFIX)
    if scale is None:
        raise KeyError(f"int8 weight {name!r} has no scales ({name + SCALE_SUFFIX!r} is missing)")
    return Int8Matrix(w, scale)


def _rounded(y: np.ndarray, round_to_bf16: bool) -> np.ndarray:
    return ops.round_bf16(y, out=y) if round_to_bf16 else y


def linear(
    x: np.ndarray, w: Matrix, bias: np.ndarray | None = None, *, round_to_bf16: bool = False
) -> np.ndarray:
    """``x @ w.T + bias``: :func:`ops.linear_int8` for an :class:`Int8Matrix`, else :func:`ops.linear`."""
    if isinstance(w, Int8Matrix):
        return _rounded(ops.linear_int8(x, w.codes, w.scale, bias), round_to_bf16)
    return ops.linear(x, w, bias, round_to_bf16=round_to_bf16)


def conv3x3s2(x: np.ndarray, kernel: Matrix, bias: np.ndarray | None = None, *, round_to_bf16: bool = False
              ) -> np.ndarray:  # fmt: skip
    """:func:`ops.conv3x3s2`; an :class:`Int8Matrix` kernel (Co, 9 * Ci) multiplies the patches
    (:func:`ops.im2col_3x3s2`) as :func:`ops.linear_int8` does: each output pixel's patch quantized per row."""
    if isinstance(kernel, Int8Matrix):
        n, h, w, _ = x.shape
        y = linear(ops.im2col_3x3s2(x), kernel, bias, round_to_bf16=round_to_bf16)
        return y.reshape(n, (h + 1) // 2, (w + 1) // 2, kernel.shape[0])
    return ops.conv3x3s2(x, kernel, bias, round_to_bf16=round_to_bf16)


def linear_many(x: np.ndarray, ws: Sequence[Matrix], *, round_to_bf16: bool = False) -> list[np.ndarray]:
    """``[x @ w.T for w in ws]``: :func:`ops.linear_many` for float matrices, one `linear` each for int8."""
    if any(isinstance(w, Int8Matrix) for w in ws):
        return [linear(x, w, round_to_bf16=round_to_bf16) for w in ws]
    return ops.linear_many(x, [w for w in ws if isinstance(w, np.ndarray)], round_to_bf16=round_to_bf16)


def linear_rows(x: np.ndarray, w: Matrix, *, round_to_bf16: bool = False) -> np.ndarray:
    """Rows of ``x @ w.T``, each as its one-row product gives it (:func:`ops.linear_rows`).

    :func:`ops.linear_int8` already computes every row alone (per-row activation
    scales, exact int32 sums), so an :class:`Int8Matrix` takes it directly.
    """
    if isinstance(w, Int8Matrix):
        return linear(x, w, round_to_bf16=round_to_bf16)
    return ops.linear_rows(x, w, round_to_bf16=round_to_bf16)
