"""Write ``torch.save``-layout checkpoints from numpy arrays, without torch (for tests).

Both layouts torch writes: the legacy stream (Resemblyzer's ``pretrained.pt``) and the
zip archive (torch >= 1.6). The object pickle is assembled opcode by opcode so tests
can also build hostile variants: :class:`PickleAssembler` emits any global, reduce or
persistent id, and :func:`state_dict_pickle` takes hooks that rewrite parts of it.
:func:`write_raw_zip` writes members whose headers say what the test wants
(:func:`deflated_zeros`: a member that inflates a thousandfold).
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
STORAGE_NAMES = {
    np.dtype("<f4"): "FloatStorage",
    np.dtype("<f8"): "DoubleStorage",
    np.dtype("<f2"): "HalfStorage",
    np.dtype("<i8"): "LongStorage",
    np.dtype("<i4"): "IntStorage",
}


class PickleAssembler:
    """Protocol-2 pickle opcodes, appended in order (see ``pickletools`` for their meaning)."""

    def __init__(self) -> None:
        self.out = bytearray(b"\x80\x02")

    def op(self, code: bytes) -> PickleAssembler:
        self.out += code
        return self

    def mark(self) -> PickleAssembler:
        return self.op(b"(")

    def global_(self, module: str, name: str) -> PickleAssembler:
        return self.op(b"c" + f"{module}\n{name}\n".encode())

    def str_(self, s: str) -> PickleAssembler:
        b = s.encode("utf-8")
        return self.op(b"X" + struct.pack("<I", len(b)) + b)

    def int_(self, v: int) -> PickleAssembler:
        if 0 <= v < 1 << 31 or -(1 << 31) <= v < 0:
            return self.op(b"J" + struct.pack("<i", v))
        n = (v.bit_length() + 8) // 8
        head = b"\x8a" + bytes([n]) if n < 256 else b"\x8b" + struct.pack("<I", n)  # LONG1 or LONG4
        return self.op(head + v.to_bytes(n, "little", signed=True))

    def none(self) -> PickleAssembler:
        return self.op(b"N")

    def false(self) -> PickleAssembler:
        return self.op(b"\x89")

    def true(self) -> PickleAssembler:
        return self.op(b"\x88")

    def tuple_(self, *ints: int) -> PickleAssembler:
        self.mark()
        for v in ints:
            self.int_(v)
        return self.op(b"t")

    def tuple_from_mark(self) -> PickleAssembler:
        return self.op(b"t")

    def empty_tuple(self) -> PickleAssembler:
        return self.op(b")")

    def empty_dict(self) -> PickleAssembler:
        return self.op(b"}")

    def empty_list(self) -> PickleAssembler:
        return self.op(b"]")

    def reduce(self) -> PickleAssembler:
        return self.op(b"R")

    def persid(self) -> PickleAssembler:
        return self.op(b"Q")

    def setitems(self) -> PickleAssembler:
        return self.op(b"u")

    def setitem(self) -> PickleAssembler:
        return self.op(b"s")

    def pop(self) -> PickleAssembler:
        return self.op(b"0")

    def build(self) -> PickleAssembler:
        return self.op(b"b")

    def binput(self, index: int) -> PickleAssembler:
        return self.op(b"r" + struct.pack("<I", index))

    def binget(self, index: int) -> PickleAssembler:
        return self.op(b"j" + struct.pack("<I", index))

    def appends(self) -> PickleAssembler:
        return self.op(b"e")

    def stop(self) -> bytes:
        self.op(b".")
        return bytes(self.out)


@dataclass
class TensorSpec:
    """How one tensor is declared in the pickle (defaults: a plain contiguous tensor)."""

    storage_key: str
    storage_type: str
    storage_numel: int
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    location: str = "cpu"
    extra_global: tuple[str, str] | None = None  # replaces torch._utils._rebuild_tensor_v2


def contiguous_spec(key: str, a: np.ndarray) -> TensorSpec:
    strides, acc = [], 1
    for n in reversed(a.shape):
        strides.append(acc)
        acc *= n
    return TensorSpec(key, STORAGE_NAMES[a.dtype], int(a.size), 0, tuple(a.shape), tuple(reversed(strides)))


def emit_tensor(p: PickleAssembler, spec: TensorSpec) -> None:
    module, name = spec.extra_global or ("torch._utils", "_rebuild_tensor_v2")
    p.global_(module, name).mark()
    p.mark().str_("storage").global_("torch", spec.storage_type).str_(spec.storage_key).str_(spec.location)
    p.int_(spec.storage_numel).none().tuple_from_mark().persid()
    p.int_(spec.offset).tuple_(*spec.size).tuple_(*spec.stride).false()
    p.global_("collections", "OrderedDict").empty_tuple().reduce()
    p.tuple_from_mark().reduce()


def state_dict_pickle(specs: Mapping[str, TensorSpec], wrap_key: str | None = "model_state") -> bytes:
    """``{wrap_key: OrderedDict(name -> tensor)}`` (or the bare OrderedDict) as pickle bytes."""
    p = PickleAssembler()
    if wrap_key is not None:
        p.empty_dict().mark().str_(wrap_key)
    p.global_("collections", "OrderedDict").empty_tuple().reduce().mark()
    for name, spec in specs.items():
        p.str_(name)
        emit_tensor(p, spec)
    p.setitems()
    if wrap_key is not None:
        p.setitems()
    return p.stop()


@dataclass
class Checkpoint:
    """A state dict ready to be written in either layout; edit ``specs``/``storages`` to damage it."""

    specs: dict[str, TensorSpec]
    storages: dict[str, bytes]  # key -> raw bytes
    pickle_bytes: bytes | None = None  # overrides the generated object pickle
    storage_counts: dict[str, int] = field(default_factory=dict)  # legacy header overrides

    @classmethod
    def from_arrays(cls, tensors: Mapping[str, np.ndarray]) -> Checkpoint:
        specs, storages = {}, {}
        for i, (name, a) in enumerate(tensors.items()):
            key = str(1000 + i)
            a = np.ascontiguousarray(a)
            specs[name] = contiguous_spec(key, a)
            storages[key] = a.astype(a.dtype.newbyteorder("<")).tobytes()
        return cls(specs, storages)

    def object_pickle(self) -> bytes:
        return self.pickle_bytes if self.pickle_bytes is not None else state_dict_pickle(self.specs)

    def write_legacy(self, path: str | Path) -> Path:
        buf = io.BytesIO()
        buf.write(PickleAssembler().int_(LEGACY_MAGIC).stop())
        buf.write(PickleAssembler().int_(1001).stop())
        info = PickleAssembler().empty_dict().mark().str_("protocol_version").int_(1001)
        info.str_("little_endian").true().str_("type_sizes").empty_dict().mark()
        for k, v in (("short", 2), ("int", 4), ("long", 4)):
            info.str_(k).int_(v)
        buf.write(info.setitems().setitems().stop())
        buf.write(self.object_pickle())
        keys = PickleAssembler().empty_list().mark()
        for key in self.storages:
            keys.str_(key)
        buf.write(keys.appends().stop())
        itemsizes = {s.storage_key: np.dtype(_dtype_of(s.storage_type)).itemsize for s in self.specs.values()}
        for key, raw in self.storages.items():
            count = self.storage_counts.get(key, len(raw) // itemsizes.get(key, 4))
            buf.write(struct.pack("<q", count) + raw)
        Path(path).write_bytes(buf.getvalue())
        return Path(path)

    def write_zip(self, path: str | Path, root: str = "archive") -> Path:
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
            z.writestr(f"{root}/data.pkl", self.object_pickle())
            z.writestr(f"{root}/version", "3\n")
            for key, raw in self.storages.items():
                z.writestr(f"{root}/data/{key}", raw)
        return Path(path)


def _dtype_of(storage_type: str) -> str:
    for dt, name in STORAGE_NAMES.items():
        if name == storage_type:
            return dt.str
    return "<f4"


def resemblyzer_state(
    seed: int = 0, hidden: int = 256, mels: int = 40, layers: int = 3
) -> dict[str, np.ndarray]:
    """Resemblyzer's ``model_state`` names and shapes with seeded random weights."""
    rng = np.random.default_rng(seed)
    out = {"similarity_weight": np.array([10.0], np.float32), "similarity_bias": np.array([-5.0], np.float32)}
    for layer in range(layers):
        fan_in = mels if layer == 0 else hidden
        scale = 1.0 / np.sqrt(hidden)
        out[f"lstm.weight_ih_l{layer}"] = rng.uniform(-scale, scale, (4 * hidden, fan_in)).astype(np.float32)
        out[f"lstm.weight_hh_l{layer}"] = rng.uniform(-scale, scale, (4 * hidden, hidden)).astype(np.float32)
        out[f"lstm.bias_ih_l{layer}"] = rng.uniform(-scale, scale, 4 * hidden).astype(np.float32)
        out[f"lstm.bias_hh_l{layer}"] = rng.uniform(-scale, scale, 4 * hidden).astype(np.float32)
    out["linear.weight"] = (rng.uniform(-1, 1, (hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    out["linear.bias"] = rng.uniform(0, 0.1, hidden).astype(np.float32)
    return out


@dataclass(frozen=True)
class RawMember:
    """A zip member given as its stored bytes: what its headers declare is up to the test."""

    data: bytes  # as stored in the archive (deflated if ``method`` is 8)
    crc: int
    file_size: int  # the inflated size both headers declare
    method: int = zipfile.ZIP_DEFLATED


def deflated_zeros(n_bytes: int) -> RawMember:
    """``n_bytes`` zero bytes (a multiple of 1 MiB) as a deflate stream of about n_bytes / 1000.

    Each MiB is deflated once and ended with a full flush, which makes the blocks
    independent: the stream is that block repeated, then an empty final block. The
    CRC is computed over the zeros in MiB steps (about 1 s per GiB).
    """
    mib = 1 << 20
    if n_bytes % mib:
        raise ValueError(f"n_bytes={n_bytes} is not a multiple of 1 MiB")
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = deflate.compress(bytes(mib)) + deflate.flush(zlib.Z_FULL_FLUSH)
    tail = zlib.compressobj(9, zlib.DEFLATED, -15).flush()  # one empty final block
    crc, zeros = 0, bytes(mib)
    for _ in range(n_bytes // mib):
        crc = zlib.crc32(zeros, crc)
    return RawMember(block * (n_bytes // mib) + tail, crc, n_bytes)


def stored(data: bytes) -> RawMember:
    return RawMember(data, zlib.crc32(data), len(data), zipfile.ZIP_STORED)


def write_raw_zip(path: str | Path, members: Mapping[str, RawMember]) -> Path:
    """A zip archive (no zip64: every member below 4 GiB) whose headers say what ``members`` say."""
    out, central = bytearray(), bytearray()
    for name, m in members.items():
        encoded = name.encode()
        fields = struct.pack("<HHHHHIII", 20, 0, m.method, 0, 0x21, m.crc, len(m.data), m.file_size)
        central += b"PK\x01\x02" + struct.pack("<H", 20) + fields
        central += struct.pack("<HHHHHII", len(encoded), 0, 0, 0, 0, 0, len(out)) + encoded
        out += b"PK\x03\x04" + fields + struct.pack("<HH", len(encoded), 0) + encoded + m.data
    start = len(out)
    out += central
    out += b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, len(members), len(members), len(central), start, 0)
    Path(path).write_bytes(bytes(out))
    return Path(path)
