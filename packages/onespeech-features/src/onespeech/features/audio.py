"""Audio files as 16 kHz mono float32 blocks (the spec's OneAudio / AudioFileSource).

Decoding is libsndfile through ``soundfile`` (WAV, FLAC, OGG/Vorbis, Opus, and MP3
where the installed libsndfile supports it: no ffmpeg needed); channels are averaged
to mono; resampling is ``soxr`` at "HQ" quality, streamed, so an hour-long file is
never held in memory whole. The streamed resampler gives exactly the samples of a
one-shot ``soxr.resample`` of the whole file, so every block sits on one exact
16 kHz sample clock: the first sample of a block has index ``position`` before it
is yielded.

Non-seekable input (a pipe, stdin, an HTTP body) is spooled once to a temporary file,
so the source can be replayed (file transcription replays it through a fresh VAD);
the spool is deleted when the source closes.

Limits, so that a small or hostile input cannot cause unbounded work:
- input sample rates from 1000 Hz to 768 kHz (`SampleRateError` otherwise; the rule of
  every input path, ``onespeech.features.pcm.check_sample_rate``): a header
  claiming 1 Hz turned 48 KB of WAV into 384 M samples; 1000 Hz bounds the upsampling
  to 16x (8 kHz telephony and every real rate pass);
- each decode step reads at most 4 Mi values (all channels) and produces at most
  1 Mi output samples (65.5 s), whatever ``block_frames`` asks;
- a WAV, RF64, W64 or AIFF file whose sound data declares more bytes than the file
  holds raises `TruncatedAudioError` naming how much is missing (libsndfile decodes
  the part present without a word; a truncated FLAC already failed to decode);
- a non-seekable stream must look like audio in its first 64 KiB (else
  `UnreadableAudioError` before the rest is copied) and is spooled up to
  ``max_spool_bytes`` (2 GiB by default; `SpoolLimitError` beyond).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import soundfile
import soxr

from onespeech.features.errors import (
    CorruptAudioError,
    NoChannelsError,
    SpoolLimitError,
    TruncatedAudioError,
    UnreadableAudioError,
)
from onespeech.features.pcm import SAMPLE_RATE, check_sample_rate
from onespeech.features.pcm_header import pcm_shortfall
from onespeech.kernels.errors import ObjectClosedError

DEFAULT_BLOCK_FRAMES = 1 << 16  # input frames read per block (~1.5 s at 44.1 kHz)
MAX_BLOCK_VALUES = 1 << 22  # decoded float32 values per read, all channels: 16 MiB
MAX_BLOCK_SAMPLES = 1 << 20  # 16 kHz output samples per block: 4 MiB, 65.5 s
DEFAULT_MAX_SPOOL_BYTES = 2 << 30  # 2 GiB: ~3 h of 48 kHz stereo 16-bit WAV
_RESAMPLER_SLACK = 1 << 14  # soxr HQ holds back far fewer output samples than this between steps
_SPOOL_COPY_BYTES = 1 << 20
_PROBE_BYTES = 64 << 10  # libsndfile recognises every format it reads from its first bytes
_LOCATE_FRAMES = 1024  # step of the re-decode that locates damage
_SF_ERR_UNRECOGNISED_FORMAT = 1  # libsndfile's public error code


class AudioFileSource:
    """An audio file or binary stream read as 16 kHz mono float32 blocks.

    Parameters
    ----------
    source : str, os.PathLike or binary file object
        A path, or an object with ``read`` (seekable or not). Non-seekable streams
        are copied once to a temporary spool file.
    block_frames : int
        Input frames decoded per step; bounds memory whatever the file length
        (capped so a step decodes at most 4 Mi values and yields at most 1 Mi samples).
    max_spool_bytes : int
        The most bytes a non-seekable stream may spool (default 2 GiB).

    Iterating yields ``ndarray[float32], shape (n,)`` blocks (``n`` varies; the
    resampler holds back a few samples until the end). Each iteration starts again
    from the beginning of the audio with a fresh resampler, so the source can be
    replayed with identical samples. Use as a context manager, or call ``close``.

    Raises
    ------
    FileNotFoundError, PermissionError
        The path cannot be opened.
    UnreadableAudioError
        The data is not audio in a format the installed libsndfile decodes.
    NoChannelsError
        The file declares zero channels.
    SampleRateError
        The file declares a sample rate outside 1000..768000 Hz.
    TruncatedAudioError
        A WAV, RF64, W64 or AIFF header declares more audio than the file holds (names how much is missing).
    SpoolLimitError
        A non-seekable stream is longer than ``max_spool_bytes``.
    CorruptAudioError
        Decoding failed part way (names the input frame and time where it failed).
    """

    def __init__(
        self,
        source: str | os.PathLike[str] | BinaryIO,
        *,
        block_frames: int = DEFAULT_BLOCK_FRAMES,
        max_spool_bytes: int = DEFAULT_MAX_SPOOL_BYTES,
    ):
        if block_frames < 1:
            raise ValueError(f"block_frames={block_frames}; it must be at least 1")
        if max_spool_bytes < 1:
            raise ValueError(f"max_spool_bytes={max_spool_bytes}; it must be at least 1")
        self._block_frames = block_frames
        self._closed = False
        self._spool: Path | None = None
        self._stream: BinaryIO | None = None
        if isinstance(source, (str, os.PathLike)):
            self.name = os.fspath(source)
            with open(self.name, "rb"):  # missing or unreadable paths raise OSError naming the file
                pass
            self._path: str | None = self.name
        else:
            self.name = str(getattr(source, "name", "<stream>"))
            self._path = None
            if _is_seekable(source):
                self._stream = source
                self._stream_start = source.tell()
            else:
                self._spool = _spool(source, self.name, max_spool_bytes)
                self._path = str(self._spool)
        try:
            info = self._open()
            with info:
                self.input_sample_rate: int = info.samplerate
                self.channels: int = info.channels
                self.input_frames: int = info.frames
                self.format: str = f"{info.format}/{info.subtype}"
            self._check_header()
        except BaseException:
            self.close()
            raise
        self.position = 0  # 16 kHz samples yielded so far by the current iteration

    def _check_header(self) -> None:
        rate = check_sample_rate(self.input_sample_rate, self.name, subject="the header declares a sample rate of")
        if self._stream is not None:
            start = self._stream_start
            size = self._stream.seek(0, os.SEEK_END) - start
            shortfall = pcm_shortfall(self._stream, start, size)
        else:
            assert self._path is not None
            with open(self._path, "rb") as handle:
                shortfall = pcm_shortfall(handle, 0, os.fstat(handle.fileno()).st_size)
        if shortfall is not None:
            raise TruncatedAudioError(self.name, shortfall.declared_frames, shortfall.present_frames, rate)

    @property
    def spool_path(self) -> Path | None:
        """The temporary copy of a non-seekable stream (deleted on ``close``)."""
        return self._spool

    @property
    def duration_s(self) -> float:
        """Duration declared by the file header, in seconds."""
        return self.input_frames / self.input_sample_rate

    def __iter__(self) -> Iterator[np.ndarray]:
        return self.blocks()

    def blocks(self) -> Iterator[np.ndarray]:
        """Yield the whole audio from the start as 16 kHz mono float32 blocks."""
        self.position = 0
        with self._open() as sound:
            resampler = None
            if sound.samplerate != SAMPLE_RATE:
                resampler = soxr.ResampleStream(sound.samplerate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")
            read_frames = 0
            step = self._read_frames()
            while True:
                try:
                    frames = sound.read(step, dtype="float32", always_2d=True)
                except soundfile.LibsndfileError as error:
                    raise self._corrupt(read_frames, error) from error
                read_frames += frames.shape[0]
                last = frames.shape[0] == 0
                mono = frames.mean(axis=1, dtype=np.float32) if frames.shape[0] else frames[:, 0]
                block = resampler.resample_chunk(mono, last=last) if resampler is not None else mono
                if block.shape[0]:
                    block = np.ascontiguousarray(block, dtype=np.float32)
                    self.position += block.shape[0]
                    yield block
                if last:
                    return

    def _read_frames(self) -> int:
        """Input frames per decode step: ``block_frames``, capped by the block bounds (module doc)."""
        by_values = MAX_BLOCK_VALUES // self.channels
        by_output = (MAX_BLOCK_SAMPLES - _RESAMPLER_SLACK) * self.input_sample_rate // SAMPLE_RATE
        return max(1, min(self._block_frames, by_values, by_output))

    def _corrupt(self, block_start: int, error: soundfile.LibsndfileError) -> CorruptAudioError:
        """The decode error, located to within `_LOCATE_FRAMES` input frames.

        A step decodes up to `_read_frames` frames, so the failing step alone says little
        (every error in a short file was "after input frame 0"). Only on failure, the file
        is decoded again in small steps up to the damage.
        """
        good = self._decodable_frames(block_start)
        rate = self.input_sample_rate
        return CorruptAudioError(
            self.name,
            f"decoding failed between input frames {good} and {good + _LOCATE_FRAMES} ({good / rate:.3f} s "
            f"into the audio, of {self.input_frames} frames declared): {error.error_string}",
        )

    def _decodable_frames(self, block_start: int) -> int:
        """Frames that decode before the first error: in whole steps up to ``block_start``
        (they decoded before), then in steps of `_LOCATE_FRAMES`."""
        decoded = 0
        try:
            with self._open() as sound:
                while decoded < block_start:
                    step = min(self._read_frames(), block_start - decoded)
                    decoded += sound.read(step, dtype="float32", always_2d=True).shape[0]
                while True:
                    got = sound.read(_LOCATE_FRAMES, dtype="float32", always_2d=True).shape[0]
                    if got == 0:
                        break
                    decoded += got
        except soundfile.LibsndfileError:
            pass  # the damage: ``decoded`` frames came before it
        return decoded

    def read_all(self) -> np.ndarray:
        """The whole audio as one 16 kHz mono float32 array."""
        blocks = list(self.blocks())
        return np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.float32)

    def close(self) -> None:
        """Delete the spool file, if any. The source cannot be read afterwards."""
        self._closed = True
        if self._spool is not None:
            self._spool.unlink(missing_ok=True)
            self._spool = None
            self._path = None
        self._stream = None

    def __enter__(self) -> AudioFileSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # a forgotten source must not leave its spool behind
        if getattr(self, "_spool", None) is not None:
            self.close()

    def _open(self) -> soundfile.SoundFile:
        if self._closed or (self._path is None and self._stream is None):
            raise ObjectClosedError(f"{self.name}: the audio source is closed; open a new AudioFileSource to read it")
        try:
            if self._stream is not None:
                self._stream.seek(self._stream_start)
                sound = _SequentialSoundFile(self._stream)
            else:
                sound = _SequentialSoundFile(self._path)
        except soundfile.LibsndfileError as error:
            cause = error.error_string
            if "channel count is zero" in cause.lower():
                raise NoChannelsError(self.name, "the file declares zero audio channels") from error
            raise UnreadableAudioError(
                self.name, f"not an audio format the installed libsndfile {soundfile.__libsndfile_version__} "
                f"decodes ({cause})"
            ) from error
        if sound.channels < 1:
            sound.close()
            raise NoChannelsError(self.name, "the file declares zero audio channels")
        return sound


class _SequentialSoundFile(soundfile.SoundFile):
    """A SoundFile read front to back without seeking.

    For seekable files soundfile seeks after every ``read`` (to refresh its position).
    libsndfile's MPEG decoder restarts on each seek and loses its bit reservoir, so
    MP3 read in blocks came out with glitches (up to 0.1) at block boundaries.
    Reading without seeks decodes exactly as one whole-file read (as ``librosa.load``,
    the reference toolkit's loader, does).
    """

    def seekable(self) -> bool:
        return False


def load_audio(source: str | os.PathLike[str] | BinaryIO) -> np.ndarray:
    """Decode a whole file to 16 kHz mono float32.

    Parameters
    ----------
    source : str, os.PathLike or binary file object
        Anything :class:`AudioFileSource` accepts.

    Returns
    -------
    ndarray[float32], shape (n_samples,)
    """
    with AudioFileSource(source) as audio:
        return audio.read_all()


def _is_seekable(stream: BinaryIO) -> bool:
    try:
        return bool(stream.seekable()) and stream.tell() >= 0
    except (AttributeError, OSError, ValueError):
        return False


def _spool(stream: BinaryIO, name: str, max_bytes: int) -> Path:
    """Copy a non-seekable stream to a temporary file and return its path.

    The first `_PROBE_BYTES` are checked before the rest is copied: data libsndfile
    does not recognise as any format is refused at once. At most ``max_bytes`` are copied.
    """
    handle = tempfile.NamedTemporaryFile(prefix="onespeech-spool-", suffix=".audio", delete=False)
    path = Path(handle.name)
    try:
        with handle:
            head = _read_up_to(stream, _PROBE_BYTES)
            handle.write(head)
            handle.flush()
            _refuse_unrecognised(path, name)
            copied = len(head)
            while copied <= max_bytes:
                data = stream.read(min(_SPOOL_COPY_BYTES, max_bytes + 1 - copied))
                if not data:
                    break
                handle.write(data)
                copied += len(data)
            if copied > max_bytes:
                raise SpoolLimitError(
                    name, f"the stream is longer than max_spool_bytes={max_bytes} bytes, the most a non-seekable "
                    "input is copied to a temporary file; pass a path or a seekable file, or raise max_spool_bytes"
                )
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


def _read_up_to(stream: BinaryIO, size: int) -> bytes:
    """Up to ``size`` bytes, fewer only at the end of the stream (pipes return short reads)."""
    parts, got = [], 0
    while got < size:
        data = stream.read(size - got)
        if not data:
            break
        parts.append(data)
        got += len(data)
    return b"".join(parts)


def _refuse_unrecognised(path: Path, name: str) -> None:
    """Raise UnreadableAudioError if libsndfile recognises no format in the spool's first bytes.

    Only "format not recognised" is final at this point (libsndfile tells formats
    apart by their first bytes); any other error, such as a header cut short by the
    probe, is left to the open of the whole spool.
    """
    with open(path, "rb") as handle:
        magic = handle.read(4)
    # MP3 is left to the full open: its ID3 tag (cover art) may outrun the probe, and
    # libmpg123 warns on stderr about a stream cut short
    if magic[:3] == b"ID3" or (len(magic) > 1 and magic[0] == 0xFF and magic[1] & 0xE0 == 0xE0):
        return
    try:
        soundfile.SoundFile(str(path)).close()
    except soundfile.LibsndfileError as error:
        if error.code == _SF_ERR_UNRECOGNISED_FORMAT:
            raise UnreadableAudioError(
                name, f"the first {path.stat().st_size} bytes of the stream are not an audio format the installed "
                f"libsndfile {soundfile.__libsndfile_version__} decodes (nothing more was read)"
            ) from error
