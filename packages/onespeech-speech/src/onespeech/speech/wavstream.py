"""Audio from a pipe as sample blocks (for ``onespeech stream -``): WAV, raw PCM or an audio file.

A pipe cannot be rewound, so the input is told apart by its first bytes:

- a RIFF/WAVE header is parsed as it arrives: a ``fmt `` chunk of 16-bit PCM or
  32-bit float (plain or WAVE_FORMAT_EXTENSIBLE), any channel count (averaged to
  mono). The ``data`` chunk size is ignored, as recorders that write to a pipe
  (``arecord``, ``sox``, ``ffmpeg``) cannot know it and write 0 or 0xFFFFFFFF. Blocks
  come as the bytes arrive (live);
- with ``raw_rate`` (``--rate``) anything else is raw 16-bit little-endian mono PCM
  at that rate, also live;
- otherwise the input must be an audio file libsndfile decodes (FLAC, OGG/Vorbis,
  Opus, MP3, AIFF, ...): it is spooled to a temporary file as file decoding spools
  any non-seekable input (``onespeech.features.AudioFileSource``), then decoded, so
  its blocks come once the input has ended.

Text (the first bytes are printable UTF-8), and bytes that are none of these, are
refused with ``UnreadableAudioError`` naming the accepted inputs: raw PCM has no
header, so it is taken only when ``--rate`` says the input is raw. Every declared
rate meets the rule of every input path (``onespeech.features.pcm.check_sample_rate``,
1000 to 768000 Hz) before any sample is read.
"""

from __future__ import annotations

import codecs
import io
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, cast

import numpy as np

from onespeech.features import AudioFileSource
from onespeech.features.errors import UnreadableAudioError
from onespeech.features.pcm import SAMPLE_RATE, check_sample_rate

_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE
_MAX_HEADER_BYTES = 1 << 20  # chunks before "data" (LIST tags etc.); more is not a WAV stream
_TEXT_PROBE_BYTES = 256  # 8 ms of 16 kHz PCM: real audio is never all printable UTF-8 for this long
ACCEPTED = ("a WAV stream (16-bit PCM or 32-bit float), an audio file libsndfile decodes (FLAC, OGG, Opus, "
            "MP3, AIFF, ...), or raw 16-bit little-endian mono PCM with --rate HZ")


@dataclass(frozen=True)
class StreamFormat:
    sample_rate: int
    channels: int
    dtype: np.dtype


def read_blocks(stream: BinaryIO, *, raw_rate: int | None = None, block_bytes: int = 6400,
                name: str = "<stdin>") -> tuple[StreamFormat, Iterator[np.ndarray]]:
    """The stream's format and an iterator of mono blocks (int16 or float32 samples).

    Parameters
    ----------
    raw_rate : int or None
        The input is raw S16LE mono PCM at this rate unless it starts with a WAV
        header. None: a WAV stream or an audio file is expected.

    Raises
    ------
    UnreadableAudioError
        A RIFF header that is not a WAV of 16-bit PCM or 32-bit float; text; or
        (without ``raw_rate``) bytes libsndfile decodes as no audio format. The
        message names the accepted inputs.
    SampleRateError
        A declared rate (WAV header, file, ``raw_rate``) outside 1000..768000 Hz.
    """
    head = _read_exactly(stream, 12)
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        fmt, rest = _parse_wav_header(stream, name)
        return fmt, _blocks(stream, fmt, rest, block_bytes)
    head += _read_exactly(stream, _TEXT_PROBE_BYTES - len(head))
    if _is_text(head):
        raise UnreadableAudioError(name, f"the input is text ({head[:40]!r}...), not audio; give {ACCEPTED}")
    if raw_rate is not None:
        fmt = StreamFormat(check_sample_rate(raw_rate, name, subject="--rate gives"), 1, np.dtype("<i2"))
        return fmt, _blocks(stream, fmt, head, block_bytes)
    return StreamFormat(SAMPLE_RATE, 1, np.dtype("<f4")), _decoded(stream, head, name, block_bytes)


