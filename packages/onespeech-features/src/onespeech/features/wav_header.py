"""How much audio a WAV header declares, to catch files cut short.

libsndfile clamps a WAV ``data`` chunk that runs past the end of the file to the
bytes present and decodes them without an error (it only logs "should be"), so a
WAV file cut in half loaded silently while a truncated FLAC raised. This module
walks the RIFF chunks (RIFF, RIFX, and RF64 with its ``ds64`` sizes) to find the
``data`` chunk's declared size; `AudioFileSource` compares it with the bytes
present. Sizes that streaming writers use for "length unknown" (0x7FFFF000 up to
0xFFFFFFFF) are not checked: such files are read to their end, as libsndfile does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO

__all__ = ["WavShortfall", "wav_shortfall"]

UNKNOWN_LENGTH_FROM = 0x7FFFF000  # sox writes 0x7FFFF000, ffmpeg and others 0xFFFFFFFF
_MAX_CHUNKS = 4096  # more chunks before "data" than any writer produces: leave the file to libsndfile


@dataclass(frozen=True)
class WavShortfall:
    """A WAV ``data`` chunk that declares more bytes than the file holds."""

    declared_bytes: int
    present_bytes: int
    block_align: int  # bytes per frame (all channels), from the "fmt " chunk

    @property
    def declared_frames(self) -> int:
        return self.declared_bytes // self.block_align

    @property
    def present_frames(self) -> int:
        return self.present_bytes // self.block_align


def wav_shortfall(handle: BinaryIO, start: int, size: int) -> WavShortfall | None:
    """The shortfall of the WAV file at ``start`` in ``handle`` (``size`` bytes from there), if any.

    None for files that are not WAV, whose length is unknown by design, whose chunks
    cannot be followed (libsndfile then decides), or that hold all their data.
    Leaves the handle's position anywhere: callers seek before reading.
    """
    handle.seek(start)
    head = handle.read(12)
    if len(head) < 12 or head[8:12] != b"WAVE" or head[:4] not in (b"RIFF", b"RIFX", b"RF64"):
        return None
    order = ">" if head[:4] == b"RIFX" else "<"
    pos, block_align, ds64_data = 12, 0, None
    for _ in range(_MAX_CHUNKS):
        if pos + 8 > size:
            return None
        handle.seek(start + pos)
        # the chunk header and the first 24 bytes of its body (all that fmt/ds64 need)
        chunk = handle.read(32)
        if len(chunk) < 8:
            return None
        (n,) = struct.unpack(order + "I", chunk[4:8])
        if chunk[:4] == b"fmt " and len(chunk) >= 22:
            # format tag, channels, sample rate, byte rate, then block align: bytes per frame
            (block_align,) = struct.unpack(order + "H", chunk[20:22])
        elif chunk[:4] == b"ds64" and len(chunk) >= 24:
            # RF64: 64-bit RIFF size, then the 64-bit data size
            (ds64_data,) = struct.unpack("<Q", chunk[16:24])
        elif chunk[:4] == b"data":
            declared = ds64_data if head[:4] == b"RF64" and n == 0xFFFFFFFF and ds64_data else n
            present = size - pos - 8
            if UNKNOWN_LENGTH_FROM <= declared <= 0xFFFFFFFF or block_align == 0:
                return None
            return WavShortfall(declared, present, block_align) if present < declared else None
        pos += 8 + n + (n & 1)  # chunks are padded to an even length
    return None

