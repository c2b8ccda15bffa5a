"""Checkpoints that try to steer the restricted torch reader past its checks, or to make it read without bound.

BUILD (pickle's "set the state of this object") aimed at what the reader builds or
trusts: a tensor view resized after it was made, a storage type whose dtype is
changed for the whole process. Size claims: a 1.6 MB zip whose storage member
inflates to 1.5 GiB, a member inflating past what its header declares, a view of
1.6e9 elements over one element (strides 0), storages and views that each fit but
together do not, containers shared 2^40 times. Cases that could read out of bounds or allocate run bounded (``run_case``).
The property test reads views over a storage followed, in the same legacy file, by
a guard storage of other values: a view that strays past its storage reads the
guard (never unmapped memory) and the test sees it.
"""

from __future__ import annotations

import hashlib
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onespeech.features.torch_reader import (
    CheckpointFormatError,
    CheckpointLimits,
    CheckpointRefusedError,
    read_torch_checkpoint,
)
from onespeech_tools.torch_checkpoint_writer import (
    Checkpoint,
    PickleAssembler,
    RawMember,
    TensorSpec,
    deflated_zeros,
    emit_tensor,
    state_dict_pickle,
    stored,
    write_raw_zip,
)

LAYOUTS = ("legacy", "zip")
READ = """
from onespeech.features.torch_reader import read_torch_checkpoint
read_torch_checkpoint(args["path"])
"""


def _write(ckpt: Checkpoint, tmp_path: Path, layout: str) -> Path:
    return getattr(ckpt, f"write_{layout}")(tmp_path / f"model.{layout}")


def _set_state(p: PickleAssembler, state: dict[str, int | tuple[int, ...]]) -> PickleAssembler:
    """BUILD with ``state`` on the object on top of the stack (which stays there)."""
    p.empty_dict()
    for key, value in state.items():
        p.str_(key)
        p.tuple_(*value) if isinstance(value, tuple) else p.int_(value)
        p.setitem()
    return p.build()


def _resized_view(size: int) -> Checkpoint:
    """A valid view of a one-element storage, then BUILD {'size': (size,)} on the tensor it made."""
    ckpt = Checkpoint.from_arrays({"w": np.array([1.5], np.float32)})
    p = PickleAssembler()
    emit_tensor(p, ckpt.specs["w"])
    _set_state(p, {"size": (size,)})
    ckpt.pickle_bytes = p.stop()
    return ckpt


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("size", [4096, 1 << 28])
def test_build_cannot_resize_a_checked_view(run_case, tmp_path: Path, layout: str, size: int) -> None:  # type: ignore[no-untyped-def]
    """Before: 4096 floats of process heap came back; 2^28 killed the process."""
    path = _write(_resized_view(size), tmp_path, layout)
    result = run_case(READ, args={"path": str(path)}, memory_mb=512, timeout_s=60)
    result.expect_error("CheckpointRefusedError", match="BUILD .*a tensor")


def _tensor_digest(state: dict) -> str:
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode() + state[name].tobytes())
    return digest.hexdigest()


