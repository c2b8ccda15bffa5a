"""Publisher checkpoint -> runtime files: exact, laid out as documented, deterministic."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from onespeech.kernels.store import read_manifest, sha256_file
from onespeech.kernels.tensorfile import read_tensor_file
from onespeech.qwen3 import convert as convert_module
from onespeech.qwen3.convert import ConversionError, convert, manifest_name
from onespeech.qwen3.safetensors import open_checkpoint
from onespeech_tools import checkpoints


@pytest.fixture(scope="module")
def publisher(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkpoints.make_checkpoint(tmp_path_factory.mktemp("pub"), "tiny", seed=5, data_dir=shared_data)


@pytest.fixture(scope="module")
def aligner_publisher(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkpoints.make_checkpoint(
        tmp_path_factory.mktemp("pub-al"), "tiny", seed=5, kind="aligner", data_dir=shared_data
    )


@pytest.fixture(scope="module")
def fp32_dir(publisher: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fp32")
    convert(publisher, out, "fp32")
    return out


def _bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def test_layout_four_decoder_layers_per_file(fp32_dir: Path) -> None:
    names = sorted(p.name for p in fp32_dir.iterdir())
    assert [n for n in names if n.endswith(".ost")] == [
        "fp32-decoder-00.ost", "fp32-decoder-01.ost", "fp32-embed.ost", "fp32-encoder-00.ost", "fp32-head.ost",
    ]  # fmt: skip
    first = read_tensor_file(fp32_dir / "fp32-decoder-00.ost")
    layers = {int(n.split(".")[3]) for n in first}
    assert layers == {0, 1, 2, 3}
    last = read_tensor_file(fp32_dir / "fp32-decoder-01.ost")
    assert {n for n in last if ".layers." in n} and "thinker.model.norm.weight" in last
    assert {int(n.split(".")[3]) for n in last if ".layers." in n} == {4}
    assert list(read_tensor_file(fp32_dir / "fp32-embed.ost")) == ["thinker.model.embed_tokens.weight"]
    assert list(read_tensor_file(fp32_dir / "fp32-head.ost")) == ["thinker.lm_head.weight"]
    assert all(n.startswith("thinker.audio_tower.") for n in read_tensor_file(fp32_dir / "fp32-encoder-00.ost"))


def test_fp32_is_exact_expansion_and_head_is_the_tied_embedding(publisher: Path, fp32_dir: Path) -> None:
    manifest = read_manifest(fp32_dir, name=manifest_name("fp32"))
    index = manifest.metadata["tensors"]
    with open_checkpoint(publisher) as ckpt:
        assert set(index) == set(ckpt)
        for name in ckpt:
            entry = index[name]
            array = read_tensor_file(fp32_dir / entry["file"])[name]
            assert array.dtype == np.float32 and list(array.shape) == entry["shape"]
            source = "thinker.model.embed_tokens.weight" if name == "thinker.lm_head.weight" else name
            np.testing.assert_array_equal(array.view(np.uint32), ckpt[source].astype(np.uint32) << 16)
        # the stored lm_head differs from the embedding: the runtime head must not be it
        stored_head = _bits_to_f32(ckpt["thinker.lm_head.weight"])
        assert not np.array_equal(read_tensor_file(fp32_dir / "fp32-head.ost")["thinker.lm_head.weight"], stored_head)
    assert manifest.metadata["output_head"] == {
        "name": "thinker.lm_head.weight", "source": "thinker.model.embed_tokens.weight",
    }  # fmt: skip


def test_manifest_lists_every_file_with_size_and_digest(publisher: Path, fp32_dir: Path) -> None:
    manifest = read_manifest(fp32_dir, name="manifest.fp32.json")
    on_disk = {p.name for p in fp32_dir.iterdir() if p.name != "manifest.fp32.json"}
    assert set(manifest.files) == on_disk
    for name, pin in manifest.files.items():
        assert sha256_file(fp32_dir / name) == pin
        assert pin.size <= convert_module.MAX_FILE_BYTES
    meta = manifest.metadata
    assert meta["precision"] == "fp32" and meta["converter"] == "onespeech.qwen3.convert 2"
    assert meta["source"]["model.safetensors"]["sha256"] == sha256_file(publisher / "model.safetensors").sha256
    for name in ("config.json", "vocab.json", "merges.txt", "tokenizer_config.json"):
        assert (fp32_dir / name).read_bytes() == (publisher / name).read_bytes()


def test_converting_twice_gives_identical_bytes(publisher: Path, fp32_dir: Path, tmp_path: Path) -> None:
    convert(publisher, tmp_path, "fp32")
    for path in fp32_dir.iterdir():
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), path.name


def test_bf16_keeps_bits_under_its_own_names(publisher: Path, tmp_path: Path) -> None:
    written = convert(publisher, tmp_path, "bfloat16")
    assert "manifest.bf16.json" == written[-1]
    assert all(not n.startswith("fp32") for n in written)
    with open_checkpoint(publisher) as ckpt:
        tensors = read_tensor_file(tmp_path / "bf16-decoder-00.ost")
        name = "thinker.model.layers.2.mlp.down_proj.weight"
        assert tensors.dtype_tag(name) == "bf16"
        np.testing.assert_array_equal(tensors[name], ckpt[name])
        head = read_tensor_file(tmp_path / "bf16-head.ost")["thinker.lm_head.weight"]
        np.testing.assert_array_equal(head, ckpt["thinker.model.embed_tokens.weight"])


def test_aligner_keeps_its_stored_head(aligner_publisher: Path, tmp_path: Path) -> None:
    convert(aligner_publisher, tmp_path, "fp32")
    head = read_tensor_file(tmp_path / "fp32-head.ost")["thinker.lm_head.weight"]
    assert head.shape == (5000, 64)
    with open_checkpoint(aligner_publisher) as ckpt:
        np.testing.assert_array_equal(head.view(np.uint32), ckpt["thinker.lm_head.weight"].astype(np.uint32) << 16)
    meta = read_manifest(tmp_path, name="manifest.fp32.json").metadata
    assert meta["output_head"]["source"] == "thinker.lm_head.weight"


def test_file_size_limit_splits_the_encoder(monkeypatch: pytest.MonkeyPatch) -> None:
    limit = 300_000
    monkeypatch.setattr(convert_module, "MAX_FILE_BYTES", limit)
    names = [f"thinker.audio_tower.layers.{i}.fc1.weight" for i in range(6)]
    sizes = dict.fromkeys(names, 100_000)
    parts = convert_module._split_by_size("encoder", names, sizes, Path("x"))
    assert [stem for stem, _ in parts] == ["encoder-00", "encoder-01", "encoder-02"]
    assert [n for _, part in parts for n in part] == names
    assert all(sum(sizes[n] for n in part) <= limit for _, part in parts)


def test_four_decoder_layers_over_the_limit_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(convert_module, "MAX_FILE_BYTES", 300_000)
    names = [f"thinker.model.layers.{i}.mlp.up_proj.weight" for i in range(4)]
    with pytest.raises(ConversionError, match="four decoder layers exceed"):
        convert_module._split_by_size("decoder-00", names, dict.fromkeys(names, 100_000), Path("x"))


def test_tensor_over_the_limit_is_refused(publisher: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(convert_module, "MAX_FILE_BYTES", (1 << 20) + 1000)
    with pytest.raises(ConversionError, match="exceed"):
        convert(publisher, tmp_path, "fp32")


def _rewrite(publisher: Path, dest: Path, edit) -> Path:
    """Copy a checkpoint, changing its tensors with ``edit(dict) -> dict``."""
    from onespeech_tools import safetensors_writer

    shutil.copytree(publisher, dest)
    with open_checkpoint(publisher) as ckpt:
        tensors = edit({name: np.array(ckpt[name]) for name in ckpt})
    dtype = {np.dtype(np.uint16): "BF16", np.dtype(np.float32): "F32"}
    plan = safetensors_writer.plan_file((n, dtype[a.dtype], a.shape) for n, a in tensors.items())
    safetensors_writer.write_file(dest / "model.safetensors", plan, sorted(tensors.items()))
    return dest


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: {k: v for k, v in t.items() if k != "thinker.model.layers.3.mlp.up_proj.weight"}, "missing"),
        (lambda t: {**t, "thinker.extra.weight": np.zeros(3, np.uint16)}, "unexpected tensor"),
        (lambda t: {**t, "thinker.model.norm.weight": np.zeros(7, np.uint16)}, "shape"),
        (lambda t: {**t, "thinker.model.norm.weight": np.ones(64, np.float32)}, "BF16"),
    ],
)
def test_bad_checkpoints_are_refused(publisher: Path, tmp_path: Path, edit, message: str) -> None:
    source = _rewrite(publisher, tmp_path / "src", edit)
    (tmp_path / "out").mkdir()
    with pytest.raises(ConversionError, match=message):
        convert(source, tmp_path / "out", "fp32")


def test_tensor_index_is_json_and_complete(fp32_dir: Path) -> None:
    data = json.loads((fp32_dir / "manifest.fp32.json").read_text())
    assert data["format"] == "onespeech-manifest" and data["runtime_format"] == "onespeech-qwen3-runtime"
    assert len(data["tensors"]) == 119
