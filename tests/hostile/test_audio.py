"""Hostile audio files and streams: truncated, lying headers, garbage pipes, damage far inside.

Every file is built here with soundfile. Cases whose failure mode is unbounded work
(a 1 Hz header, a huge block, an endless pipe) run under ``run_case``'s caps.
"""

from __future__ import annotations

import io
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile

from onespeech.features import (
    AudioFileSource,
    CorruptAudioError,
    SampleRateError,
    SpoolLimitError,
    TruncatedAudioError,
    UnreadableAudioError,
    load_audio,
)
from onespeech.features.audio import MAX_BLOCK_SAMPLES, MAX_BLOCK_VALUES


def _tone(n: int, channels: int = 1, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000
    mono = 0.3 * np.sin(2 * np.pi * 330 * t) + 0.01 * rng.standard_normal(n)
    return np.repeat(mono[:, None], channels, axis=1).astype(np.float32)


def _wav(path: Path, seconds: float = 3.0, rate: int = 16000, channels: int = 1) -> Path:
    soundfile.write(path, _tone(int(seconds * rate), channels), rate, subtype="PCM_16", format="WAV")
    return path


def _data_chunk(raw: bytes) -> int:
    """Offset of the WAV data chunk's header."""
    return raw.index(b"data")


class _Pipe(io.RawIOBase):
    """A non-seekable stream: ``head`` then ``body_bytes`` of filler, produced lazily."""

    def __init__(self, head: bytes, body_bytes: int, filler: bytes = b"\x5a") -> None:
        self._head, self._left, self._filler = head, body_bytes, filler
        self.served = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def read(self, size: int = -1) -> bytes:
        if self._head:
            out, self._head = self._head[:size], self._head[size:]
        else:
            n = min(size if size >= 0 else 1 << 20, self._left)
            self._left -= n
            out = (self._filler * (n // len(self._filler) + 1))[:n]
        self.served += len(out)
        return out


# -- truncated files: WAV now fails like FLAC ----------------------------------


@pytest.mark.parametrize("how", ["path", "seekable", "pipe"])
def test_wav_cut_in_half_raises_naming_what_is_missing(tmp_path: Path, how: str) -> None:
    raw = _wav(tmp_path / "a.wav").read_bytes()
    half = tmp_path / "half.wav"
    half.write_bytes(raw[: len(raw) // 2])
    source = {"path": half, "seekable": io.BytesIO(half.read_bytes()), "pipe": _Pipe(half.read_bytes(), 0)}[how]
    with pytest.raises(TruncatedAudioError) as caught:
        load_audio(source)
    error = caught.value
    present = (len(raw) // 2 - _data_chunk(raw) - 8) // 2
    assert (error.declared_frames, error.present_frames) == (48000, present)
    assert f"{48000 - present} frames" in str(error) and "missing" in str(error)


def test_wav_header_longer_than_its_data_raises(tmp_path: Path) -> None:
    raw = bytearray(_wav(tmp_path / "a.wav").read_bytes())
    at = _data_chunk(bytes(raw)) + 4
    struct.pack_into("<I", raw, at, struct.unpack_from("<I", raw, at)[0] + 3200)  # 0.1 s more than present
    (tmp_path / "long.wav").write_bytes(bytes(raw))
    with pytest.raises(TruncatedAudioError, match=r"1600 frames \(0.100 s\) are missing"):
        AudioFileSource(tmp_path / "long.wav")


@pytest.mark.parametrize(("fmt", "subtype", "error"), [
    ("WAV", "PCM_16", TruncatedAudioError), ("WAV", "FLOAT", TruncatedAudioError),
    ("WAVEX", "PCM_24", TruncatedAudioError), ("RF64", "PCM_16", TruncatedAudioError),
    ("W64", "PCM_16", TruncatedAudioError), ("AIFF", "PCM_16", TruncatedAudioError),
    ("AIFF", "FLOAT", TruncatedAudioError),  # written as AIFC fl32
    ("FLAC", "PCM_16", CorruptAudioError),  # the decoder fails on the cut stream
])
def test_truncated_files_fail_alike(tmp_path: Path, fmt: str, subtype: str, error: type) -> None:
    path = tmp_path / "a.audio"
    soundfile.write(path, _tone(16000 * 3, channels=2), 16000, subtype=subtype, format=fmt)
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(error) as caught:
        load_audio(path)
    assert isinstance(caught.value, CorruptAudioError)
    if error is TruncatedAudioError:
        assert caught.value.declared_frames == 48000 and 23000 < caught.value.present_frames < 24000


@pytest.mark.parametrize("size", [0x7FFFF000, 0xFFFFFFFF])
def test_wav_of_unknown_length_from_a_streaming_writer_loads(tmp_path: Path, size: int) -> None:
    path = _wav(tmp_path / "a.wav")
    want = load_audio(path)
    raw = bytearray(path.read_bytes())
    struct.pack_into("<I", raw, _data_chunk(bytes(raw)) + 4, size)
    struct.pack_into("<I", raw, 4, size)
    np.testing.assert_array_equal(load_audio(io.BytesIO(bytes(raw))), want)


def test_wav_with_odd_chunks_before_its_data_loads(tmp_path: Path) -> None:
    path = _wav(tmp_path / "a.wav")
    want = load_audio(path)
    raw = path.read_bytes()
    at = _data_chunk(raw)
    junk = b"JUNK" + struct.pack("<I", 5) + b"abcde\x00"  # odd size: padded to even
    edited = bytearray(raw[:at] + junk + raw[at:])
    struct.pack_into("<I", edited, 4, len(edited) - 8)
    np.testing.assert_array_equal(load_audio(io.BytesIO(bytes(edited))), want)


# -- headers that ask for unbounded work ---------------------------------------


def _with_rate(raw: bytes, rate: int) -> bytes:
    edited = bytearray(raw)
    block_align = struct.unpack_from("<H", edited, 32)[0]
    struct.pack_into("<II", edited, 24, rate, rate * block_align & 0xFFFFFFFF)
    return bytes(edited)


def test_48_kb_wav_claiming_1_hz_is_refused_quickly_in_little_memory(run_case, tmp_path: Path) -> None:
    path = tmp_path / "one_hz.wav"
    path.write_bytes(_with_rate(_wav(tmp_path / "a.wav", seconds=1.5).read_bytes(), 1))
    assert path.stat().st_size < 49_000
    run_case(
        "from onespeech.features import load_audio\nload_audio(args['path'])",
        args={"path": str(path)}, memory_mb=512, timeout_s=30,
    ).expect_error("SampleRateError", match="1 Hz; audio from 1000 to 768000 Hz")


@pytest.mark.parametrize(("rate", "ok"), [(1, False), (999, False), (1000, True), (768_000, True),
                                          (768_001, False), (100_000_000, False)])
def test_sample_rate_range(tmp_path: Path, rate: int, ok: bool) -> None:
    path = tmp_path / "r.wav"
    path.write_bytes(_with_rate(_wav(tmp_path / "a.wav", seconds=0.1).read_bytes(), rate))
    if ok:
        with AudioFileSource(path) as source:
            assert source.input_sample_rate == rate
    else:
        with pytest.raises(SampleRateError, match=f"{rate} Hz"):
            AudioFileSource(path)


def test_a_block_is_bounded_whatever_block_frames_asks(run_case, tmp_path: Path) -> None:
    # 1000 Hz (16x upsampling) with a block of a billion frames
    path = _wav(tmp_path / "slow.wav", seconds=200, rate=1000)
    got = run_case(
        """
        from onespeech.features import AudioFileSource
        with AudioFileSource(args["path"], block_frames=10**9) as source:
            sizes = [block.shape[0] for block in source]
        result = {"largest": max(sizes), "total": sum(sizes)}
        """,
        args={"path": str(path)}, memory_mb=768, timeout_s=60,
    ).expect_ok()
    assert got["largest"] <= MAX_BLOCK_SAMPLES and got["total"] == 200 * 16000


def test_many_channels_read_in_bounded_steps(tmp_path: Path) -> None:
    path = tmp_path / "wide.wav"
    soundfile.write(path, _tone(8000, channels=512), 16000, subtype="PCM_16")
    with AudioFileSource(path, block_frames=10**9) as source:
        assert source._read_frames() * source.channels <= MAX_BLOCK_VALUES
        np.testing.assert_allclose(source.read_all(), _tone(8000)[:, 0], atol=1e-4)


# -- non-seekable input: checked early, spooled up to a limit ------------------


def test_garbage_pipe_is_refused_before_it_is_copied(run_case) -> None:
    got = run_case(
        """
        import io
        from onespeech.features import AudioFileSource, UnreadableAudioError

        class Garbage(io.RawIOBase):
            served = 0
            def readable(self): return True
            def seekable(self): return False
            def read(self, size=-1):
                size = min(size if size >= 0 else 1 << 20, 1 << 30 - self.served)
                self.served += size
                return bytes(size)  # 1 GiB of zeros, never written anywhere

        pipe = Garbage()
        try:
            AudioFileSource(pipe)
        except UnreadableAudioError as error:
            result = {"served": pipe.served, "message": str(error)}
        """,
        memory_mb=512, timeout_s=30,
    ).expect_ok()
    assert got["served"] <= 64 << 10
    assert "not an audio format" in got["message"] and "nothing more was read" in got["message"]


def test_spool_is_capped(tmp_path: Path) -> None:
    head = _wav(tmp_path / "a.wav").read_bytes()
    before = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("onespeech-spool-*"))
    pipe = _Pipe(head, 50 << 20)
    with pytest.raises(SpoolLimitError, match="longer than max_spool_bytes=1048576"):
        AudioFileSource(pipe, max_spool_bytes=1 << 20)
    assert pipe.served <= (1 << 20) + 1 + (64 << 10)
    assert set(Path(os.environ.get("TMPDIR", "/tmp")).glob("onespeech-spool-*")) == before


def test_pipe_within_the_cap_is_read_whole(tmp_path: Path) -> None:
    raw = _wav(tmp_path / "a.wav").read_bytes()
    np.testing.assert_array_equal(load_audio(_Pipe(raw, 0)), load_audio(tmp_path / "a.wav"))
    with AudioFileSource(_Pipe(raw, 0), max_spool_bytes=len(raw)) as source:
        assert source.read_all().shape == (48000,)
    with pytest.raises(SpoolLimitError):
        AudioFileSource(_Pipe(raw, 0), max_spool_bytes=len(raw) - 1)


def test_unrecognised_pipe_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnreadableAudioError, match="first 5 bytes"):
        AudioFileSource(_Pipe(b"hello", 0))


# -- damage far inside a FLAC file: reported where it is ------------------------


@pytest.mark.parametrize("fraction", [0.25, 0.75])
def test_corrupt_flac_reports_where_the_damage_is(tmp_path: Path, fraction: float) -> None:
    path = tmp_path / "c.flac"
    soundfile.write(path, _tone(16000 * 20), 16000, subtype="PCM_16")
    raw = bytearray(path.read_bytes())
    at = int(len(raw) * fraction)
    raw[at : at + 4000] = np.random.default_rng(3).integers(0, 256, 4000, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptAudioError) as caught:
        load_audio(path)
    seconds = float(str(caught.value).split("(")[1].split(" s into")[0])
    # the tone compresses evenly: the damage sits at about `fraction` of the 20 s
    assert abs(seconds - 20 * fraction) < 1.5, str(caught.value)
