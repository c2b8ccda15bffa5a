"""Read the tensors of a PyTorch checkpoint without torch and without running its pickle.

A ``torch.save`` file is either a zip archive (``<root>/data.pkl`` plus one member
``<root>/data/<key>`` per storage) or the legacy stream written before torch 1.6
(five consecutive pickles: magic number, protocol version, system info, the object,
the storage keys; then each storage as an int64 element count and its raw bytes).
Resemblyzer's ``pretrained.pt`` is the legacy kind.

Both pickles are read by :class:`_RestrictedUnpickler`, whose ``find_class`` knows
exactly the globals a plain state dict needs: ``collections.OrderedDict``,
``torch._utils._rebuild_tensor_v2`` and the typed ``torch.*Storage`` classes, each
mapped to a function or marker of this module. Every other global (``os.system``,
``builtins.eval``, ``torch.load`` ...) is refused before anything is called, so a
REDUCE can only ever call our own code. Storages become numpy arrays; every tensor
view is checked against its storage (offset, sizes, strides) before it is copied
out, and every storage against the bytes that really hold it.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from onespeech.speech.errors import CheckpointFormatError, CheckpointRefusedError, TorchCheckpointError

__all__ = [
    "CheckpointFormatError",
    "CheckpointRefusedError",
    "TorchCheckpointError",
    "read_torch_checkpoint",
]

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001
_MAX_PICKLE_BYTES = 64 << 20  # the object pickle of a state dict is tiny; more is not a checkpoint
_MAX_DEPTH = 64

# torch typed-storage class -> numpy dtype of its elements (bfloat16 kept as its uint16 bits)
STORAGE_DTYPES: dict[str, np.dtype] = {
    "FloatStorage": np.dtype("<f4"),
    "DoubleStorage": np.dtype("<f8"),
    "HalfStorage": np.dtype("<f2"),
    "BFloat16Storage": np.dtype("<u2"),
    "LongStorage": np.dtype("<i8"),
    "IntStorage": np.dtype("<i4"),
    "ShortStorage": np.dtype("<i2"),
    "CharStorage": np.dtype("i1"),
    "ByteStorage": np.dtype("u1"),
    "BoolStorage": np.dtype("?"),
}


@dataclass(frozen=True)
class _StorageType:
    name: str
    dtype: np.dtype


@dataclass(frozen=True)
class _StorageRef:
    key: str
    dtype: np.dtype
    numel: int
    type_name: str


@dataclass(frozen=True)
class _TensorRef:
    storage: _StorageRef
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


def _is_index(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _rebuild_tensor_v2(storage: Any, storage_offset: Any, size: Any, stride: Any, *rest: Any) -> _TensorRef:
    """Stands in for ``torch._utils._rebuild_tensor_v2``: records the view, checks its shape."""
    if not isinstance(storage, _StorageRef):
        raise CheckpointRefusedError(f"_rebuild_tensor_v2 got {type(storage).__name__}, not a storage")
    if len(rest) > 3:
        raise CheckpointFormatError(f"_rebuild_tensor_v2 takes at most 7 arguments, got {4 + len(rest)}")
    if not _is_index(storage_offset):
        raise CheckpointFormatError(f"tensor storage offset {storage_offset!r} is not an integer >= 0")
    if not (isinstance(size, tuple) and isinstance(stride, tuple) and len(size) == len(stride)):
        raise CheckpointFormatError(
            f"tensor size {size!r} and stride {stride!r} must be tuples of one length"
        )
    if not all(_is_index(v) for v in size + stride):
        raise CheckpointFormatError(f"tensor size {size!r} / stride {stride!r} must hold integers >= 0")
    if any(v > 0 for v in size):  # the last element a view touches must lie inside its storage
        last = storage_offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
        if 0 not in size and last >= storage.numel:
            raise CheckpointFormatError(
                f"tensor (offset {storage_offset}, size {size}, stride {stride}) reaches element {last} "
                f"of storage {storage.key!r}, which holds {storage.numel}"
            )
    return _TensorRef(storage, storage_offset, size, stride)


def _ordered_dict(*args: Any) -> OrderedDict:
    if args and not (len(args) == 1 and isinstance(args[0], list | tuple)):
        raise CheckpointFormatError(
            "collections.OrderedDict called with arguments other than a list of pairs"
        )
    return OrderedDict(*args)


_GLOBALS: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): _ordered_dict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    **{("torch", name): _StorageType(name, dtype) for name, dtype in STORAGE_DTYPES.items()},
}
ALLOWED_GLOBALS = tuple(sorted(f"{m}.{n}" for m, n in _GLOBALS))


class _RestrictedUnpickler(pickle.Unpickler):
    """An unpickler whose globals are the table above and whose persistent ids are storages."""

    def __init__(self, stream: io.BytesIO) -> None:
        super().__init__(stream)
        self.storages: dict[str, _StorageRef] = {}

    def find_class(self, module: str, name: str) -> Any:
        target = _GLOBALS.get((module, name))
        if target is None:
            raise CheckpointRefusedError(
                f"the pickle asks for global {module}.{name}, which a state dict never needs; "
                f"allowed: {', '.join(ALLOWED_GLOBALS)}"
            )
        return target

    def persistent_load(self, pid: Any) -> _StorageRef:
        if not (isinstance(pid, tuple) and len(pid) in (5, 6) and pid[0] == "storage"):
            raise CheckpointRefusedError(
                f"persistent id {_short(pid)} is not ('storage', type, key, location, size)"
            )
        _, stype, key, location, numel = pid[:5]
        if not isinstance(stype, _StorageType):
            raise CheckpointRefusedError(
                f"storage type {_short(stype)} is not one of torch.{', torch.'.join(STORAGE_DTYPES)}"
            )
        if not (isinstance(key, str) and key.isascii() and key.isalnum()):
            raise CheckpointFormatError(f"storage key {_short(key)} is not an alphanumeric string")
        if not isinstance(location, str):
            raise CheckpointFormatError(f"storage location {_short(location)} is not a string")
        if not _is_index(numel):
            raise CheckpointFormatError(f"storage {key!r} size {_short(numel)} is not an integer >= 0")
        if len(pid) == 6 and pid[5] is not None:
            raise CheckpointRefusedError(
                f"storage {key!r} is a view of another storage (not in a plain state dict)"
            )
        ref = _StorageRef(key, stype.dtype, numel, stype.name)
        seen = self.storages.setdefault(key, ref)
        if seen != ref:
            raise CheckpointFormatError(f"storage {key!r} is declared twice with different types or sizes")
        return seen


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _load_pickle(stream: io.BytesIO, what: str) -> tuple[Any, dict[str, _StorageRef]]:
    """Run the restricted unpickler from the stream's position (left just after STOP)."""
    unpickler = _RestrictedUnpickler(stream)
    try:
        obj = unpickler.load()
    except TorchCheckpointError:
        raise
    except (pickle.UnpicklingError, EOFError, TypeError, ValueError, AttributeError, KeyError, IndexError,
            RecursionError, OverflowError, MemoryError, struct.error) as e:  # fmt: skip
        raise CheckpointFormatError(f"{what} is not a readable pickle ({type(e).__name__}: {e})") from None
    return obj, unpickler.storages


