"""Read the tensors of a PyTorch checkpoint without torch and without running its pickle.

A ``torch.save`` file is either a zip archive (``<root>/data.pkl`` plus one member
``<root>/data/<key>`` per storage) or the legacy stream written before torch 1.6
(five consecutive pickles: magic number, protocol version, system info, the object,
the storage keys; then each storage as an int64 element count and its raw bytes).
Resemblyzer's ``pretrained.pt`` is the legacy kind.

Both pickles run on :mod:`.pickle_machine`, which builds nothing but plain values and
asks this module about the rest. Its globals are the table below: tokens for
``collections.OrderedDict``, ``torch._utils._rebuild_tensor_v2`` and the typed
``torch.*Storage`` classes; every other global is refused before anything runs.
Calling a token makes an ``OrderedDict`` or an immutable record of a tensor view
(storage, offset, size, stride as the file gave them); a persistent id makes an
immutable record of a storage. BUILD is accepted only on an ``OrderedDict`` (torch
pickles ``state_dict._metadata`` that way) and its state is dropped: nothing the
reader made or owns can be changed by the file, and the module keeps no state a file
can reach.

Only after the pickle has run are the bytes read: every size is checked against
:class:`CheckpointLimits` before it is read or copied, and every view (offset, size,
stride, element count, storage bounds) is checked once, on its final values, when it
is copied out of its storage.
"""

from __future__ import annotations

import math
import os
import struct
import zipfile
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from onespeech.features.errors import CheckpointFormatError, CheckpointRefusedError, TorchCheckpointError
from onespeech.features.pickle_machine import PLAIN_VALUES, is_plain_key, run_pickle

__all__ = [
    "CheckpointFormatError",
    "CheckpointLimits",
    "CheckpointRefusedError",
    "TorchCheckpointError",
    "read_torch_checkpoint",
]

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001
_MAX_DEPTH = 64  # containers in a state dict nest 3 deep (checkpoint -> state -> optimizer group)
_MAX_DIMS = 32
_MAX_INDEX = 1 << 62  # offsets, sizes and strides beyond this cannot describe bytes in memory
_MIB = 1 << 20


@dataclass(frozen=True)
class CheckpointLimits:
    """How much a checkpoint may make the reader hold; each size is checked before it is read or copied.

    The defaults come from Resemblyzer's ``pretrained.pt``, the file this reader is for:
    its largest storage is the LSTM's flattened weights, 1,357,824 float32 (5.2 MiB);
    its largest tensor 1024 x 256 float32 (1 MiB); the file is 16.3 MiB, and the reader
    holds it plus a copy of each of its 48 tensors (16.3 MiB more); its object pickle is
    5.6 KiB. Each default leaves a margin of at least 7 over that.

    Attributes
    ----------
    max_tensor_bytes : int
        One storage (the inflated size of a zip member, one record of a legacy file) and
        the copy of one tensor view. Default 64 MiB, 12 times the largest storage.
    max_total_bytes : int
        Everything held at once: the storages read (a legacy file whole, the zip's
        ``data.pkl`` and storage members) plus every tensor copied out. Default 256 MiB,
        7.8 times the 32.6 MiB the Resemblyzer file needs.
    max_pickle_bytes : int
        One pickle (``data.pkl``, or each pickle of the legacy stream). Default 1 MiB,
        180 times the object pickle.
    """

    max_tensor_bytes: int = 64 * _MIB
    max_total_bytes: int = 256 * _MIB
    max_pickle_bytes: int = 1 * _MIB

    def __post_init__(self) -> None:
        for name in ("max_tensor_bytes", "max_total_bytes", "max_pickle_bytes"):
            value = getattr(self, name)
            if not (_is_index(value) and value > 0):
                raise ValueError(
                    f"CheckpointLimits.{name}={value!r}; it is a number of bytes, an integer > 0"
                )


# torch typed-storage class -> numpy dtype of its elements (bfloat16 kept as its uint16 bits)
STORAGE_DTYPES: Mapping[str, np.dtype] = MappingProxyType({
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
})  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Callable:
    """A global the pickle may call; REDUCE dispatches on which one it is."""

    qualname: str


@dataclass(frozen=True, slots=True)
class _StorageType:
    """A ``torch.*Storage`` global: only a marker inside a persistent id, never called."""

    name: str
    dtype: np.dtype