@pytest.mark.parametrize(
    ("module", "name", "state"),
    [("torch", "FloatStorage", {"dtype": 0}), ("torch", "FloatStorage", {"name": 5}),
     ("torch._utils", "_rebuild_tensor_v2", {"x": 1}), ("collections", "OrderedDict", {"x": 1})],
)  # fmt: skip
def test_build_on_an_allowed_global_changes_nothing(  # type: ignore[no-untyped-def]
    run_case, tmp_path: Path, shared_data: Path, module: str, name: str, state: dict
) -> None:
    """BUILD on a global is refused, and the genuine file then reads the same in that process.

    Before: ``torch.FloatStorage`` BUILD {'dtype': 0} changed the reader's table for the
    whole process, and the real Resemblyzer file no longer loaded.
    """
    real = shared_data / "models" / "resemblyzer_pretrained.pt"
    p = _set_state(PickleAssembler().global_(module, name), state)
    ckpt = Checkpoint.from_arrays({})
    ckpt.pickle_bytes = p.stop()
    hostile = ckpt.write_zip(tmp_path / "hostile.pt")
    result = run_case(
        """
        import hashlib
        from onespeech.features.torch_reader import TorchCheckpointError, read_torch_checkpoint
        try:
            read_torch_checkpoint(args["hostile"])
            refused = None
        except TorchCheckpointError as error:
            refused = [type(error).__name__, str(error)]
        state = read_torch_checkpoint(args["real"])["model_state"]
        digest = hashlib.sha256()
        for name in sorted(state):
            digest.update(name.encode() + state[name].tobytes())
        result = {"refused": refused, "digest": digest.hexdigest()}
        """,
        args={"hostile": str(hostile), "real": str(real)},
        timeout_s=60,
    )
    value = result.expect_ok()
    assert value["refused"] is not None and value["refused"][0] == "CheckpointRefusedError", value
    assert "BUILD" in value["refused"][1] and f"{module}.{name}" in value["refused"][1]
    assert value["digest"] == _tensor_digest(read_torch_checkpoint(real)["model_state"])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_build_on_a_storage_is_refused(tmp_path: Path, layout: str) -> None:
    """The storage a persistent id names is the reader's record: BUILD must not change its size."""
    ckpt = Checkpoint.from_arrays({"w": np.arange(4, dtype=np.float32)})
    p = PickleAssembler().global_("torch._utils", "_rebuild_tensor_v2").mark()
    p.mark().str_("storage").global_("torch", "FloatStorage").str_("1000").str_("cpu").int_(4).none()
    p.tuple_from_mark().persid()
    _set_state(p, {"numel": 1 << 20})
    p.int_(0).tuple_(4).tuple_(1).false().tuple_from_mark().reduce()
    ckpt.pickle_bytes = p.stop()
    with pytest.raises(CheckpointRefusedError, match="BUILD .*storage '1000'"):
        read_torch_checkpoint(_write(ckpt, tmp_path, layout))


def test_build_on_a_state_dict_is_accepted_and_dropped(tmp_path: Path) -> None:
    """torch pickles ``state_dict._metadata`` as BUILD on the OrderedDict: read, not kept."""
    p = PickleAssembler().global_("collections", "OrderedDict").empty_tuple().reduce()
    p.mark().str_("w")
    emit_tensor(p, Checkpoint.from_arrays({"w": np.arange(3, dtype=np.float32)}).specs["w"])
    p.setitems()
    p.empty_dict().str_("_metadata").empty_dict().setitem().build()
    ckpt = Checkpoint.from_arrays({"w": np.arange(3, dtype=np.float32)})
    ckpt.pickle_bytes = p.stop()
    got = read_torch_checkpoint(ckpt.write_zip(tmp_path / "meta.pt"))
    assert list(got) == ["w"] and np.array_equal(got["w"], [0, 1, 2])
    assert not hasattr(got, "_metadata")


