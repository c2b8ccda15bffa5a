"""Precision: the one spelling of a runtime graph's number format.

Every signature that takes a precision accepts a :class:`Precision` member or one
of its strings (``"fp32"``, ``"bf16"``, ``"int8"``) and reads it through :meth:`Precision.parse`;
file names and manifests use the member's value.
"""

from __future__ import annotations

import enum

__all__ = ["Precision"]


class Precision(enum.Enum):
    """Weight storage and activation arithmetic of the runtime graphs.

    FLOAT32 (the spec's Binary32) expands the published bfloat16 tensors exactly and
    keeps float32 activations. BFLOAT16 keeps bfloat16 storage, accumulates in float32
    and rounds operator outputs to nearest-even bfloat16 (attention scores and softmax
    stay float32; the attended output is rounded). INT8 stores the Linear layers'
    weights as int8 codes with one float32 scale per output channel, quantizes
    their input per token at run time and sums the products exactly in int32; the
    other tensors keep the published bfloat16 values and activations stay float32.
    """

    FLOAT32 = "fp32"
    BFLOAT16 = "bf16"
    INT8 = "int8"

    @classmethod
    def parse(cls, value: Precision | str) -> Precision:
        """The member for ``value``: a member, or its value or name in any case.

        ``"fp32"``, ``"float32"``, ``"bf16"``, ``"bfloat16"`` and ``"int8"`` (and the
        spec's ``"binary32"``) are accepted.

        Raises
        ------
        ValueError
            Any other value.
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            member = _BY_KEY.get(value.strip().lower())
            if member is not None:
                return member
        raise ValueError(
            f"precision {value!r} is not supported; use Precision.FLOAT32 ('fp32'), Precision.BFLOAT16 ('bf16') "
            "or Precision.INT8 ('int8')"
        )


_BY_KEY = {
    "fp32": Precision.FLOAT32,
    "float32": Precision.FLOAT32,
    "binary32": Precision.FLOAT32,
    "bf16": Precision.BFLOAT16,
    "bfloat16": Precision.BFLOAT16,
    "int8": Precision.INT8,
}