@dataclass(frozen=True, slots=True)
class _StorageRef:
    key: str
    dtype: np.dtype
    numel: int
    type_name: str


@dataclass(frozen=True, slots=True)
class _TensorRef:
    """A view as the pickle declared it; checked once, when it is copied out (`_copy_view`)."""

    storage: _StorageRef
    offset: object
    size: object
    stride: object


_REBUILD = _Callable("torch._utils._rebuild_tensor_v2")
_ORDERED_DICT = _Callable("collections.OrderedDict")
_GLOBALS: Mapping[tuple[str, str], object] = MappingProxyType({
    ("collections", "OrderedDict"): _ORDERED_DICT,
    ("torch._utils", "_rebuild_tensor_v2"): _REBUILD,
    **{("torch", name): _StorageType(name, dtype) for name, dtype in STORAGE_DTYPES.items()},
})  # fmt: skip
ALLOWED_GLOBALS = tuple(sorted(f"{m}.{n}" for m, n in _GLOBALS))


def _is_index(v: object) -> bool:
    return type(v) is int and 0 <= v < _MAX_INDEX


def _short(v: Any) -> str:
    try:
        text = repr(v)
    except (ValueError, RecursionError):  # an int of more digits than Python prints, or lists nested too deep
        return f"(a {type(v).__name__} too large to print)"
    return text if len(text) <= 80 else text[:77] + "..."


def _describe(obj: object) -> str:
    if isinstance(obj, _TensorRef):
        return f"a tensor (of storage {obj.storage.key!r})"
    if isinstance(obj, _StorageRef):
        return f"storage {obj.key!r}"
    if isinstance(obj, _StorageType):
        return f"torch.{obj.name}"
    if isinstance(obj, _Callable):
        return obj.qualname
    return f"a {type(obj).__name__}"


def _rebuild_tensor(args: tuple[Any, ...]) -> _TensorRef:
    """``_rebuild_tensor_v2(storage, offset, size, stride[, requires_grad, hooks, metadata])``."""
    if not 4 <= len(args) <= 7:
        raise CheckpointFormatError(f"_rebuild_tensor_v2 takes 4 to 7 arguments, got {len(args)}")
    if not isinstance(args[0], _StorageRef):
        raise CheckpointRefusedError(f"_rebuild_tensor_v2 got {_describe(args[0])}, not a storage")
    return _TensorRef(args[0], args[1], args[2], args[3])


def _ordered_dict(args: tuple[Any, ...]) -> OrderedDict:
    pairs = args[0] if len(args) == 1 and type(args[0]) in (list, tuple) else None
    if args and (
        pairs is None or not all(type(p) is tuple and len(p) == 2 and is_plain_key(p[0]) for p in pairs)
    ):
        raise CheckpointFormatError(
            "collections.OrderedDict called with arguments other than a list of (name, value) pairs"
        )
    return OrderedDict(pairs or ())


class _StateDictHandler:
    """What the pickle machine asks about globals, calls, persistent ids and BUILD (module doc)."""

    def __init__(self) -> None:
        self.storages: dict[str, _StorageRef] = {}

    def find_global(self, module: str, name: str) -> object:
        target = _GLOBALS.get((module, name))
        if target is None:
            raise CheckpointRefusedError(
                f"the pickle asks for global {module}.{name}, which a state dict never needs; "
                f"allowed: {', '.join(ALLOWED_GLOBALS)}"
            )
        return target

    def reduce(self, func: object, args: tuple[Any, ...]) -> object:
        if func is _REBUILD:
            return _rebuild_tensor(args)
        if func is _ORDERED_DICT:
            return _ordered_dict(args)
        raise CheckpointRefusedError(
            f"REDUCE calls {_describe(func)}; only {_REBUILD.qualname} and {_ORDERED_DICT.qualname} are called "
            "(a storage type is only a marker in a persistent id)"
        )

    def build(self, obj: object, state: object) -> None:
        if type(obj) is OrderedDict and type(state) is dict and all(type(k) is str for k in state):
            return  # torch's state_dict._metadata (per-module versions): read, not kept
        raise CheckpointRefusedError(
            f"BUILD sets the state of {_describe(obj)}; only an OrderedDict's attributes may be set "
            "(torch's state_dict._metadata), and they are dropped"
        )

    def persistent(self, pid: object) -> _StorageRef:
        if not (type(pid) is tuple and len(pid) in (5, 6) and pid[0] == "storage"):
            raise CheckpointRefusedError(
                f"persistent id {_short(pid)} is not ('storage', type, key, location, size)"
            )
        _, stype, key, location, numel = pid[:5]
        if not isinstance(stype, _StorageType):
            raise CheckpointRefusedError(
                f"storage type {_short(stype)} is not one of torch.{', torch.'.join(STORAGE_DTYPES)}"
            )
        if not (type(key) is str and key.isascii() and key.isalnum()):
            raise CheckpointFormatError(f"storage key {_short(key)} is not an alphanumeric string")
        if type(location) is not str:
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


