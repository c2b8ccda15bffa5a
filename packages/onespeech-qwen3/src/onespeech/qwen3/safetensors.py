"""Read publisher safetensors files with numpy only (no pickle, no torch).

Layout of a safetensors file: an 8-byte little-endian header length ``n``, ``n``
bytes of UTF-8 JSON mapping each tensor name to ``{"dtype", "shape",
"data_offsets": [begin, end]}`` (offsets relative to the end of the header) plus
an optional ``"__metadata__"`` string map, then the raw little-endian data.

The header is validated before any tensor is exposed: size limit, JSON types,
known dtypes, ``end - begin == itemsize * prod(shape)``, offsets inside the file
and no two tensors overlapping. Tensors are memory-mapped read-only; bfloat16
stays as its bit pattern in ``uint16`` (the kernels read it directly, and the
FP32 converter expands it exactly). Sharded checkpoints are opened through
``model.safetensors.index.json``.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from onespeech.kernels.jsonfile import loads_json
from onespeech.qwen3.errors import SafetensorsError

__all__ = [
    "INDEX_NAME",
    "MAX_HEADER_BYTES",
    "SafetensorsError",
    "SafetensorsFile",
    "TensorInfo",
    "open_checkpoint",
    "open_safetensors",
]

#: The largest safetensors header read, in bytes: safetensors' own reader refuses
#: headers above 100 MB; a real header here is < 100 KB
MAX_HEADER_BYTES = 100_000_000
#: Name of the index file of a checkpoint sharded over several safetensors files.
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"

# safetensors dtype tag -> numpy dtype (little-endian); BF16 kept as raw uint16 bits
DTYPES: dict[str, np.dtype] = {
    "BF16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "I16": np.dtype("<i2"),
    "I32": np.dtype("<i4"),
    "I64": np.dtype("<i8"),
    "BOOL": np.dtype("?"),
}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's header entry."""

    name: str
    dtype: str  # the safetensors tag: "BF16", "F32", ...
    shape: tuple[int, ...]
    begin: int  # byte offset from the start of the data section
    end: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


class SafetensorsFile(Mapping[str, np.ndarray]):
    """A read-only mapping name -> memory-mapped array over one safetensors file.

    ``file[name]`` is a read-only view into the file (``uint16`` bit patterns for
    BF16). Close with :meth:`close` or use as a context manager; arrays taken from
    a closed file must not be used.
    """

    def __init__(self, path: Path, infos: dict[str, TensorInfo], metadata: dict[str, str], data_start: int) -> None:
        self.path = path
        self.infos = infos
        self.metadata = metadata
        self._data_start = data_start
        self._handle = open(path, "rb")
        size = os.fstat(self._handle.fileno()).st_size
        self._map = mmap.mmap(self._handle.fileno(), 0, access=mmap.ACCESS_READ) if size else None

    def __getitem__(self, name: str) -> np.ndarray:
        info = self.infos[name]
        if self._map is None:
            raise SafetensorsError(self.path, "file is closed")
        return np.frombuffer(
            self._map, dtype=DTYPES[info.dtype], count=info.numel, offset=self._data_start + info.begin
        ).reshape(info.shape)

    def __iter__(self) -> Iterator[str]:
        return iter(self.infos)

    def __len__(self) -> int:
        return len(self.infos)

    def close(self) -> None:
        """Release the mapping (arrays still referenced keep it alive until dropped)."""
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                # numpy views still point into the map; it is freed when they are
                pass
            self._map = None
        self._handle.close()

    def __enter__(self) -> SafetensorsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SafetensorsFile({str(self.path)!r}, {len(self.infos)} tensors)"


def read_header(path: str | os.PathLike[str]) -> tuple[dict[str, TensorInfo], dict[str, str], int]:
    """Parse and validate a safetensors header.

    Returns
    -------
    (infos, metadata, data_start)
        Tensor entries by name (file order), the ``__metadata__`` map, and the
        byte offset where the data section starts.
    """
    path = Path(path)
    try:
        file_size = path.stat().st_size
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise SafetensorsError(path, f"file is {file_size} bytes, too short for a safetensors header")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES:
                raise SafetensorsError(path, f"header length {length} exceeds the {MAX_HEADER_BYTES}-byte limit")
            if 8 + length > file_size:
                raise SafetensorsError(path, f"header length {length} runs past the end of the {file_size}-byte file")
            raw = handle.read(length)
    except OSError as exc:
        raise SafetensorsError(path, f"cannot read: {exc.strerror or exc}") from exc
    data_start = 8 + length
    infos, metadata = _parse_header(path, raw, file_size - data_start)
    return infos, metadata, data_start


