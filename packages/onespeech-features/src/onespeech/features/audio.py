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
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import soundfile
import soxr

from onespeech.features.errors import CorruptAudioError, NoChannelsError, UnreadableAudioError
from onespeech.features.pcm import SAMPLE_RATE
from onespeech.kernels.errors import ObjectClosedError

DEFAULT_BLOCK_FRAMES = 1 << 16  # input frames read per block (~1.5 s at 44.1 kHz)
_SPOOL_COPY_BYTES = 1 << 20


class AudioFileSource:
    """An audio file or binary stream read as 16 kHz mono float32 blocks.

    Parameters
    ----------
    source : str, os.PathLike or binary file object
        A path, or an object with ``read`` (seekable or not). Non-seekable streams
        are copied once to a temporary spool file.
    block_frames : int
        Input frames decoded per step; bounds memory whatever the file length.

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
    CorruptAudioError
        Decoding failed part way (names the input frame where it failed).
    """

    def __init__(self, source: str | os.PathLike[str] | BinaryIO, *, block_frames: int = DEFAULT_BLOCK_FRAMES):
        if block_frames < 1:
            raise ValueError(f"block_frames={block_frames}; it must be at least 1")
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
                self._spool = _spool(source)
                self._path = str(self._spool)
        try:
            info = self._open()
        except BaseException:
            self.close()
            raise
        with info:
            self.input_sample_rate: int = info.samplerate
            self.channels: int = info.channels
            self.input_frames: int = info.frames
            self.format: str = f"{info.format}/{info.subtype}"
        self.position = 0  # 16 kHz samples yielded so far by the current iteration

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
            while True:
                try:
                    frames = sound.read(self._block_frames, dtype="float32", always_2d=True)
                except soundfile.LibsndfileError as error:
                    raise CorruptAudioError(
                        self.name, f"decoding failed after input frame {read_frames}: {error.error_string}"
                    ) from error
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


def _spool(stream: BinaryIO) -> Path:
    """Copy a non-seekable stream to a temporary file and return its path."""
    handle = tempfile.NamedTemporaryFile(prefix="onespeech-spool-", suffix=".audio", delete=False)
    try:
        with handle:
            shutil.copyfileobj(stream, handle, _SPOOL_COPY_BYTES)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise
    return Path(handle.name)
