"""Raw PCM or a WAV stream from a pipe, as sample blocks (for ``onespeech stream -``).

A pipe cannot be rewound, so the WAV header is parsed as it arrives: RIFF/WAVE with a
``fmt `` chunk of 16-bit PCM or 32-bit float (plain or WAVE_FORMAT_EXTENSIBLE), any
channel count (averaged to mono) and any rate. The ``data`` chunk size is ignored, as
recorders that write to a pipe (``arecord``, ``sox``, ``ffmpeg``) cannot know it and
write 0 or 0xFFFFFFFF. Without a RIFF header the input is raw 16-bit little-endian mono.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from onespeech.features.errors import UnreadableAudioError

_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE
_MAX_HEADER_BYTES = 1 << 20  # chunks before "data" (LIST tags etc.); more is not a WAV stream


@dataclass(frozen=True)
class StreamFormat:
    sample_rate: int
    channels: int
    dtype: np.dtype


def read_blocks(stream: BinaryIO, *, raw_rate: int = 16000, block_bytes: int = 6400,
                name: str = "<stdin>") -> tuple[StreamFormat, Iterator[np.ndarray]]:
    """The stream's format and an iterator of mono blocks (int16 or float32 samples).

    Raises
    ------
    UnreadableAudioError
        A RIFF header that is not a WAV of 16-bit PCM or 32-bit float.
    """
    head = _read_exactly(stream, 12)
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        fmt, rest = _parse_wav_header(stream, name)
    else:
        fmt, rest = StreamFormat(raw_rate, 1, np.dtype("<i2")), head
    return fmt, _blocks(stream, fmt, rest, block_bytes)


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
    if channels < 1 or rate < 1:
        raise UnreadableAudioError(name, f"the WAV header declares {channels} channels at {rate} Hz")
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