def _resolve(obj: Any, arrays: dict[str, np.ndarray], depth: int = 0) -> Any:
    """Replace every tensor placeholder in containers by a C-contiguous numpy copy."""
    if depth > _MAX_DEPTH:
        raise CheckpointFormatError(f"containers nested deeper than {_MAX_DEPTH} levels")
    if isinstance(obj, _TensorRef):
        base = arrays[obj.storage.key]
        item = base.dtype.itemsize
        if 0 in obj.size:
            return np.zeros(obj.size, base.dtype)
        view = np.lib.stride_tricks.as_strided(
            base[obj.offset :], shape=obj.size, strides=tuple(s * item for s in obj.stride), writeable=False
        )
        return np.ascontiguousarray(view).copy()
    if isinstance(obj, dict):
        out = type(obj)() if isinstance(obj, OrderedDict) else {}
        for k, v in obj.items():
            out[k] = _resolve(v, arrays, depth + 1)
        return out
    if isinstance(obj, list | tuple):
        items = [_resolve(v, arrays, depth + 1) for v in obj]
        return items if isinstance(obj, list) else tuple(items)
    return obj


def _storage_array(ref: _StorageRef, raw: bytes | memoryview, where: str) -> np.ndarray:
    expected = ref.numel * ref.dtype.itemsize
    if len(raw) != expected:
        raise CheckpointFormatError(
            f"storage {ref.key!r} ({ref.type_name}, {ref.numel} elements) needs {expected} bytes, {where} holds {len(raw)}"
        )
    return np.frombuffer(raw, dtype=ref.dtype, count=ref.numel)


