"""Hostile and malformed torch checkpoints against the restricted reader.

Every file is built here (no torch): both torch layouts, with a pickle that calls
``os.system``, asks for unknown globals, declares a tensor outside its storage,
a storage whose bytes are short or whose type is not a plain dtype, and archives
that are damaged. Each must be refused with its own error and must run nothing;
the ``os.system`` payload would create a file, and the test checks it does not.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from onespeech.features.torch_reader import (
    CheckpointFormatError,
    CheckpointRefusedError,
    read_torch_checkpoint,
)
from onespeech_tools.torch_checkpoint_writer import (
    Checkpoint,
    PickleAssembler,
    emit_tensor,
    resemblyzer_state,
    state_dict_pickle,
)

LAYOUTS = ("legacy", "zip")


def _small() -> Checkpoint:
    return Checkpoint.from_arrays(
        {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.array([1, -2], dtype=np.int64)}
    )


def _write(ckpt: Checkpoint, tmp_path: Path, layout: str) -> Path:
    return getattr(ckpt, f"write_{layout}")(tmp_path / f"model.{layout}")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_plain_state_dict_round_trips(tmp_path: Path, layout: str) -> None:
    state = resemblyzer_state(seed=3, hidden=8, mels=5, layers=2)
    got = read_torch_checkpoint(_write(Checkpoint.from_arrays(state), tmp_path, layout))["model_state"]
    assert list(got) == list(state)
    for name, a in state.items():
        assert got[name].dtype == a.dtype and np.array_equal(got[name], a)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_strided_view_is_copied_out(tmp_path: Path, layout: str) -> None:
    ckpt = _small()
    spec = ckpt.specs["w"]
    spec.offset, spec.size, spec.stride = 1, (4, 2), (1, 4)  # a transposed view starting at element 1
    got = read_torch_checkpoint(_write(ckpt, tmp_path, layout))["model_state"]["w"]
    want = np.arange(12, dtype=np.float32)[1:].copy()
    assert np.array_equal(got, np.lib.stride_tricks.as_strided(want, (4, 2), (4, 16)))
    assert got.flags.c_contiguous


def _payload_pickle(marker: Path) -> bytes:
    p = PickleAssembler().global_("os", "system").mark().str_(f"touch {marker}").tuple_from_mark().reduce()
    return p.stop()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_reduce_to_os_system_is_refused_and_not_run(tmp_path: Path, layout: str) -> None:
    marker = tmp_path / "pwned"
    ckpt = _small()
    ckpt.pickle_bytes = _payload_pickle(marker)
    path = _write(ckpt, tmp_path, layout)
    with pytest.raises(CheckpointRefusedError, match=r"global os\.system"):
        read_torch_checkpoint(path)
    assert not marker.exists()


def test_refusal_holds_in_a_fresh_bounded_interpreter(run_case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The same refusal in a clean process under a memory cap (nothing imported that could mask a side effect)."""
    marker = tmp_path / "pwned"
    ckpt = _small()
    ckpt.pickle_bytes = _payload_pickle(marker)
    path = _write(ckpt, tmp_path, "legacy")
    result = run_case(
        """
        from onespeech.features.torch_reader import read_torch_checkpoint
        read_torch_checkpoint(args["path"])
        """,
        args={"path": str(path)},
        memory_mb=512,
        timeout_s=60,
    )
    result.expect_error("CheckpointRefusedError", match="os.system")
    assert not marker.exists()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_huge_storage_claims_allocate_nothing(run_case, tmp_path: Path, layout: str) -> None:  # type: ignore[no-untyped-def]
    """A file claiming a 4 TiB storage (and a legacy header to match) is refused within 512 MB."""
    ckpt = _small()
    key = ckpt.specs["w"].storage_key
    ckpt.specs["w"].storage_numel = 1 << 40
    ckpt.specs["w"].size = (1 << 20, 1 << 20)
    ckpt.specs["w"].stride = (1 << 20, 1)
    ckpt.storage_counts[key] = 1 << 40
    path = _write(ckpt, tmp_path, layout)
    result = run_case(
        """
        from onespeech.features.torch_reader import read_torch_checkpoint
        read_torch_checkpoint(args["path"])
        """,
        args={"path": str(path)},
        memory_mb=512,
        timeout_s=60,
    )
    result.expect_error("CheckpointFormatError", match="past the end|needs 4398046511104 bytes")


