"""Write safetensors files the way the publisher's tooling does, with numpy only.

The byte layout follows the ``safetensors`` library that ``transformers``'
``save_pretrained`` calls: an 8-byte little-endian header length, a compact JSON
header (``__metadata__`` first, then the tensors sorted by name, each with dtype,
shape and ``data_offsets``) padded with spaces to a multiple of 8 bytes, then the
raw little-endian tensor bytes in header order. Because every byte is determined
by the names, dtypes and shapes, the header can be planned before any data exists
and the data streamed tensor by tensor.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

# safetensors dtype tag -> bytes per element (only the tags we write)
DTYPE_SIZES = {"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "I32": 4}

# Header metadata written by transformers' save_pretrained for PyTorch weights.
PT_METADATA = {"format": "pt"}


@dataclass(frozen=True)
class TensorEntry:
    """One tensor's place in a planned safetensors file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class FilePlan:
    """Header bytes and tensor placement of a safetensors file, before writing data."""

    header: bytes
    entries: tuple[TensorEntry, ...]

    @property
    def data_size(self) -> int:
        return self.entries[-1].end if self.entries else 0

    @property
    def file_size(self) -> int:
        return 8 + len(self.header) + self.data_size


def plan_file(
    tensors: Iterable[tuple[str, str, tuple[int, ...]]],
    metadata: dict[str, str] | None = PT_METADATA,
) -> FilePlan:
    """Plan a safetensors file from ``(name, dtype, shape)`` triples.

    Tensors are placed in name order (all our tensors share one dtype, so the
    library's "alignment first, then name" order reduces to name order).
    """
    items = sorted(tensors, key=lambda item: item[0])
    names = [name for name, _, _ in items]
    if len(set(names)) != len(names):
        raise ValueError("duplicate tensor names in safetensors plan")
    entries = []
    offset = 0
    for name, dtype, shape in items:
        if dtype not in DTYPE_SIZES:
            raise ValueError(f"unsupported safetensors dtype {dtype!r}; allowed: {sorted(DTYPE_SIZES)}")
        nbytes = DTYPE_SIZES[dtype] * math.prod(shape)
        entries.append(TensorEntry(name, dtype, tuple(int(s) for s in shape), offset, offset + nbytes))
        offset += nbytes
    header_obj: dict[str, object] = {}
    if metadata is not None:
        header_obj["__metadata__"] = dict(metadata)
    for entry in entries:
        header_obj[entry.name] = {
            "dtype": entry.dtype,
            "shape": list(entry.shape),
            "data_offsets": [entry.begin, entry.end],
        }
    header = json.dumps(header_obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    header += b" " * (-len(header) % 8)
    return FilePlan(header, tuple(entries))


def write_file(
    path: Path,
    plan: FilePlan,
    chunks: Iterator[tuple[str, np.ndarray]] | Iterable[tuple[str, np.ndarray]],
) -> None:
    """Write ``plan`` to ``path``, taking each tensor's bytes from ``chunks``.

    ``chunks`` yields ``(name, array)`` pieces in plan order; a tensor may arrive
    in several consecutive pieces (row blocks), which keeps memory bounded for the
    full-size checkpoints. Sizes are checked so that a wrong plan cannot produce
    a silently corrupt file.
    """
    expected = {entry.name: entry for entry in plan.entries}
    order = [entry.name for entry in plan.entries]
    written = dict.fromkeys(order, 0)
    position = 0
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(plan.header)))
        handle.write(plan.header)
        for name, array in chunks:
            entry = expected.get(name)
            if entry is None:
                raise ValueError(f"tensor {name!r} is not in the plan")
            if order[position] != name:
                if written[order[position]] != expected[order[position]].nbytes:
                    raise ValueError(f"tensor {name!r} arrived before {order[position]!r} was complete")
                position += 1
                if order[position] != name:
                    raise ValueError(f"tensor {name!r} arrived out of order")
            _write_array(handle, array)
            written[name] += array.nbytes
            if written[name] > entry.nbytes:
                raise ValueError(f"tensor {name!r}: more bytes than its shape {entry.shape} holds")
    short = [name for name in order if written[name] != expected[name].nbytes]
    if short:
        raise ValueError(f"tensors not completely written: {short[:5]}")


def _write_array(handle: BinaryIO, array: np.ndarray) -> None:
    data = np.ascontiguousarray(array)
    if data.dtype.byteorder == ">":
        data = data.astype(data.dtype.newbyteorder("<"))
    handle.write(memoryview(data).cast("B"))