def _read_legacy(data: bytes, path: str) -> Any:
    stream = io.BytesIO(data)
    magic, _ = _load_pickle(stream, f"{path}: magic number")
    if magic != LEGACY_MAGIC:
        raise CheckpointFormatError(
            f"{path}: not a torch checkpoint (neither a zip archive nor the legacy magic number)"
        )
    protocol, _ = _load_pickle(stream, f"{path}: protocol version")
    if protocol != LEGACY_PROTOCOL:
        raise CheckpointFormatError(
            f"{path}: legacy protocol version {protocol!r}; only {LEGACY_PROTOCOL} is known"
        )
    info, _ = _load_pickle(stream, f"{path}: system info")
    if not (isinstance(info, dict) and info.get("little_endian") is True):
        raise CheckpointFormatError(
            f"{path}: written on a big-endian machine or without system info ({_short(info)})"
        )
    obj, storages = _load_pickle(stream, f"{path}: object pickle")
    keys, _ = _load_pickle(stream, f"{path}: storage key list")
    if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)) or len(set(keys)) != len(keys):
        raise CheckpointFormatError(f"{path}: the storage key list is not a list of distinct strings")
    if set(keys) != set(storages):
        raise CheckpointFormatError(
            f"{path}: storage key list {sorted(keys)[:4]}... does not match the storages the object uses"
        )
    arrays: dict[str, np.ndarray] = {}
    pos = stream.tell()
    view = memoryview(data)
    for key in keys:
        ref = storages[key]
        if pos + 8 > len(data):
            raise CheckpointFormatError(f"{path}: truncated before storage {key!r}")
        (count,) = struct.unpack_from("<q", data, pos)
        if count != ref.numel:
            raise CheckpointFormatError(
                f"{path}: storage {key!r} is declared with {ref.numel} elements, its data header says {count}"
            )
        start, end = pos + 8, pos + 8 + ref.numel * ref.dtype.itemsize
        if end > len(data):
            raise CheckpointFormatError(f"{path}: storage {key!r} runs past the end of the file")
        arrays[key] = _storage_array(ref, view[start:end], "the file")
        pos = end
    if pos != len(data):
        raise CheckpointFormatError(f"{path}: {len(data) - pos} bytes follow the last storage")
    return _resolve(obj, arrays)


def _read_zip(path: str) -> Any:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise CheckpointFormatError(f"{path}: not a readable zip archive ({e})") from None
    with archive:
        names = archive.namelist()
        pkls = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pkls) != 1:
            raise CheckpointFormatError(
                f"{path}: a torch archive has exactly one <root>/data.pkl, found {len(pkls)}"
            )
        root = pkls[0][: -len("data.pkl")]
        if any(not n.startswith(root) for n in names):
            raise CheckpointFormatError(f"{path}: members outside {root!r}")
        try:
            info = archive.getinfo(pkls[0])
            if info.file_size > _MAX_PICKLE_BYTES:
                raise CheckpointFormatError(
                    f"{path}: data.pkl is {info.file_size} bytes (> {_MAX_PICKLE_BYTES})"
                )
            obj, storages = _load_pickle(io.BytesIO(archive.read(pkls[0])), f"{path}: data.pkl")
            arrays = {}
            for key, ref in storages.items():
                member = f"{root}data/{key}"
                if member not in names:
                    raise CheckpointFormatError(f"{path}: storage {key!r} has no member {member}")
                if archive.getinfo(member).file_size != ref.numel * ref.dtype.itemsize:
                    raise CheckpointFormatError(
                        f"{path}: storage {key!r} ({ref.type_name}, {ref.numel} elements) needs "
                        f"{ref.numel * ref.dtype.itemsize} bytes, member {member} holds "
                        f"{archive.getinfo(member).file_size}"
                    )
                arrays[key] = _storage_array(ref, archive.read(member), f"member {member}")
        except (zipfile.BadZipFile, EOFError, OSError, NotImplementedError) as e:
            raise CheckpointFormatError(f"{path}: damaged zip member ({e})") from None
    return _resolve(obj, arrays)


def read_torch_checkpoint(path: str | os.PathLike[str]) -> Any:
    """The object a ``torch.save`` file holds, with tensors as numpy arrays.

    Dicts, OrderedDicts, lists, tuples, strings, numbers and None come back as
    themselves; each tensor becomes a C-contiguous numpy array (bfloat16 as uint16
    bits). Nothing from the file is executed.

    Raises
    ------
    CheckpointRefusedError
        The pickle names a global, persistent id or storage type outside the allowed
        set (:data:`ALLOWED_GLOBALS`, :data:`STORAGE_DTYPES`).
    CheckpointFormatError
        A malformed archive or stream, or a tensor/storage whose sizes do not fit.
    OSError
        The file cannot be read.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        head = f.read(4)
    if head.startswith(b"PK"):
        return _read_zip(path)
    return _read_legacy(Path(path).read_bytes(), path)
