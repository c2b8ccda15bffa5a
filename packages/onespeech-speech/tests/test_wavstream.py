"""WAV and raw PCM from a pipe (no seeking), as `onespeech stream -` reads stdin."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
import soundfile

from onespeech.features.errors import UnreadableAudioError
from onespeech.speech.wavstream import read_blocks


class _Pipe(io.RawIOBase):
    """A non-seekable stream that hands out at most `step` bytes per read."""

    def __init__(self, data: bytes, step: int = 7) -> None:
        self._data, self._pos, self._step = data, 0, step

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        n = self._step if n < 0 else min(n, self._step)
        out = self._data[self._pos : self._pos + n]
        self._pos += len(out)
        return out


def _wav(samples: np.ndarray, rate: int, subtype: str, unknown_size: bool = False) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format="WAV", subtype=subtype)
    data = bytearray(buffer.getvalue())
    if unknown_size:  # what a recorder writing to a pipe leaves in the header
        data[4:8] = struct.pack("<I", 0xFFFFFFFF)
        index = data.index(b"data")
        data[index + 4 : index + 8] = struct.pack("<I", 0xFFFFFFFF)
    return bytes(data)


def _read(data: bytes, **kwargs: int) -> tuple[object, np.ndarray]:
    fmt, blocks = read_blocks(_Pipe(data), block_bytes=100, **kwargs)
    parts = list(blocks)
    return fmt, np.concatenate(parts) if parts else np.zeros(0)


def test_raw_s16le_is_read_as_int16_at_the_given_rate() -> None:
    samples = np.arange(-500, 501, dtype=np.int16) * 30
    fmt, out = _read(samples.astype("<i2").tobytes() + b"\x01", raw_rate=8000)  # a stray last byte is dropped
    assert fmt.sample_rate == 8000 and fmt.channels == 1
    assert out.dtype == np.int16 and np.array_equal(out, samples)


@pytest.mark.parametrize("unknown_size", [False, True])
def test_a_wav_stream_gives_its_own_format_and_samples(unknown_size: bool) -> None:
    rng = np.random.default_rng(0)
    samples = (rng.uniform(-0.5, 0.5, 3001) * 32767).astype(np.int16)
    fmt, out = _read(_wav(samples, 22050, "PCM_16", unknown_size))
    assert fmt.sample_rate == 22050 and fmt.channels == 1
    assert np.array_equal(out, samples)


def test_stereo_float_wav_is_averaged_to_mono() -> None:
    rng = np.random.default_rng(1)
    stereo = rng.uniform(-0.5, 0.5, (1000, 2)).astype(np.float32)
    fmt, out = _read(_wav(stereo, 16000, "FLOAT"))
    assert fmt.channels == 2
    np.testing.assert_array_equal(out, stereo.mean(axis=1, dtype=np.float32))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"RIFF\x00\x00\x00\x00WAVE", "ended before its data chunk"),
        (b"RIFF\x00\x00\x00\x00WAVEdata\x00\x00\x00\x00", "no 'fmt ' chunk"),
        (b"RIFF\x00\x00\x00\x00WAVEfmt \x10\x00\x00\x00" + struct.pack("<HHIIHH", 1, 1, 16000, 0, 0, 24), "24-bit"),
    ],
)
def test_a_bad_wav_header_is_refused_with_the_reason(data: bytes, message: str) -> None:
    with pytest.raises(UnreadableAudioError, match=message):
        read_blocks(_Pipe(data))