def test_inflating_member_is_refused_before_it_is_read(run_case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A 1.6 MB archive whose storage member inflates to 1.5 GiB. Before: read whole (MemoryError here)."""
    n_bytes = 1536 << 20
    spec = TensorSpec("0", "FloatStorage", n_bytes // 4, 0, (1,), (1,))
    path = write_raw_zip(
        tmp_path / "bomb.pt",
        {
            "archive/data.pkl": stored(state_dict_pickle({"w": spec})),
            "archive/data/0": deflated_zeros(n_bytes),
        },
    )
    assert path.stat().st_size < 8 << 20
    result = run_case(READ, args={"path": str(path)}, memory_mb=512, timeout_s=60)
    result.expect_error("CheckpointFormatError", match=r"member archive/data/0 .*max_tensor_bytes")


def test_member_longer_than_its_header_is_read_only_to_the_header(run_case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A deflate stream of 1 GiB behind a header declaring 16 bytes is inflated to 16 bytes, no further.

    ``ZipFile.read`` would inflate it in one 2 GiB step (MemoryError under this cap).
    """
    spec = TensorSpec("0", "FloatStorage", 4, 0, (4,), (1,))
    bomb = deflated_zeros(1 << 30)
    member = RawMember(bomb.data, zlib.crc32(bytes(16)), 16)
    path = write_raw_zip(
        tmp_path / "liar.pt",
        {"archive/data.pkl": stored(state_dict_pickle({"w": spec})), "archive/data/0": member},
    )
    source = READ.replace("read_torch_checkpoint(args", "got = read_torch_checkpoint(args")
    result = run_case(source + "result = got['model_state']['w'].tolist()", args={"path": str(path)},
                      memory_mb=512, timeout_s=60)  # fmt: skip
    assert result.expect_ok() == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_members_compressed_without_a_bounded_step_are_refused(tmp_path: Path, method: int) -> None:
    """bzip2 and lzma inflate a whole read at once: a member so compressed is refused unread."""
    ckpt = Checkpoint.from_arrays({"w": np.zeros(4, np.float32)})
    path = tmp_path / "packed.pt"
    with zipfile.ZipFile(path, "w", method) as z:
        z.writestr("archive/data.pkl", ckpt.object_pickle())
        z.writestr("archive/data/1000", ckpt.storages["1000"])
    with pytest.raises(CheckpointFormatError, match="compressed with method"):
        read_torch_checkpoint(path)


def test_corrupt_and_encrypted_members_are_refused(tmp_path: Path) -> None:
    """Before: a bare zlib.error, and a RuntimeError asking for a password."""
    ckpt = Checkpoint.from_arrays({"w": np.zeros(4, np.float32)})
    pkl = stored(ckpt.object_pickle())
    corrupt = write_raw_zip(
        tmp_path / "corrupt.pt",
        {"archive/data.pkl": pkl, "archive/data/1000": RawMember(b"\xff" * 12, 0, 16)},
    )
    with pytest.raises(CheckpointFormatError, match="damaged zip member"):
        read_torch_checkpoint(corrupt)
    raw = bytearray(ckpt.write_zip(tmp_path / "encrypted.pt").read_bytes())
    for signature, flags_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # local and central headers
        at = raw.find(signature)
        while at >= 0:
            raw[at + flags_at] |= 1
            at = raw.find(signature, at + 4)
    encrypted = tmp_path / "encrypted.pt"
    encrypted.write_bytes(bytes(raw))
    with pytest.raises(CheckpointFormatError, match="encrypted"):
        read_torch_checkpoint(encrypted)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_zero_stride_view_of_billions_is_refused(run_case, tmp_path: Path, layout: str) -> None:  # type: ignore[no-untyped-def]
    """(40000, 40000) at strides (0, 0) over one element: a 6 GiB copy before, refused now."""
    ckpt = Checkpoint.from_arrays({"w": np.array([2.0], np.float32)})
    ckpt.specs["w"].size, ckpt.specs["w"].stride = (40000, 40000), (0, 0)
    path = _write(ckpt, tmp_path, layout)
    assert path.stat().st_size < 1024
    result = run_case(READ, args={"path": str(path)}, memory_mb=512, timeout_s=60)
    where = "member archive/data/1000" if layout == "zip" else "storage '1000'"
    result.expect_error("CheckpointFormatError", match=f"1600000000 elements.*{where}.*max_tensor_bytes")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_storages_over_the_total_are_refused_before_reading(tmp_path: Path, layout: str) -> None:
    ckpt = Checkpoint.from_arrays({f"w{i}": np.zeros(256, np.float32) for i in range(3)})  # 3 x 1 KiB
    limits = CheckpointLimits(max_tensor_bytes=1024, max_total_bytes=2560, max_pickle_bytes=4096)
    with pytest.raises(CheckpointFormatError, match="max_total_bytes"):
        read_torch_checkpoint(_write(ckpt, tmp_path, layout), limits=limits)
    roomy = CheckpointLimits(max_tensor_bytes=1024, max_total_bytes=8192, max_pickle_bytes=4096)
    assert len(read_torch_checkpoint(_write(ckpt, tmp_path, layout), limits=roomy)["model_state"]) == 3


@pytest.mark.parametrize("layout", LAYOUTS)
def test_storage_over_the_tensor_cap_names_it(tmp_path: Path, layout: str) -> None:
    ckpt = Checkpoint.from_arrays({"w": np.zeros(300, np.float32)})
    limits = CheckpointLimits(max_tensor_bytes=1024, max_total_bytes=1 << 20, max_pickle_bytes=4096)
    where = "member archive/data/1000" if layout == "zip" else "storage '1000'"
    with pytest.raises(CheckpointFormatError, match=f"{where}.*1200 bytes.*max_tensor_bytes"):
        read_torch_checkpoint(_write(ckpt, tmp_path, layout), limits=limits)


def test_views_that_together_exceed_the_total_are_refused(tmp_path: Path) -> None:
    """Ten views of one 1 KiB storage: each fits, their copies together do not."""
    ckpt = Checkpoint.from_arrays({"w": np.zeros(256, np.float32)})
    ckpt.specs.update({f"v{i}": ckpt.specs["w"] for i in range(9)})
    path = ckpt.write_zip(tmp_path / "views.pt")
    limits = CheckpointLimits(max_tensor_bytes=1024, max_total_bytes=6000, max_pickle_bytes=4096)
    with pytest.raises(CheckpointFormatError, match="max_total_bytes"):
        read_torch_checkpoint(path, limits=limits)
    assert len(read_torch_checkpoint(path)["model_state"]) == 10


def test_pickle_over_its_cap_is_refused(tmp_path: Path) -> None:
    ckpt = Checkpoint.from_arrays({f"w{i}": np.zeros(1, np.float32) for i in range(40)})
    limits = CheckpointLimits(max_tensor_bytes=1024, max_total_bytes=1 << 20, max_pickle_bytes=1024)
    for layout in LAYOUTS:
        with pytest.raises(CheckpointFormatError, match="max_pickle_bytes"):
            read_torch_checkpoint(_write(ckpt, tmp_path, layout), limits=limits)


def test_shared_containers_are_resolved_once(run_case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """40 levels of lists each holding the previous one twice: 2^40 visits before, 40 now."""
    ckpt = Checkpoint.from_arrays({"w": np.arange(2, dtype=np.float32)})
    p = PickleAssembler().empty_list().mark()
    emit_tensor(p, ckpt.specs["w"])
    p.appends().binput(0)
    for level in range(1, 41):  # drop the previous level from the stack, keep it in the memo
        p.pop().empty_list().mark().binget(level - 1).binget(level - 1).appends().binput(level)
    ckpt.pickle_bytes = p.stop()
    path = ckpt.write_zip(tmp_path / "shared.pt")
    result = run_case(
        READ.replace("read_torch_checkpoint(args", "got = read_torch_checkpoint(args")
        + "\nfor _ in range(40):\n    got = got[1]\nresult = got[0].tolist()",
        args={"path": str(path)},
        memory_mb=512,
        timeout_s=30,
    )
    assert result.expect_ok() == [0.0, 1.0]


def test_integer_keys_sharing_one_hash_are_refused(run_case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """80,000 dict keys k * (2**61 - 1), all of one hash: each insert walked all the others before."""
    p = PickleAssembler().empty_dict().mark()
    for k in range(1, 80_001):
        p.int_(k * (2**61 - 1)).none()
    ckpt = Checkpoint.from_arrays({})
    ckpt.pickle_bytes = p.setitems().stop()
    path = ckpt.write_zip(tmp_path / "keys.pt")
    result = run_case(READ, args={"path": str(path)}, memory_mb=512, timeout_s=20)
    result.expect_error("CheckpointFormatError", match="keys are strings or integers")


@pytest.mark.parametrize("where", ["numel", "size", "protocol"])
def test_unprintable_values_still_raise_a_checkpoint_error(tmp_path: Path, where: str) -> None:
    """An integer of 10,000 digits in a field: its message must not fail (Python prints 4300 digits at most)."""
    huge = 10**10_000
    ckpt = Checkpoint.from_arrays({"w": np.zeros(2, np.float32)})
    if where == "protocol":
        path = ckpt.write_legacy(tmp_path / "model.legacy")
        data = path.read_bytes()
        first = PickleAssembler().int_(0x1950A86A20F9469CFC6C).stop()
        path.write_bytes(first + PickleAssembler().int_(huge).stop() + data[len(first) + 8 :])
    else:
        setattr(
            ckpt.specs["w"],
            "storage_numel" if where == "numel" else "size",
            huge if where == "numel" else (huge,),
        )
        path = ckpt.write_zip(tmp_path / "model.zip")
    with pytest.raises(CheckpointFormatError, match="too large to print"):
        read_torch_checkpoint(path)


def test_default_limits_leave_the_resemblyzer_model_a_wide_margin(shared_data: Path) -> None:
    """The real file still reads with a quarter of each default: the defaults are not tight."""
    default = CheckpointLimits()
    quarter = CheckpointLimits(
        max_tensor_bytes=default.max_tensor_bytes // 4,
        max_total_bytes=default.max_total_bytes // 4,
        max_pickle_bytes=default.max_pickle_bytes // 4,
    )
    state = read_torch_checkpoint(shared_data / "models" / "resemblyzer_pretrained.pt", limits=quarter)
    assert len(state["model_state"]) == 16


@pytest.mark.parametrize("field", ["max_tensor_bytes", "max_total_bytes", "max_pickle_bytes"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_limits_must_be_positive_integers(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        CheckpointLimits(**{field: value})  # type: ignore[arg-type]


# -- the property: any view, any BUILD, and the answer is an error or the file's own elements --

GUARD = 16384  # guard elements after the storage: more than any view below can reach past it
BUILD_TARGETS = (None, "tensor", "storage", "storage_type", "rebuild", "ordered_dict", "state_dict")
BUILD_KEYS = ("size", "stride", "offset", "storage", "numel", "dtype", "key", "_metadata")
_index = st.integers(0, 64)
_state = st.dictionaries(
    st.sampled_from(BUILD_KEYS), st.one_of(_index, st.tuples(_index), st.tuples(_index, _index)), min_size=1
)


def _emit_view(p: PickleAssembler, numel: int, offset: int, size: tuple, stride: tuple, target: str | None,
               state: dict) -> None:  # fmt: skip
    p.global_("torch._utils", "_rebuild_tensor_v2").mark()
    p.mark().str_("storage").global_("torch", "IntStorage").str_("1000").str_("cpu").int_(numel).none()
    p.tuple_from_mark().persid()
    if target == "storage":
        _set_state(p, state)
    p.int_(offset).tuple_(*size).tuple_(*stride).false().tuple_from_mark().reduce()
    if target == "tensor":
        _set_state(p, state)


def _view_pickle(
    numel: int, offset: int, size: tuple, stride: tuple, target: str | None, state: dict
) -> bytes:
    p = PickleAssembler()
    if target in ("storage_type", "rebuild", "ordered_dict"):  # BUILD on a global, then drop it
        module, name = {"storage_type": ("torch", "IntStorage"), "rebuild": ("torch._utils", "_rebuild_tensor_v2"),
                        "ordered_dict": ("collections", "OrderedDict")}[target]  # fmt: skip
        _set_state(p.global_(module, name), state).pop()
    p.global_("collections", "OrderedDict").empty_tuple().reduce().mark().str_("v")
    _emit_view(p, numel, offset, size, stride, target, state)
    guard = TensorSpec("1001", "IntStorage", GUARD, 0, (1,), (1,))
    p.str_("g")
    emit_tensor(p, guard)
    p.setitems()
    if target == "state_dict":
        _set_state(p, {k: v for k, v in state.items()})
    return p.stop()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    numel=st.integers(1, 64),
    offset=_index,
    shape=st.lists(st.tuples(_index, _index), min_size=1, max_size=3),
    target=st.sampled_from(BUILD_TARGETS),
    state=_state,
)
def test_any_view_or_build_yields_an_error_or_the_files_own_elements(
    tmp_path: Path, numel: int, offset: int, shape: list, target: str | None, state: dict
) -> None:
    size, stride = tuple(n for n, _ in shape), tuple(s for _, s in shape)
    marks = np.arange(numel, dtype=np.int32) + 0x5A000000
    ckpt = Checkpoint.from_arrays({})
    ckpt.storages = {
        "1000": marks.tobytes(),
        "1001": (np.arange(GUARD, dtype=np.int32) + 0x3C000000).tobytes(),
    }
    ckpt.specs = {
        "v": TensorSpec("1000", "IntStorage", numel, 0, (1,), (1,)),
        "g": TensorSpec("1001", "IntStorage", GUARD, 0, (1,), (1,)),
    }
    ckpt.pickle_bytes = _view_pickle(numel, offset, size, stride, target, state)
    path = ckpt.write_legacy(tmp_path / "view.pt")

    index = np.full((), offset, dtype=np.int64)
    for n, s in shape:
        index = index[..., None] + np.arange(n, dtype=np.int64) * s
    in_bounds = index.size == 0 or int(index.max()) < numel
    if target in (None, "state_dict") and in_bounds:
        got = read_torch_checkpoint(path)
        assert got["v"].shape == size and got["v"].dtype == np.int32
        assert np.array_equal(got["v"], marks[index] if index.size else np.zeros(size, np.int32))
        assert not hasattr(got, "_metadata")
    else:
        with pytest.raises((CheckpointFormatError, CheckpointRefusedError)):
            got = read_torch_checkpoint(path)
            # only reached when the reader failed to refuse: say whether it read outside the storage
            values = got["v"] if isinstance(got, dict) and isinstance(got.get("v"), np.ndarray) else None
            strays = None if values is None else np.setdiff1d(values.ravel(), marks).tolist()[:8]
            pytest.fail(f"read instead of refusing; values not from the storage: {strays}")
