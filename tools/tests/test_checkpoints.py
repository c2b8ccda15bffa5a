"""The checkpoint generator reproduces the published layout and is deterministic."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from onespeech_tools import checkpoints
from onespeech_tools.checkpoints import (
    CheckpointError,
    make_checkpoint,
    model_config,
    plan_shards,
    tensor_specs,
)

# Published facts (shared/data/SOURCES.md): tensors, parameters, weight file sizes.
PUBLISHED = {
    ("asr", "0.6b"): (612, 938_008_576, {"model.safetensors": 1_876_091_704}),
    (
        "asr",
        "1.7b",
    ): (
        708,
        2_349_217_408,
        {"model-00001-of-00002.safetensors": 4_220_320_824, "model-00002-of-00002.safetensors": 478_200_688},
    ),
    ("aligner", "0.6b"): (708, 917_728_896, {"model.safetensors": 1_835_544_544}),
}


@pytest.mark.parametrize(("kind", "size"), list(PUBLISHED))
def test_full_size_layout_matches_published_counts_and_file_sizes(shared_data: Path, kind: str, size: str) -> None:
    tensors, params, files = PUBLISHED[(kind, size)]
    specs = tensor_specs(model_config(size, kind, shared_data))
    assert len(specs) == tensors
    assert sum(spec.numel for spec in specs) == params
    assert {name: plan.file_size for name, plan, _ in plan_shards(specs, size)} == files


def test_aligner_head_has_classify_rows(shared_data: Path) -> None:
    specs = {s.name: s.shape for s in tensor_specs(model_config("0.6b", "aligner", shared_data))}
    assert specs["thinker.lm_head.weight"] == (5000, 1024)
    assert specs["thinker.model.embed_tokens.weight"] == (152064, 1024)


def _read_header(path: Path) -> dict:
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        return json.loads(handle.read(length))


def _tensor(path: Path, header: dict, name: str) -> np.ndarray:
    info = header[name]
    begin, end = info["data_offsets"]
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        handle.seek(8 + length + begin)
        raw = handle.read(end - begin)
    return np.frombuffer(raw, dtype="<u2").reshape(info["shape"])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("tiny"), "tiny", seed=0, data_dir=shared_data)


def test_tiny_has_publisher_files_and_real_vocabulary(tiny: Path, shared_data: Path) -> None:
    names = {p.name for p in tiny.iterdir()}
    assert {"config.json", "generation_config.json", "preprocessor_config.json", "chat_template.json"} <= names
    assert {"tokenizer_config.json", "vocab.json", "merges.txt", "model.safetensors"} <= names
    config = json.loads((tiny / "config.json").read_text())
    real = json.loads((shared_data / "configs/Qwen3-ASR-0.6B/config.json").read_text())
    for key in ("audio_token_id", "audio_start_token_id", "audio_end_token_id"):
        assert config["thinker_config"][key] == real["thinker_config"][key]
    assert config["thinker_config"]["text_config"]["vocab_size"] == 151936
    assert config["support_languages"] == real["support_languages"]
    header = _read_header(tiny / "model.safetensors")
    assert header["__metadata__"] == {"format": "pt"}
    assert {info["dtype"] for name, info in header.items() if name != "__metadata__"} == {"BF16"}
    assert header["thinker.model.embed_tokens.weight"]["shape"] == [151936, 64]


def test_tiny_lm_head_differs_from_embedding(tiny: Path) -> None:
    header = _read_header(tiny / "model.safetensors")
    embed = _tensor(tiny / "model.safetensors", header, "thinker.model.embed_tokens.weight")
    head = _tensor(tiny / "model.safetensors", header, "thinker.lm_head.weight")
    assert embed.shape == head.shape
    assert np.mean(embed != head) > 0.99


def test_same_seed_same_bytes_other_seed_differs(tiny: Path, tmp_path: Path, shared_data: Path) -> None:
    again = make_checkpoint(tmp_path / "a", "tiny", seed=0, data_dir=shared_data)
    other = make_checkpoint(tmp_path / "b", "tiny", seed=1, data_dir=shared_data)
    reference = (tiny / "model.safetensors").read_bytes()
    assert (again / "model.safetensors").read_bytes() == reference
    assert (again / "config.json").read_bytes() == (tiny / "config.json").read_bytes()
    assert (other / "model.safetensors").read_bytes() != reference


def test_tiny_aligner(tmp_path: Path, shared_data: Path) -> None:
    out = make_checkpoint(tmp_path, "tiny", seed=0, kind="aligner", data_dir=shared_data)
    config = json.loads((out / "config.json").read_text())
    assert config["thinker_config"]["classify_num"] == 5000
    assert config["thinker_config"]["text_config"]["tie_word_embeddings"] is False
    assert config["timestamp_token_id"] == 151705
    header = _read_header(out / "model.safetensors")
    assert header["thinker.lm_head.weight"]["shape"] == [5000, 64]
    assert header["thinker.model.embed_tokens.weight"]["shape"] == [152064, 64]


def test_qk_norm_weights_are_scaled_up(tiny: Path) -> None:
    header = _read_header(tiny / "model.safetensors")
    bits = _tensor(tiny / "model.safetensors", header, "thinker.model.layers.0.self_attn.q_norm.weight")
    values = (bits.astype(np.uint32) << 16).view(np.float32)
    assert 1.5 < values.mean() < 2.5


def test_bf16_rounding_is_nearest_even() -> None:
    # 1 + 2^-8 is exactly halfway between bf16 1.0 and 1 + 2^-7: ties go to even (1.0)
    values = np.array([1.0, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, -2.5, 1.0 + 2.0**-9], dtype=np.float32)
    bits = checkpoints.f32_to_bf16(values)
    back = (bits.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(back, np.array([1.0, 1.0, 1.0 + 2.0**-6, -2.5, 1.0], dtype=np.float32))


@pytest.mark.parametrize(("size", "kind"), [("2b", "asr"), ("tiny", "tts"), ("1.7b", "aligner")])
def test_unknown_requests_are_refused(tmp_path: Path, size: str, kind: str) -> None:
    with pytest.raises(CheckpointError, match="allowed|aligner comes in"):
        make_checkpoint(tmp_path, size, kind=kind)


def test_command_line_builds_the_end_scale_and_max_slot_variants(
    tiny: Path, tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m onespeech_tools.checkpoints`` makes the same bytes as ``make_checkpoint``."""
    data = ["--data-dir", str(shared_data)]
    assert checkpoints.main([str(tmp_path / "asr"), "--end-scale", "0.1", *data]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "asr")
    expected = make_checkpoint(tmp_path / "asr-py", "tiny", seed=0, data_dir=shared_data, end_scale=0.1)
    ended = (tmp_path / "asr" / "model.safetensors").read_bytes()
    assert ended == (expected / "model.safetensors").read_bytes()
    assert ended != (tiny / "model.safetensors").read_bytes()

    assert checkpoints.main([str(tmp_path / "al"), "--kind", "aligner", "--max-slot", "120", "--seed", "3", *data]) == 0
    expected = make_checkpoint(tmp_path / "al-py", "tiny", seed=3, kind="aligner", data_dir=shared_data, max_slot=120)
    assert (tmp_path / "al" / "model.safetensors").read_bytes() == (expected / "model.safetensors").read_bytes()
    header = _read_header(tmp_path / "al" / "model.safetensors")
    head = _tensor(tmp_path / "al" / "model.safetensors", header, "thinker.lm_head.weight")
    assert not head[120:].any() and head[:120].any()


@pytest.mark.parametrize(("argv", "message"), [
    (["--max-slot", "120"], "max_slot applies to the aligner"),
    (["--kind", "aligner", "--end-scale", "0.1"], "end_scale needs a tied ASR checkpoint"),
    (["--kind", "aligner", "--max-slot", "0"], r"max_slot=0 is outside 1\.\.5000"),
    (["--end-scale", "nan"], "end_scale=nan must be a positive finite number"),
])
def test_command_line_refuses_edits_that_do_not_apply(
    tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        checkpoints.main([str(tmp_path / "x"), *argv, "--data-dir", str(shared_data)])
    assert caught.value.code == 2
    assert re.search(message, capsys.readouterr().err)