def _load_pickle(
    data: bytes | memoryview, pos: int, what: str, limits: CheckpointLimits
) -> tuple[Any, dict[str, _StorageRef], int]:
    """Run one pickle from ``pos``; its object, the storages it named, the position after its STOP."""
    handler = _StateDictHandler()
    obj, end = run_pickle(data, pos, handler, what=what, max_bytes=limits.max_pickle_bytes)
    return obj, handler.storages, end


@dataclass(frozen=True)
class _Storage:
    array: np.ndarray
    where: str  # "storage '<key>'" or "member <root>/data/<key>", for messages


def _storage_bytes(
    storages: Mapping[str, _StorageRef], where: Callable[[str], str], path: str, limits: CheckpointLimits
) -> int:
    """Every storage's byte size against ``max_tensor_bytes``; their sum (nothing read yet)."""
    total = 0
    for key, ref in storages.items():
        n_bytes = ref.numel * ref.dtype.itemsize
        if n_bytes > limits.max_tensor_bytes:
            raise CheckpointFormatError(
                f"{path}: {where(key)} ({ref.type_name}, {ref.numel} elements) needs {n_bytes} bytes, "
                f"more than max_tensor_bytes allows ({limits.max_tensor_bytes})"
            )
        total += n_bytes
    return total


def _over_total(path: str, what: str, n_bytes: int, limits: CheckpointLimits) -> CheckpointFormatError:
    return CheckpointFormatError(
        f"{path}: {what} need {n_bytes} bytes, more than max_total_bytes allows ({limits.max_total_bytes})"
    )


def _storage_array(ref: _StorageRef, raw: bytes | memoryview, where: str) -> np.ndarray:
    expected = ref.numel * ref.dtype.itemsize
    if len(raw) != expected:
        raise CheckpointFormatError(
            f"storage {ref.key!r} ({ref.type_name}, {ref.numel} elements) needs {expected} bytes, "
            f"{where} holds {len(raw)}"
        )
    return np.frombuffer(raw, dtype=ref.dtype, count=ref.numel)


def _copy_view(ref: _TensorRef, storage: _Storage, limits: CheckpointLimits, held: int) -> np.ndarray:
    """The view ``ref`` declares, copied C-contiguous, after every check on its final values."""
    offset, size, stride = ref.offset, ref.size, ref.stride
    if not _is_index(offset):
        raise CheckpointFormatError(
            f"tensor storage offset {_short(offset)} is not an integer >= 0 (below 2**62)"
        )
    if not (type(size) is tuple and type(stride) is tuple and len(size) == len(stride) <= _MAX_DIMS):
        raise CheckpointFormatError(
            f"tensor size {_short(size)} and stride {_short(stride)} must be tuples of one length, "
            f"at most {_MAX_DIMS}"
        )
    if not all(_is_index(v) for v in size + stride):
        raise CheckpointFormatError(
            f"tensor size {_short(size)} / stride {_short(stride)} must hold integers >= 0 (below 2**62)"
        )
    base = storage.array
    if base.dtype != ref.storage.dtype:  # by construction; checked because the copy below trusts it
        raise CheckpointFormatError(
            f"storage {ref.storage.key!r} holds {base.dtype}, the view says {ref.storage.dtype}"
        )
    count = math.prod(size)
    n_bytes = count * base.dtype.itemsize
    view = f"tensor (offset {offset}, size {size}, stride {stride})"
    if n_bytes > limits.max_tensor_bytes:
        raise CheckpointFormatError(
            f"{view} has {count} elements ({n_bytes} bytes) of {storage.where}, "
            f"more than max_tensor_bytes allows ({limits.max_tensor_bytes})"
        )
    if held + n_bytes > limits.max_total_bytes:
        raise CheckpointFormatError(
            f"{view} of {storage.where}: the storages and the tensors copied so far need {held + n_bytes} bytes, "
            f"more than max_total_bytes allows ({limits.max_total_bytes})"
        )
    if count == 0:
        return np.zeros(size, base.dtype)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    if last >= base.size:
        raise CheckpointFormatError(
            f"{view} reaches element {last} of storage {ref.storage.key!r}, which holds {base.size}"
        )
    # the elements the view may touch and no others: its largest step lands on window[-1]
    window = base[offset : last + 1]
    strides = tuple(s * base.itemsize if n > 1 else 0 for n, s in zip(size, stride, strict=True))
    return np.array(np.lib.stride_tricks.as_strided(window, size, strides, writeable=False), order="C")