@pytest.mark.parametrize(
    ("module", "name"),
    [("builtins", "eval"), ("builtins", "getattr"), ("torch", "load"), ("torch._utils", "_rebuild_parameter"),
     ("numpy.core.multiarray", "_reconstruct"), ("collections", "defaultdict"), ("__builtin__", "exec")],
)  # fmt: skip
def test_unknown_globals_are_refused(tmp_path: Path, module: str, name: str) -> None:
    ckpt = _small()
    ckpt.specs["w"].extra_global = (module, name)
    with pytest.raises(CheckpointRefusedError, match=f"{module}.{name}"):
        read_torch_checkpoint(_write(ckpt, tmp_path, "zip"))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_storage_type_outside_the_plain_dtypes_is_refused(tmp_path: Path, layout: str) -> None:
    ckpt = _small()
    ckpt.specs["w"].storage_type = "ComplexFloatStorage"
    with pytest.raises(CheckpointRefusedError, match="ComplexFloatStorage"):
        read_torch_checkpoint(_write(ckpt, tmp_path, layout))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    ("offset", "size", "stride"),
    [(1, (3, 4), (4, 1)), (0, (3, 5), (4, 1)), (0, (4, 3), (3, 2)), (12, (1,), (1,)), (0, (2, 2), (11, 1))],
)
def test_tensor_view_beyond_its_storage_is_refused(
    tmp_path: Path, layout: str, offset: int, size: tuple, stride: tuple
) -> None:
    ckpt = _small()
    spec = ckpt.specs["w"]
    spec.offset, spec.size, spec.stride = offset, size, stride
    with pytest.raises(CheckpointFormatError, match="reaches element .* which holds 12"):
        read_torch_checkpoint(_write(ckpt, tmp_path, layout))


@pytest.mark.parametrize("field", ["offset", "size", "stride"])
def test_negative_view_fields_are_refused(tmp_path: Path, field: str) -> None:
    ckpt = _small()
    spec = ckpt.specs["w"]
    if field == "offset":
        spec.offset = -1
    elif field == "size":
        spec.size = (-3, 4)
    else:
        spec.stride = (4, -1)
    with pytest.raises(CheckpointFormatError, match="integer >= 0|integers >= 0"):
        read_torch_checkpoint(_write(ckpt, tmp_path, "zip"))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_storage_bytes_shorter_than_declared_are_refused(tmp_path: Path, layout: str) -> None:
    ckpt = _small()
    key = ckpt.specs["w"].storage_key
    ckpt.storages[key] = ckpt.storages[key][:-4]
    ckpt.storage_counts[key] = 12  # the legacy header still claims 12 elements
    with pytest.raises(
        CheckpointFormatError, match="needs 48 bytes|past the end|follow the last|declared with"
    ):
        read_torch_checkpoint(_write(ckpt, tmp_path, layout))


def test_storage_declared_larger_than_its_member_is_refused(tmp_path: Path) -> None:
    ckpt = _small()
    ckpt.specs["w"].storage_numel = 1 << 40  # a claim of 4 TiB must not be allocated
    with pytest.raises(CheckpointFormatError, match="needs 4398046511104 bytes"):
        read_torch_checkpoint(_write(ckpt, tmp_path, "zip"))


def test_legacy_header_disagreeing_with_the_pickle_is_refused(tmp_path: Path) -> None:
    ckpt = _small()
    ckpt.storage_counts[ckpt.specs["b"].storage_key] = 3
    with pytest.raises(CheckpointFormatError, match="declared with 2 elements, its data header says 3"):
        read_torch_checkpoint(_write(ckpt, tmp_path, "legacy"))


