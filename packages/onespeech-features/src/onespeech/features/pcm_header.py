"""How much audio an uncompressed file's header declares, to catch files cut short.

libsndfile clamps a WAV ``data`` chunk (and likewise W64 ``data`` and AIFF ``SSND``)
that runs past the end of the file to the bytes present and decodes them without an
error (it only logs "should be"), so a WAV file cut in half loaded silently while a
truncated FLAC raised. This module walks the chunks of RIFF/RIFX/RF64 WAV (with the
``ds64`` sizes), Sony Wave64 and AIFF/AIFC to find the sound data's declared size;
`AudioFileSource` compares it with the bytes present. WAV sizes that streaming
writers use for "length unknown" (0x7FFFF000 up to 0xFFFFFFFF) are not checked:
such files are read to their end, as libsndfile does. Compressed formats (FLAC,
Ogg, MP3, compressed AIFC) are left to their decoders, which fail on a cut stream.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO

__all__ = ["Shortfall", "pcm_shortfall"]

UNKNOWN_LENGTH_FROM = 0x7FFFF000  # sox writes 0x7FFFF000, ffmpeg and others 0xFFFFFFFF
_MAX_CHUNKS = 4096  # more chunks before the data than any writer produces: leave the file to libsndfile
# AIFC compression types whose samples are stored whole, bits per sample as COMM says
_AIFC_PLAIN = {b"NONE", b"sowt", b"twos", b"fl32", b"FL32", b"fl64", b"FL64", b"in24", b"42ni", b"in32", b"23ni"}
_W64_RIFF = b"riff\x2e\x91\xcf\x11\xa5\xd6\x28\xdb\x04\xc1\x00\x00"  # Wave64 GUIDs start with the RIFF ids


@dataclass(frozen=True)
class Shortfall:
    """Sound data that declares more bytes than the file holds."""

    declared_bytes: int
    present_bytes: int
    block_align: int  # bytes per frame, all channels

    @property
    def declared_frames(self) -> int:
        return self.declared_bytes // self.block_align

    @property
    def present_frames(self) -> int:
        return self.present_bytes // self.block_align


def pcm_shortfall(handle: BinaryIO, start: int, size: int) -> Shortfall | None:
    """The shortfall of the file at ``start`` in ``handle`` (``size`` bytes from there), if any.

    None for other formats, lengths unknown by design, chunks that cannot be
    followed (libsndfile then decides), and files that hold all their data.
    Leaves the handle's position anywhere: callers seek before reading.
    """
    handle.seek(start)
    head = handle.read(16)
    if len(head) < 12:
        return None
    if head[:4] in (b"RIFF", b"RIFX", b"RF64") and head[8:12] == b"WAVE":
        return _riff(handle, start, size, head[:4])
    if head == _W64_RIFF:
        return _w64(handle, start, size)
    if head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
        return _aiff(handle, start, size, compressed=head[8:12] == b"AIFC")
    return None


def _riff(handle: BinaryIO, start: int, size: int, kind: bytes) -> Shortfall | None:
    order = ">" if kind == b"RIFX" else "<"
    pos, block_align, ds64_data = 12, 0, None
    for _ in range(_MAX_CHUNKS):
        handle.seek(start + pos)
        chunk = handle.read(32)  # the chunk header and the first 24 bytes of its body
        if len(chunk) < 8:
            return None
        (n,) = struct.unpack(order + "I", chunk[4:8])
        if chunk[:4] == b"fmt " and len(chunk) >= 22:
            # format tag, channels, sample rate, byte rate, then block align: bytes per frame
            (block_align,) = struct.unpack(order + "H", chunk[20:22])
        elif chunk[:4] == b"ds64" and len(chunk) >= 24:
            (ds64_data,) = struct.unpack("<Q", chunk[16:24])  # after the 64-bit RIFF size
        elif chunk[:4] == b"data":
            declared = ds64_data if kind == b"RF64" and n == 0xFFFFFFFF and ds64_data else n
            if UNKNOWN_LENGTH_FROM <= declared <= 0xFFFFFFFF:
                return None
            return _compare(declared, size - pos - 8, block_align)
        pos += 8 + n + (n & 1)  # chunks are padded to an even length
    return None


def _w64(handle: BinaryIO, start: int, size: int) -> Shortfall | None:
    # 16-byte GUID ids (the first 4 bytes spell the RIFF id), 64-bit sizes that count
    # the 24-byte chunk header, chunks aligned to 8 bytes
    pos, block_align = 40, 0
    for _ in range(_MAX_CHUNKS):
        handle.seek(start + pos)
        chunk = handle.read(40)
        if len(chunk) < 24:
            return None
        (n,) = struct.unpack("<Q", chunk[16:24])
        if chunk[:4] == b"fmt " and len(chunk) >= 38:
            (block_align,) = struct.unpack("<H", chunk[36:38])
        elif chunk[:4] == b"data":
            return _compare(n - 24, size - pos - 24, block_align)
        if n < 24:
            return None
        pos += (n + 7) & ~7
    return None


def _aiff(handle: BinaryIO, start: int, size: int, compressed: bool) -> Shortfall | None:
    pos, block_align, frames = 12, 0, 0
    for _ in range(_MAX_CHUNKS):
        handle.seek(start + pos)
        chunk = handle.read(32)
        if len(chunk) < 8:
            return None
        (n,) = struct.unpack(">I", chunk[4:8])
        if chunk[:4] == b"COMM" and len(chunk) >= 16:
            # channels, frames, bits per sample, an 80-bit rate; AIFC adds the compression type
            channels, frames, bits = struct.unpack(">hIh", chunk[8:16])
            block_align = max(channels, 0) * ((bits + 7) // 8)
            if compressed and chunk[26:30] not in _AIFC_PLAIN:
                return None
        elif chunk[:4] == b"SSND" and len(chunk) >= 12:
            (offset,) = struct.unpack(">I", chunk[8:12])  # then a block size, then `offset` bytes of padding
            return _compare(frames * block_align, size - pos - 16 - offset, block_align)
        pos += 8 + n + (n & 1)
    return None


def _compare(declared: int, present: int, block_align: int) -> Shortfall | None:
    if block_align <= 0 or present >= declared:
        return None
    return Shortfall(declared, max(present, 0), block_align)