class _Resolver:
    """Containers with tensor records in, the same containers with numpy arrays out."""

    def __init__(self, storages: Mapping[str, _Storage], limits: CheckpointLimits, held: int) -> None:
        self.storages, self.limits, self.held = storages, limits, held
        self.done: dict[int, Any] = {}  # id -> result: a part the pickle shares is resolved once

    def value(self, obj: Any, depth: int = 0) -> Any:
        if type(obj) in PLAIN_VALUES:
            return obj
        if depth > _MAX_DEPTH:
            raise CheckpointFormatError(f"containers nested deeper than {_MAX_DEPTH} levels")
        if id(obj) in self.done:
            return self.done[id(obj)]
        out: Any
        if type(obj) is _TensorRef:
            out = _copy_view(obj, self.storages[obj.storage.key], self.limits, self.held)
            self.held += out.nbytes
        elif type(obj) in (dict, OrderedDict):
            out = type(obj)((k, self.value(v, depth + 1)) for k, v in obj.items())
        elif type(obj) in (list, tuple):
            out = type(obj)(self.value(v, depth + 1) for v in obj)
        else:
            raise CheckpointFormatError(
                f"the checkpoint holds {_describe(obj)} outside a tensor; "
                "a state dict holds tensors, containers, strings and numbers"
            )
        self.done[id(obj)] = out
        return out


def _read_legacy(path: str, limits: CheckpointLimits) -> Any:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > limits.max_total_bytes:
            raise _over_total(path, f"the file's {size} bytes", size, limits)
        data = f.read(limits.max_total_bytes + 1)
    if len(data) > limits.max_total_bytes:
        raise _over_total(path, "the file's bytes (it grew while read)", len(data), limits)
    magic, _, pos = _load_pickle(data, 0, f"{path}: magic number", limits)
    if magic != LEGACY_MAGIC:
        raise CheckpointFormatError(
            f"{path}: not a torch checkpoint (neither a zip archive nor the legacy magic number)"
        )
    protocol, _, pos = _load_pickle(data, pos, f"{path}: protocol version", limits)
    if protocol != LEGACY_PROTOCOL:
        raise CheckpointFormatError(
            f"{path}: legacy protocol version {_short(protocol)}; only {LEGACY_PROTOCOL} is known"
        )
    info, _, pos = _load_pickle(data, pos, f"{path}: system info", limits)
    if not (type(info) is dict and info.get("little_endian") is True):
        raise CheckpointFormatError(
            f"{path}: written on a big-endian machine or without system info ({_short(info)})"
        )
    obj, storages, pos = _load_pickle(data, pos, f"{path}: object pickle", limits)
    keys, _, pos = _load_pickle(data, pos, f"{path}: storage key list", limits)
    if not (type(keys) is list and all(type(k) is str for k in keys)) or len(set(keys)) != len(keys):
        raise CheckpointFormatError(f"{path}: the storage key list is not a list of distinct strings")
    if set(keys) != set(storages):
        raise CheckpointFormatError(
            f"{path}: storage key list {sorted(keys)[:4]}... does not match the storages the object uses"
        )
    # the storages lie inside the file, already counted in the total: only each one's size is checked
    _storage_bytes(storages, lambda key: f"storage {key!r}", path, limits)
    arrays: dict[str, _Storage] = {}
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
        arrays[key] = _Storage(_storage_array(ref, view[start:end], "the file"), f"storage {key!r}")
        pos = end
    if pos != len(data):
        raise CheckpointFormatError(f"{path}: {len(data) - pos} bytes follow the last storage")
    return _Resolver(arrays, limits, len(data)).value(obj)


