"""config.json parsing: the released configs, the tiny one, and clear errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from onespeech.qwen3.config import ConfigError, load_config, parse_config


def test_released_asr_0_6b(shared_data: Path) -> None:
    config = load_config(shared_data / "configs/Qwen3-ASR-0.6B")
    assert config.model_type == "qwen3_asr" and not config.is_aligner
    assert (config.audio.d_model, config.audio.num_layers, config.audio.num_heads) == (896, 18, 14)
    assert config.audio.conv_out_features == 7680
    assert (config.text.hidden_size, config.text.num_layers, config.text.head_dim) == (1024, 28, 128)
    assert (config.text.num_heads, config.text.num_kv_heads, config.text.vocab_size) == (16, 8, 151936)
    assert config.text.mrope_section == (24, 20, 20) and config.text.mrope_interleaved
    assert config.text.rms_norm_eps == 1e-6 and config.text.rope_theta == 1e6
    assert (config.audio_token_id, config.audio_start_token_id, config.audio_end_token_id) == (151676, 151669, 151670)
    assert config.eos_token_ids == (151643, 151645)
    assert len(config.support_languages) == 30 and config.support_languages[:2] == ("Chinese", "English")
    assert config.text.tie_word_embeddings
    # tied: the reference replaces the stored lm_head by the token embedding
    assert config.output_head_name == "thinker.model.embed_tokens.weight"
    assert config.output_rows == 151936


def test_released_aligner(shared_data: Path) -> None:
    config = load_config(shared_data / "configs/Qwen3-ForcedAligner-0.6B")
    assert config.is_aligner
    assert (config.classify_num, config.timestamp_token_id, config.timestamp_segment_time_ms) == (5000, 151705, 80)
    assert not config.text.tie_word_embeddings
    assert config.output_head_name == "thinker.lm_head.weight" and config.output_rows == 5000
    assert len(config.support_languages) == 11


def test_released_1_7b(shared_data: Path) -> None:
    config = load_config(shared_data / "configs/Qwen3-ASR-1.7B")
    assert (config.text.hidden_size, config.audio.output_dim, config.audio.d_model) == (2048, 2048, 1024)


@pytest.fixture()
def raw(shared_data: Path) -> dict:
    return json.loads((shared_data / "configs/Qwen3-ASR-0.6B/config.json").read_text())


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c.pop("thinker_config"), "thinker_config is missing"),
        (lambda c: c["thinker_config"]["text_config"].pop("vocab_size"), "text_config.vocab_size is missing"),
        (lambda c: c["thinker_config"]["text_config"].update(head_dim="128"), "head_dim must be an integer"),
        (lambda c: c["thinker_config"]["audio_config"].update(d_model=900), "not divisible"),
        (lambda c: c["thinker_config"]["audio_config"].update(output_dim=512), "output_dim 512 must equal"),
        (lambda c: c["thinker_config"].update(model_type="whisper"), "allowed: qwen3_asr"),
        (lambda c: c["thinker_config"].update(audio_token_id=999999), "outside the vocabulary"),
        (lambda c: c.update(support_languages=[]), "support_languages"),
        (lambda c: c["thinker_config"]["text_config"]["rope_scaling"].update(mrope_section=[1, 2]), "sum to"),
        (lambda c: c["thinker_config"]["text_config"].update(rms_norm_eps=0), r"finite number in \(0, 1\]"),
    ],
)
def test_errors_name_the_field(raw: dict, edit, message: str) -> None:
    broken = copy.deepcopy(raw)
    edit(broken)
    with pytest.raises(ConfigError, match=message):
        parse_config(broken)


def test_aligner_fields_required(shared_data: Path) -> None:
    data = json.loads((shared_data / "configs/Qwen3-ForcedAligner-0.6B/config.json").read_text())
    data.pop("timestamp_token_id")
    with pytest.raises(ConfigError, match="timestamp_token_id is missing"):
        parse_config(data)


def test_missing_or_broken_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="missing"):
        load_config(tmp_path)
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(ConfigError, match="not readable JSON"):
        load_config(tmp_path)


def test_tiny_config_parses(tmp_path: Path, shared_data: Path) -> None:
    from onespeech_tools.checkpoints import model_config

    config = parse_config(model_config("tiny", "asr", shared_data))
    assert config.text.vocab_size == 151936 and config.text.num_layers == 5
    assert parse_config(model_config("tiny", "aligner", shared_data)).output_rows == 5000
