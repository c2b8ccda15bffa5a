from pathlib import Path

import numpy as np
import pytest

from onespeech.features import (
    NonFiniteSampleError,
    PcmError,
    PcmPowerOverflowError,
    PcmShapeError,
    PcmTooLongError,
    PcmTooShortError,
    validate_pcm,
)


def test_empty_pcm_is_valid_and_float32() -> None:
    out = validate_pcm(np.zeros(0, dtype=np.float64))
    assert out.dtype == np.float32 and out.shape == (0,)


def test_valid_float32_is_returned_without_copy() -> None:
    pcm = np.linspace(-1, 1, 1000, dtype=np.float32)
    assert validate_pcm(pcm) is pcm


def test_float64_is_converted_to_float32() -> None:
    pcm = np.linspace(-1, 1, 1000)
    out = validate_pcm(pcm)
    assert out.dtype == np.float32 and out.flags.c_contiguous
    np.testing.assert_array_equal(out, pcm.astype(np.float32))


@pytest.mark.parametrize("n", [1, 100, 200])
def test_nonempty_pcm_of_200_samples_or_fewer_is_too_short(n: int) -> None:
    with pytest.raises(PcmTooShortError, match=f"has {n} samples.*more than 200") as info:
        validate_pcm(np.zeros(n, dtype=np.float32))
    assert info.value.n_samples == n
    assert isinstance(info.value, PcmError) and isinstance(info.value, ValueError)


def test_201_samples_are_enough() -> None:
    assert validate_pcm(np.zeros(201, dtype=np.float32)).shape == (201,)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_sample_names_its_index(bad: float) -> None:
    pcm = np.zeros(1000, dtype=np.float32)
    pcm[777] = bad
    pcm[900] = bad
    with pytest.raises(NonFiniteSampleError, match="sample 777 is") as info:
        validate_pcm(pcm)
    assert info.value.index == 777


def test_power_overflow_is_rejected_with_the_power() -> None:
    pcm = np.full(1000, 1e18, dtype=np.float32)  # each square 1e36, the sum 1e39
    with pytest.raises(PcmPowerOverflowError, match="power .* is 1e\\+39") as info:
        validate_pcm(pcm)
    assert info.value.power == pytest.approx(1e39, rel=1e-6)


def test_power_just_inside_float32_is_accepted() -> None:
    pcm = np.full(1000, 1e17, dtype=np.float32)  # sum of squares 1e37
    validate_pcm(pcm)


def test_float64_beyond_float32_range_is_a_power_overflow() -> None:
    pcm = np.zeros(1000)
    pcm[3] = 1e200
    with pytest.raises(PcmPowerOverflowError):
        validate_pcm(pcm)


def test_two_dimensional_pcm_is_rejected() -> None:
    with pytest.raises(PcmShapeError, match=r"shape \(1000, 2\).*1-D"):
        validate_pcm(np.zeros((1000, 2), dtype=np.float32))


def test_integer_pcm_is_rejected() -> None:
    with pytest.raises(PcmShapeError, match="dtype int16"):
        validate_pcm(np.zeros(1000, dtype=np.int16))


def test_max_samples_bound() -> None:
    validate_pcm(np.zeros(500, dtype=np.float32), max_samples=500)
    with pytest.raises(PcmTooLongError, match="501 samples.*at most 500"):
        validate_pcm(np.zeros(501, dtype=np.float32), max_samples=500)


@pytest.mark.parametrize("source", ["clip.wav", b"clip.wav", Path("clip.wav")])
def test_a_file_name_is_refused_with_the_loader_named(source) -> None:
    with pytest.raises(PcmShapeError, match=r"where 16 kHz mono PCM samples are expected.*load_audio\(path\)"):
        validate_pcm(source)


def test_streamed_pcm_checks_values_per_block_and_length_and_power_on_the_whole() -> None:
    from onespeech.features.pcm import StreamedPcm

    checks = StreamedPcm()
    for block in (np.zeros(150, np.float32), np.zeros(0), np.zeros(51, np.float64)):
        assert checks.block(block).dtype == np.float32  # blocks of any length, 200 samples or fewer too
    assert checks.finish() == 201
    short = StreamedPcm()
    short.block(np.zeros(120, np.float32))
    short.block(np.zeros(80, np.float32))
    with pytest.raises(PcmTooShortError, match="audio has 200 samples"):
        short.finish()
    assert StreamedPcm().finish() == 0  # empty audio is valid
    nan = StreamedPcm()
    nan.block(np.zeros(300, np.float32))
    with pytest.raises(NonFiniteSampleError, match="sample 305 is nan"):  # on the audio's clock
        nan.block(np.array([0, 0, 0, 0, 0, np.nan], np.float32))
    loud = StreamedPcm()
    loud.block(np.full(2, 1.3e19, np.float32))  # power 3.4e38: each block alone fits float32
    with pytest.raises(PcmPowerOverflowError):
        loud.block(np.full(2, 1.3e19, np.float32))
    with pytest.raises(PcmShapeError):
        StreamedPcm().block(np.zeros((2, 2), np.float32))