def _parse_header(path: Path, raw: bytes, data_size: int) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    try:
        header = loads_json(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SafetensorsError(path, f"header is not valid UTF-8 JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise SafetensorsError(path, "header JSON must be an object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SafetensorsError(path, "__metadata__ must map strings to strings")
    infos = {name: _parse_entry(path, name, entry, data_size) for name, entry in header.items()}
    spans = sorted((info.begin, info.end, info.name) for info in infos.values() if info.end > info.begin)
    for (_, end_a, name_a), (begin_b, _, name_b) in zip(spans, spans[1:], strict=False):
        if begin_b < end_a:
            raise SafetensorsError(path, f"tensors {name_a!r} and {name_b!r} overlap")
    return infos, metadata


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _parse_entry(path: Path, name: str, entry: object, data_size: int) -> TensorInfo:
    if not isinstance(entry, dict):
        raise SafetensorsError(path, f"tensor {name!r}: entry must be an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPES:
        raise SafetensorsError(path, f"tensor {name!r}: dtype {dtype!r} not supported; allowed: {sorted(DTYPES)}")
    if not isinstance(shape, list) or not all(_is_int(s) for s in shape):
        raise SafetensorsError(path, f"tensor {name!r}: shape must be a list of non-negative integers, got {shape!r}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
        raise SafetensorsError(path, f"tensor {name!r}: data_offsets must be two non-negative integers")
    begin, end = offsets
    if begin > end or end > data_size:
        raise SafetensorsError(
            path, f"tensor {name!r}: data_offsets [{begin}, {end}] outside the {data_size}-byte data section"
        )
    expected = DTYPES[dtype].itemsize * math.prod(shape)
    if end - begin != expected:
        raise SafetensorsError(
            path, f"tensor {name!r}: {end - begin} bytes stored but {dtype} {shape} needs {expected}"
        )
    return TensorInfo(name, dtype, tuple(shape), begin, end)


def open_safetensors(path: str | os.PathLike[str]) -> SafetensorsFile:
    """Open one safetensors file (header validated, data memory-mapped)."""
    infos, metadata, data_start = read_header(path)
    return SafetensorsFile(Path(path), infos, metadata, data_start)


class Checkpoint(Mapping[str, np.ndarray]):
    """All tensors of a publisher checkpoint (one file or index-listed shards)."""

    def __init__(self, files: list[SafetensorsFile], owner: dict[str, SafetensorsFile]) -> None:
        self.files = files
        self._owner = owner

    def info(self, name: str) -> TensorInfo:
        return self._owner[name].infos[name]

    def __getitem__(self, name: str) -> np.ndarray:
        return self._owner[name][name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._owner)

    def __len__(self) -> int:
        return len(self._owner)

    def close(self) -> None:
        for file in self.files:
            file.close()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def weight_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The weight files of a publisher directory: the index's shards, or model.safetensors."""
    directory = Path(directory)
    index_path = directory / INDEX_NAME
    if index_path.is_file():
        return [directory / name for name in _index_shards(index_path)[1]]
    single = directory / SINGLE_NAME
    if single.is_file():
        return [single]
    raise SafetensorsError(directory, f"no {SINGLE_NAME} or {INDEX_NAME} in the model directory")


def _index_shards(index_path: Path) -> tuple[dict[str, str], list[str]]:
    try:
        index = loads_json(index_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SafetensorsError(index_path, f"cannot read the shard index ({exc})") from exc
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise SafetensorsError(index_path, "weight_map must map tensor names to shard file names")
    shards = sorted(set(weight_map.values()))
    for name in shards:
        if name != os.path.basename(name) or name in ("", ".", "..") or not name.endswith(".safetensors"):
            raise SafetensorsError(index_path, f"shard name {name!r} must be a plain *.safetensors file name")
    return weight_map, shards


def open_checkpoint(directory: str | os.PathLike[str]) -> Checkpoint:
    """Open every weight file of a publisher directory as one mapping.

    With an index, each tensor must live in the shard the index names, and every
    indexed tensor must exist; without one, ``model.safetensors`` is used.
    """
    directory = Path(directory)
    index_path = directory / INDEX_NAME
    files: list[SafetensorsFile] = []
    owner: dict[str, SafetensorsFile] = {}
    try:
        weight_map = _index_shards(index_path)[0] if index_path.is_file() else None
        for path in weight_files(directory):
            file = open_safetensors(path)
            files.append(file)
            for name in file.infos:
                if name in owner:
                    raise SafetensorsError(path, f"tensor {name!r} also appears in {owner[name].path.name}")
                if weight_map is not None and weight_map.get(name) != path.name:
                    raise SafetensorsError(index_path, f"tensor {name!r} is in {path.name}, not where the index says")
                owner[name] = file
        if weight_map is not None:
            missing = sorted(set(weight_map) - set(owner))
            if missing:
                raise SafetensorsError(index_path, f"{len(missing)} indexed tensors missing, e.g. {missing[0]!r}")
    except BaseException:
        for file in files:
            file.close()
        raise
    return Checkpoint(files, owner)
