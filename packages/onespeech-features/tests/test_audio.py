import io
import os
import struct
import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile
import soxr

from onespeech.features import (
    AudioError,
    AudioFileSource,
    CorruptAudioError,
    NoChannelsError,
    UnreadableAudioError,
    load_audio,
)


def _write(path: Path, data: np.ndarray, rate: int, fmt: str = "WAV", subtype: str = "FLOAT") -> Path:
    soundfile.write(str(path), data, rate, format=fmt, subtype=subtype)
    return path


def _tone(n: int, rate: int, channels: int) -> np.ndarray:
    t = np.arange(n) / rate
    columns = [0.3 * np.sin(2 * np.pi * (220 + 110 * c) * t) for c in range(channels)]
    return np.stack(columns, axis=1).astype(np.float32)


class _Pipe(io.RawIOBase):
    """A readable stream that cannot seek, like stdin or an HTTP body."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        chunk = self._data.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)


def test_16k_mono_float_wav_is_returned_unchanged(tmp_path: Path) -> None:
    data = _tone(16000, 16000, 1)
    out = load_audio(_write(tmp_path / "a.wav", data, 16000))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, data[:, 0])


def test_stereo_44k_is_averaged_and_resampled_with_soxr_hq(tmp_path: Path) -> None:
    data = _tone(44100 * 2 + 17, 44100, 2)
    want = soxr.resample(data.mean(axis=1, dtype=np.float32), 44100, 16000, quality="HQ")
    out = load_audio(_write(tmp_path / "s.flac", data, 44100, "FLAC", "PCM_24"))
    pcm24 = soundfile.read(str(tmp_path / "s.flac"), dtype="float32", always_2d=True)[0]
    want = soxr.resample(pcm24.mean(axis=1, dtype=np.float32), 44100, 16000, quality="HQ")
    assert out.shape == want.shape
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("block_frames", [1, 1000, 4096, 1 << 20])
def test_blocks_lie_on_one_sample_clock_for_any_block_size(tmp_path: Path, block_frames: int) -> None:
    data = _tone(22050 * 3 + 5, 22050, 1)
    path = _write(tmp_path / "b.wav", data, 22050)
    whole = soxr.resample(data[:, 0], 22050, 16000, quality="HQ")
    with AudioFileSource(path, block_frames=block_frames) as source:
        position = 0
        pieces = []
        for block in source:
            assert block.dtype == np.float32 and block.ndim == 1
            position += block.shape[0]
            assert source.position == position
            pieces.append(block)
    np.testing.assert_array_equal(np.concatenate(pieces), whole)


def test_empty_file_gives_no_samples(tmp_path: Path) -> None:
    path = _write(tmp_path / "empty.wav", np.zeros((0, 2), dtype=np.float32), 44100)
    with AudioFileSource(path) as source:
        assert list(source) == [] and source.position == 0
    assert load_audio(path).shape == (0,)


def test_source_reports_the_input_format(tmp_path: Path) -> None:
    path = _write(tmp_path / "f.wav", _tone(8000, 8000, 3), 8000, subtype="PCM_16")
    with AudioFileSource(path) as source:
        assert (source.input_sample_rate, source.channels, source.input_frames) == (8000, 3, 8000)
        assert source.duration_s == 1.0
        assert source.format == "WAV/PCM_16"


def test_source_can_be_replayed_with_identical_samples(tmp_path: Path) -> None:
    path = _write(tmp_path / "r.wav", _tone(30000, 48000, 2), 48000)
    with AudioFileSource(path, block_frames=777) as source:
        first = source.read_all()
        second = np.concatenate(list(source))
    np.testing.assert_array_equal(first, second)


def test_seekable_stream_is_read_in_place(tmp_path: Path) -> None:
    path = _write(tmp_path / "m.wav", _tone(16000, 24000, 1), 24000)
    want = load_audio(path)
    with open(path, "rb") as handle, AudioFileSource(handle) as source:
        assert source.spool_path is None
        np.testing.assert_array_equal(source.read_all(), want)
        np.testing.assert_array_equal(source.read_all(), want)


def test_non_seekable_stream_is_spooled_and_the_spool_deleted_on_close(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.flac", _tone(20000, 16000, 2), 16000, "FLAC", "PCM_16")
    want = load_audio(path)
    with AudioFileSource(_Pipe(path.read_bytes())) as source:
        spool = source.spool_path
        assert spool is not None and spool.is_file()
        np.testing.assert_array_equal(source.read_all(), want)
        np.testing.assert_array_equal(source.read_all(), want)  # replay from the spool
    assert not spool.exists()


def test_os_pipe_is_spooled(tmp_path: Path) -> None:
    path = _write(tmp_path / "q.wav", _tone(9000, 16000, 1), 16000)
    data = path.read_bytes()
    read_fd, write_fd = os.pipe()

    def feed() -> None:
        with os.fdopen(write_fd, "wb") as writer:
            writer.write(data)

    thread = threading.Thread(target=feed)
    thread.start()
    with os.fdopen(read_fd, "rb") as reader:
        out = load_audio(reader)
    thread.join()
    np.testing.assert_array_equal(out, load_audio(path))


def test_missing_file_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nothing.wav"):
        AudioFileSource(tmp_path / "nothing.wav")


def test_data_that_is_not_audio_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "notes.wav"
    path.write_bytes(b"these are not samples " * 50)
    with pytest.raises(UnreadableAudioError, match="notes.wav.*Format not recognised") as info:
        load_audio(path)
    assert info.value.path == str(path) and isinstance(info.value, AudioError)


def test_unreadable_stream_is_refused_and_its_spool_removed() -> None:
    before = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("onespeech-spool-*"))
    with pytest.raises(UnreadableAudioError):
        AudioFileSource(_Pipe(b"\x00\x01" * 300))
    after = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("onespeech-spool-*"))
    assert after <= before


def test_zero_channels_is_refused(tmp_path: Path) -> None:
    # a WAV header whose fmt chunk says 0 channels
    fmt = struct.pack("<IHHIIHH", 16, 1, 0, 16000, 32000, 2, 16)
    body = b"WAVEfmt " + fmt + b"data" + struct.pack("<I", 100) + bytes(100)
    path = tmp_path / "zero.wav"
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    with pytest.raises(NoChannelsError, match="zero.wav: the file declares zero audio channels"):
        AudioFileSource(path)


def test_corrupt_data_is_reported_with_its_position(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.flac", _tone(16000 * 20, 16000, 1), 16000, "FLAC", "PCM_16")
    raw = bytearray(path.read_bytes())
    middle = len(raw) // 2
    raw[middle : middle + 20000] = np.random.default_rng(3).integers(0, 256, 20000, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptAudioError, match="c.flac: decoding failed between input frames"):
        load_audio(path)


def test_closed_source_cannot_be_read(tmp_path: Path) -> None:
    source = AudioFileSource(_Pipe(_write(tmp_path / "x.wav", _tone(4000, 16000, 1), 16000).read_bytes()))
    source.close()
    with pytest.raises(ValueError, match="closed"):
        source.read_all()


def test_block_frames_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="block_frames=0"):
        AudioFileSource(tmp_path / "any.wav", block_frames=0)


def test_real_clips_decode_as_the_oracle_decoded_them(feature_cases: dict[str, Path], shared_data: Path) -> None:
    for clip in sorted((shared_data / "audio").iterdir()):
        if clip.suffix not in {".wav", ".flac", ".mp3"}:
            continue
        name = clip.stem + clip.suffix.replace(".", "_")
        with np.load(feature_cases[name], allow_pickle=False) as case:
            np.testing.assert_array_equal(load_audio(clip), case["pcm"], err_msg=name)


def test_mp3_read_in_small_blocks_decodes_like_one_read(shared_data: Path) -> None:
    # soundfile seeks after each read; libsndfile's MPEG decoder then glitched at
    # block boundaries (errors up to 0.1). The source reads without seeking.
    clip = shared_data / "audio" / "multilingual_en_de.mp3"
    with AudioFileSource(clip, block_frames=4096) as small, AudioFileSource(clip, block_frames=1 << 22) as one:
        np.testing.assert_array_equal(small.read_all(), one.read_all())


@pytest.mark.parametrize(
    ("fmt", "subtype", "rate"),
    [("FLAC", "PCM_16", 22050), ("OGG", "VORBIS", 44100), ("OGG", "OPUS", 48000), ("MP3", "MPEG_LAYER_III", 44100)],
)
def test_compressed_formats_decode_to_16k(tmp_path: Path, fmt: str, subtype: str, rate: int) -> None:
    if subtype not in soundfile.available_subtypes(fmt):
        pytest.skip(f"the installed libsndfile cannot write {fmt}/{subtype}")
    data = _tone(rate * 2, rate, 2)
    path = _write(tmp_path / f"t.{fmt.lower()}", data, rate, fmt, subtype)
    out = load_audio(path)
    assert out.dtype == np.float32
    assert abs(out.shape[0] - 32000) <= 32000 * 0.05  # codec priming/padding aside, 2 s at 16 kHz
    assert 0.05 < float(np.sqrt(np.mean(out**2))) < 0.5  # the tone survived