def _decoded(stream: BinaryIO, head: bytes, name: str, block_bytes: int) -> Iterator[np.ndarray]:
    """An audio file on a pipe: spooled and decoded to 16 kHz float32 blocks (the file decoder's)."""
    if not head:
        raise UnreadableAudioError(name, f"the input is empty; give {ACCEPTED}")
    try:
        source = AudioFileSource(cast(BinaryIO, _Prefixed(head, stream, name)), block_frames=max(1, block_bytes // 2))
    except UnreadableAudioError as error:
        raise UnreadableAudioError(name, f"{error.cause}; give {ACCEPTED}") from None
    return _source_blocks(source)


def _source_blocks(source: AudioFileSource) -> Iterator[np.ndarray]:
    with source:  # deletes the spool when the blocks are done or the iterator is closed
        yield from source.blocks()


class _Prefixed(io.RawIOBase):
    """``head`` (bytes already read to tell the input apart), then the rest of ``stream``; not seekable."""

    def __init__(self, head: bytes, stream: BinaryIO, name: str) -> None:
        self._head, self._stream, self.name = head, stream, name

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def read(self, size: int = -1) -> bytes:
        if self._head:
            part = self._head if size < 0 else self._head[:size]
            self._head = self._head[len(part):]
            return part
        return self._stream.read(size)


def _is_text(data: bytes) -> bool:
    """Printable UTF-8 (a partial character at the end allowed): what a text file or a typed line starts with."""
    if not data:
        return False
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(data, final=False)
    except UnicodeDecodeError:
        return False
    return bool(text) and all(char.isprintable() or char in "\t\n\r\f\v" for char in text)


def _blocks(stream: BinaryIO, fmt: StreamFormat, pending: bytes, block_bytes: int) -> Iterator[np.ndarray]:
    frame = fmt.dtype.itemsize * fmt.channels
    block_bytes = max(frame, block_bytes - block_bytes % frame)
    while True:
        data = stream.read(block_bytes)
        if data:
            pending += data
        usable = len(pending) - len(pending) % frame
        if usable:
            samples = np.frombuffer(pending[:usable], dtype=fmt.dtype).astype(fmt.dtype.newbyteorder("="))
            pending = pending[usable:]
            if fmt.channels > 1:
                samples = samples.reshape(-1, fmt.channels).astype(np.float32).mean(axis=1, dtype=np.float32)
                if fmt.dtype.kind == "i":
                    samples *= np.float32(1.0 / 32768.0)
            yield samples
        if not data:
            return  # a trailing partial frame (a cut-off recording) is dropped


def _parse_wav_header(stream: BinaryIO, name: str) -> tuple[StreamFormat, bytes]:
    fmt: StreamFormat | None = None
    consumed = 12
    while True:
        header = _read_exactly(stream, 8)
        if len(header) < 8:
            raise UnreadableAudioError(name, "the WAV stream ended before its data chunk")
        chunk_id, size = header[:4], struct.unpack("<I", header[4:])[0]
        if chunk_id == b"data":
            if fmt is None:
                raise UnreadableAudioError(name, "the WAV stream has no 'fmt ' chunk before its data")
            return fmt, b""
        consumed += 8 + size + size % 2
        if consumed > _MAX_HEADER_BYTES:
            raise UnreadableAudioError(name, f"no data chunk in the first {_MAX_HEADER_BYTES} bytes")
        body = _read_exactly(stream, size + size % 2)
        if len(body) < size:
            raise UnreadableAudioError(name, f"the WAV stream ended inside its {chunk_id!r} chunk")
        if chunk_id == b"fmt ":
            fmt = _parse_fmt(body[:size], name)


def _parse_fmt(body: bytes, name: str) -> StreamFormat:
    if len(body) < 16:
        raise UnreadableAudioError(name, f"the WAV 'fmt ' chunk has {len(body)} bytes; at least 16 are needed")
    tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", body[:16])
    if tag == _EXTENSIBLE and len(body) >= 26:
        tag = struct.unpack("<H", body[24:26])[0]  # the sub-format GUID starts with the format tag
    if channels < 1:
        raise UnreadableAudioError(name, f"the WAV header declares {channels} channels")
    check_sample_rate(rate, name, subject="the WAV header declares a sample rate of")
    if tag == _PCM and bits == 16:
        return StreamFormat(rate, channels, np.dtype("<i2"))
    if tag == _FLOAT and bits == 32:
        return StreamFormat(rate, channels, np.dtype("<f4"))
    raise UnreadableAudioError(name, f"WAV format tag {tag} with {bits}-bit samples; a WAV stream must be 16-bit "
                               "PCM or 32-bit float (convert with sox or ffmpeg, or give a file path instead)")


def _read_exactly(stream: BinaryIO, n: int) -> bytes:
    data = b""
    while len(data) < n:
        more = stream.read(n - len(data))
        if not more:
            break
        data += more
    return data
