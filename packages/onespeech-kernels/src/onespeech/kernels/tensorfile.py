"""The runtime tensor-file format: raw aligned tensors behind a versioned header.

Layout (all integers little-endian)::

    offset 0   8 bytes   magic b"OSTENSR\\0"
    offset 8   uint32    format version (1)
    offset 12  uint32    reserved, 0
    offset 16  uint64    index length L in bytes
    offset 24  L bytes   UTF-8 JSON index:
                         {"tensors": [{"name", "dtype", "shape", "offset", "nbytes"}, ...],
                          "metadata": {...}, "data_end": <file size>}
    then       tensors, raw C order, each starting at a multiple of 64 bytes
               (offsets are absolute), zero padding between them

dtype tags: "float32", "bf16" (stored as uint16 bit patterns), "int32", "int64", "int8".
Reading memory-maps the file read-only (np.memmap) and returns views; nothing is
unpickled and every index field is checked against the file's real size, so a
truncated or damaged file raises `TensorFileError` naming the file to remove.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from .errors import TensorFileError
from .jsonfile import loads_json

__all__ = ["ALIGNMENT", "FORMAT_VERSION", "MAGIC", "TensorFile", "read_tensor_file", "write_tensor_file"]

#: The first 8 bytes of every tensor file.
MAGIC = b"OSTENSR\x00"
#: The tensor-file format version written, and the only one read.
FORMAT_VERSION = 1
ALIGNMENT = 64  #: a cache line, and enough for any SIMD load
_PREAMBLE = struct.Struct("<8sIIQ")  # magic, version, reserved, index length
_MAX_INDEX_BYTES = 64 << 20  # ~ a million tensors; anything larger is damage

# tag -> little-endian storage dtype
_DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype("<f4"),
    "bf16": np.dtype("<u2"),
    "int32": np.dtype("<i4"),
    "int64": np.dtype("<i8"),
    "int8": np.dtype("i1"),
}
_TAG_OF_KIND = {("f", 4): "float32", ("u", 2): "bf16", ("i", 4): "int32", ("i", 8): "int64", ("i", 1): "int8"}


def _align(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def _tag(name: str, a: np.ndarray) -> str:
    tag = _TAG_OF_KIND.get((a.dtype.kind, a.dtype.itemsize))
    if tag is None:
        raise ValueError(
            f"tensor {name!r} has dtype {a.dtype}; allowed: float32, uint16 (bfloat16 bits), int32, int64, int8"
        )
    return tag


def write_tensor_file(
    path: str | os.PathLike[str], tensors: Mapping[str, np.ndarray], metadata: Mapping[str, Any] | None = None
) -> None:
    """Write tensors and JSON metadata to ``path`` (replacing it).

    Parameters
    ----------
    path : str or PathLike
    tensors : mapping of str to ndarray[float32 | uint16 (bf16) | int32 | int64 | int8]
        Stored in the mapping's order, each 64-byte aligned.
    metadata : mapping, optional
        JSON-serialisable; returned by `TensorFile.metadata`.
    """
    metadata = dict(metadata or {})
    try:
        json.dumps(metadata, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"metadata must be JSON-serialisable: {e}") from e
    entries: list[dict[str, Any]] = []
    arrays: list[np.ndarray] = []
    for name, a in tensors.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"tensor names must be nonempty strings, got {name!r}")
        if not isinstance(a, np.ndarray):
            raise TypeError(f"tensor {name!r} must be a numpy array, got {type(a).__name__}")
        tag = _tag(name, a)
        arrays.append(np.ascontiguousarray(a, dtype=_DTYPES[tag]))
        entries.append({"name": name, "dtype": tag, "shape": list(a.shape), "nbytes": int(a.nbytes)})
    # offsets depend on the index length, which depends on the offsets' digits:
    # iterate until stable (twice at most in practice)
    data_start = 0
    while True:
        offset = data_start
        for entry in entries:
            entry["offset"] = offset
            offset = _align(offset + entry["nbytes"])
        data_end = entries[-1]["offset"] + entries[-1]["nbytes"] if entries else data_start
        index = json.dumps(
            {"tensors": entries, "metadata": metadata, "data_end": data_end}, separators=(",", ":")
        ).encode()
        needed = _align(_PREAMBLE.size + len(index))
        if needed == data_start:
            break
        data_start = needed
    with open(path, "wb") as f:
        f.write(_PREAMBLE.pack(MAGIC, FORMAT_VERSION, 0, len(index)))
        f.write(index)
        for entry, a in zip(entries, arrays, strict=True):
            f.write(b"\0" * (entry["offset"] - f.tell()))
            f.write(a.reshape(-1).view(np.uint8).data)
        f.write(b"\0" * (data_end - f.tell()))


class TensorFile(Mapping[str, np.ndarray]):
    """A read-only, memory-mapped tensor file: name -> ndarray.

    bf16 tensors come back as uint16 arrays; `dtype_tag(name)` says "bf16".
    `close()` (or leaving a ``with`` block) drops the file's mapping; the pages
    are unmapped once no returned array is referenced any more.
    """

    def __init__(self, path: Path, index: dict[str, dict[str, Any]], metadata: dict[str, Any]) -> None:
        self.path = path
        self.metadata = metadata
        self._index = index
        self._map: np.memmap | None = np.memmap(path, dtype=np.uint8, mode="r")
        self._closed = False

    def dtype_tag(self, name: str) -> str:
        """The stored dtype tag of a tensor: float32, bf16, int32, int64 or int8."""
        return str(self._index[name]["dtype"])

    def __getitem__(self, name: str) -> np.ndarray:
        if self._closed:
            raise ValueError(f"tensor file {self.path} is closed")
        e = self._index[name]
        dtype = _DTYPES[e["dtype"]]
        if e["nbytes"] == 0 or self._map is None:
            a = np.zeros(e["shape"], dtype=dtype)
            a.flags.writeable = False
            return a
        return self._map[e["offset"] : e["offset"] + e["nbytes"]].view(dtype).reshape(e["shape"])

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def close(self) -> None:
        """Drop this object's mapping of the file."""
        self._map = None
        self._closed = True

    def __enter__(self) -> TensorFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TensorFile({str(self.path)!r}, {len(self)} tensors)"