def test_truncated_legacy_stream_is_refused(tmp_path: Path) -> None:
    path = _write(_small(), tmp_path, "legacy")
    data = path.read_bytes()
    for cut in (5, 60, len(data) // 2, len(data) - 1):
        path.write_bytes(data[:cut])
        with pytest.raises(CheckpointFormatError):
            read_torch_checkpoint(path)


def test_wrong_magic_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.pt"
    path.write_bytes(PickleAssembler().int_(12345).stop())
    with pytest.raises(CheckpointFormatError, match="not a torch checkpoint"):
        read_torch_checkpoint(path)


def test_random_bytes_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.pt"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(CheckpointFormatError):
        read_torch_checkpoint(path)


def test_damaged_archives_are_refused(tmp_path: Path) -> None:
    good = _write(_small(), tmp_path, "zip").read_bytes()
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good[: len(good) // 2])
    with pytest.raises(CheckpointFormatError, match="not a readable zip"):
        read_torch_checkpoint(truncated)

    no_pickle = tmp_path / "no_pickle.pt"
    with zipfile.ZipFile(no_pickle, "w") as z:
        z.writestr("archive/data/1000", b"\0" * 48)
    with pytest.raises(CheckpointFormatError, match="exactly one <root>/data.pkl"):
        read_torch_checkpoint(no_pickle)

    ckpt = _small()
    del ckpt.storages[ckpt.specs["w"].storage_key]
    with pytest.raises(CheckpointFormatError, match="has no member archive/data/1000"):
        read_torch_checkpoint(ckpt.write_zip(tmp_path / "missing_member.pt"))

    outside = tmp_path / "outside.pt"
    with zipfile.ZipFile(outside, "w") as z:
        z.writestr("archive/data.pkl", state_dict_pickle({}))
        z.writestr("../evil", b"x")
    with pytest.raises(CheckpointFormatError, match="members outside"):
        read_torch_checkpoint(outside)


def test_persistent_ids_other_than_storages_are_refused(tmp_path: Path) -> None:
    ckpt = _small()
    ckpt.pickle_bytes = PickleAssembler().mark().str_("module").str_("os").tuple_from_mark().persid().stop()
    with pytest.raises(CheckpointRefusedError, match="persistent id"):
        read_torch_checkpoint(ckpt.write_zip(tmp_path / "pid.pt"))


def test_one_storage_declared_twice_differently_is_refused(tmp_path: Path) -> None:
    ckpt = _small()
    ckpt.specs["b"].storage_key = ckpt.specs["w"].storage_key
    ckpt.specs["b"].storage_type = "LongStorage"
    with pytest.raises(CheckpointFormatError, match="declared twice"):
        read_torch_checkpoint(ckpt.write_zip(tmp_path / "twice.pt"))


def test_a_storage_type_cannot_be_called(tmp_path: Path) -> None:
    """``torch.FloatStorage`` is allowed as a marker only: a REDUCE on it must not build anything."""
    p = PickleAssembler().global_("torch", "FloatStorage").mark().int_(10).tuple_from_mark().reduce()
    ckpt = _small()
    ckpt.pickle_bytes = p.stop()
    with pytest.raises(CheckpointRefusedError, match="REDUCE calls torch.FloatStorage"):
        read_torch_checkpoint(ckpt.write_zip(tmp_path / "call.pt"))


def test_rebuild_with_a_non_storage_is_refused(tmp_path: Path) -> None:
    p = PickleAssembler().global_("torch._utils", "_rebuild_tensor_v2").mark().str_("x").int_(0)
    p.tuple_(1).tuple_(1).false().none().tuple_from_mark().reduce()
    ckpt = _small()
    ckpt.pickle_bytes = p.stop()
    with pytest.raises(CheckpointRefusedError, match="not a storage"):
        read_torch_checkpoint(ckpt.write_zip(tmp_path / "nostorage.pt"))


def test_emit_tensor_is_what_the_reader_accepts(tmp_path: Path) -> None:
    """The writer's hostile hooks start from a valid file: guard against testing a broken writer."""
    p = PickleAssembler()
    emit_tensor(p, _small().specs["w"])
    ckpt = _small()
    ckpt.pickle_bytes = p.stop()
    got = read_torch_checkpoint(ckpt.write_zip(tmp_path / "bare.pt"))
    assert np.array_equal(got, np.arange(12, dtype=np.float32).reshape(3, 4))


def test_real_resemblyzer_file(shared_data: Path) -> None:
    state = read_torch_checkpoint(shared_data / "models" / "resemblyzer_pretrained.pt")["model_state"]
    assert state["lstm.weight_ih_l0"].shape == (1024, 40)
    assert state["lstm.weight_hh_l2"].shape == (1024, 256)
    assert state["linear.weight"].shape == (256, 256)
    assert all(a.dtype == np.float32 and np.isfinite(a).all() for a in state.values())
