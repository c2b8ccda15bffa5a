import pytest

from onespeech.kernels import Precision


@pytest.mark.parametrize(
    ("value", "member"),
    [
        ("fp32", Precision.FLOAT32),
        ("FP32", Precision.FLOAT32),
        ("float32", Precision.FLOAT32),
        ("binary32", Precision.FLOAT32),
        ("bf16", Precision.BFLOAT16),
        (" BFloat16 ", Precision.BFLOAT16),
        (Precision.BFLOAT16, Precision.BFLOAT16),
        ("int8", Precision.INT8),
        (" INT8", Precision.INT8),
    ],
)
def test_parse_accepts_members_values_and_names(value, member) -> None:
    assert Precision.parse(value) is member


@pytest.mark.parametrize("value", ["int4", "", "fp16", 32, None])
def test_parse_refuses_anything_else(value) -> None:
    with pytest.raises(ValueError, match=r"use Precision.FLOAT32 \('fp32'\), Precision.BFLOAT16 \('bf16'\) or Precision.INT8 \('int8'\)"):
        Precision.parse(value)


def test_values_name_the_runtime_files() -> None:
    assert [p.value for p in Precision] == ["fp32", "bf16", "int8"]