def _is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _parse_index(path: Path, raw: bytes, data_start: int, file_size: int) -> tuple[dict, dict]:
    def bad(why: str) -> TensorFileError:
        return TensorFileError(path, why)

    try:
        doc = loads_json(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad(f"the tensor index is not valid JSON ({e})") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("tensors"), list):
        raise bad("the tensor index has no 'tensors' list")
    if not isinstance(doc.get("metadata", {}), dict):
        raise bad("the tensor index's 'metadata' is not an object")
    if not _is_int(doc.get("data_end")) or doc["data_end"] != file_size:
        raise bad(f"the file is {file_size} bytes but its index says {doc.get('data_end')!r} (truncated or padded)")
    index: dict[str, dict[str, Any]] = {}
    end = data_start
    for entry in doc["tensors"]:
        if not isinstance(entry, dict):
            raise bad("a tensor entry is not an object")
        name, tag, shape = entry.get("name"), entry.get("dtype"), entry.get("shape")
        if not isinstance(name, str) or not name or name in index:
            raise bad(f"tensor name {name!r} is missing, empty or repeated")
        if tag not in _DTYPES:
            raise bad(f"tensor {name!r} has unknown dtype {tag!r}")
        if not isinstance(shape, list) or not all(_is_int(s) for s in shape):
            raise bad(f"tensor {name!r} has an invalid shape {shape!r}")
        nbytes = int(np.prod(shape, dtype=np.int64)) * _DTYPES[tag].itemsize
        offset = entry.get("offset")
        if entry.get("nbytes") != nbytes:
            raise bad(f"tensor {name!r} records {entry.get('nbytes')!r} bytes but shape {shape} needs {nbytes}")
        if not _is_int(offset) or offset % ALIGNMENT or offset < end:
            raise bad(f"tensor {name!r} has offset {offset!r}: not {ALIGNMENT}-aligned, overlapping or inside the header")
        if offset + nbytes > file_size:
            raise bad(f"tensor {name!r} ends at byte {offset + nbytes} past the end of the file ({file_size})")
        end = offset + nbytes
        index[name] = {"dtype": tag, "shape": tuple(shape), "offset": offset, "nbytes": nbytes}
    return index, doc.get("metadata", {})


def read_tensor_file(path: str | os.PathLike[str]) -> TensorFile:
    """Open a tensor file, validating its header and index against its size.

    Parameters
    ----------
    path : str or PathLike

    Returns
    -------
    TensorFile
        Mapping of name to read-only memory-mapped ndarray, plus ``.metadata``.

    Raises
    ------
    TensorFileError
        (a `ModelIntegrityError`) if the file is not a tensor file, has an unknown
        version, or its index does not fit the file (truncated, corrupt).
    FileNotFoundError
        If the file does not exist.
    """
    path = Path(path)
    with open(path, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        head = f.read(_PREAMBLE.size)
        if len(head) < _PREAMBLE.size:
            raise TensorFileError(path, f"only {len(head)} bytes, shorter than the {_PREAMBLE.size}-byte header")
        magic, version, _reserved, n_index = _PREAMBLE.unpack(head)
        if magic != MAGIC:
            raise TensorFileError(path, f"not a OneSpeech tensor file (magic {magic!r})")
        if version != FORMAT_VERSION:
            raise TensorFileError(path, f"format version {version} is not supported (this runtime reads {FORMAT_VERSION})")
        if n_index > min(_MAX_INDEX_BYTES, file_size - _PREAMBLE.size):
            raise TensorFileError(path, f"index length {n_index} does not fit the {file_size}-byte file")
        raw = f.read(n_index)
    index, metadata = _parse_index(path, raw, _align(_PREAMBLE.size + n_index), file_size)
    return TensorFile(path, index, metadata)