def _read_member(archive: zipfile.ZipFile, path: str, name: str) -> bytes:
    """A member's bytes, inflated no further than its header declares (checked against the limits first).

    ``ZipFile.read`` inflates a deflate member in steps of up to 2 GiB whatever its header
    says, and bzip2/lzma members without any step: ``read(n)`` on the open member inflates
    at most max(n, 4 KiB) per step, and only the methods with such steps are accepted.
    """
    info = archive.getinfo(name)
    if info.flag_bits & 0x1:
        raise CheckpointFormatError(f"{path}: member {name} is encrypted; torch never encrypts a checkpoint")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise CheckpointFormatError(
            f"{path}: member {name} is compressed with method {info.compress_type}; "
            "torch stores members uncompressed (deflate is read too)"
        )
    with archive.open(info) as member:
        return member.read(info.file_size)


def _read_zip(path: str, limits: CheckpointLimits) -> Any:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise CheckpointFormatError(f"{path}: not a readable zip archive ({e})") from None
    with archive:
        names = set(archive.namelist())
        pkls = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pkls) != 1:
            raise CheckpointFormatError(
                f"{path}: a torch archive has exactly one <root>/data.pkl, found {len(pkls)}"
            )
        root = pkls[0][: -len("data.pkl")]
        if any(not n.startswith(root) for n in names):
            raise CheckpointFormatError(f"{path}: members outside {root!r}")
        try:
            # zipfile stops inflating a member at the size its header declares: checked first
            pkl_bytes = archive.getinfo(pkls[0]).file_size
            if pkl_bytes > limits.max_pickle_bytes:
                raise CheckpointFormatError(
                    f"{path}: data.pkl is {pkl_bytes} bytes, more than max_pickle_bytes allows "
                    f"({limits.max_pickle_bytes}); a state dict's pickle is far smaller"
                )
            obj, storages, _ = _load_pickle(
                _read_member(archive, path, pkls[0]), 0, f"{path}: data.pkl", limits
            )
            members = {key: f"{root}data/{key}" for key in storages}
            for key, member in members.items():
                if member not in names:
                    raise CheckpointFormatError(f"{path}: storage {key!r} has no member {member}")
            held = pkl_bytes + _storage_bytes(storages, lambda key: f"member {members[key]}", path, limits)
            for key, ref in storages.items():
                declared = archive.getinfo(members[key]).file_size
                if declared != ref.numel * ref.dtype.itemsize:
                    raise CheckpointFormatError(
                        f"{path}: storage {key!r} ({ref.type_name}, {ref.numel} elements) needs "
                        f"{ref.numel * ref.dtype.itemsize} bytes, member {members[key]} holds {declared}"
                    )
            if held > limits.max_total_bytes:
                raise _over_total(path, f"data.pkl and the {len(storages)} storages", held, limits)
            arrays = {
                key: _Storage(_storage_array(ref, _read_member(archive, path, members[key]), f"member {members[key]}"),
                              f"member {members[key]}")
                for key, ref in storages.items()
            }  # fmt: skip
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError) as e:
            raise CheckpointFormatError(f"{path}: damaged zip member ({e})") from None
    return _Resolver(arrays, limits, held).value(obj)


def read_torch_checkpoint(path: str | os.PathLike[str], *, limits: CheckpointLimits | None = None) -> Any:
    """The object a ``torch.save`` file holds, with tensors as numpy arrays.

    Dicts, OrderedDicts, lists, tuples, strings, numbers and None come back as
    themselves (a part the pickle shares comes back shared); each tensor becomes a
    C-contiguous numpy array (bfloat16 as uint16 bits). Nothing from the file is
    executed. ``limits`` (default :class:`CheckpointLimits`) bounds what it may hold.

    Raises
    ------
    CheckpointRefusedError
        The pickle names a global, persistent id or storage type outside the allowed
        set (:data:`ALLOWED_GLOBALS`, :data:`STORAGE_DTYPES`), calls a storage type, or
        sends BUILD to anything but an OrderedDict.
    CheckpointFormatError
        A malformed archive or stream, a tensor/storage whose sizes do not fit, or a
        size over ``limits`` (the message names the storage or member and the limit).
    OSError
        The file cannot be read.
    """
    limits = CheckpointLimits() if limits is None else limits
    path = os.fspath(path)
    with open(path, "rb") as f:
        head = f.read(4)
    if head.startswith(b"PK"):
        return _read_zip(path, limits)
    return _read_legacy(path, limits)
