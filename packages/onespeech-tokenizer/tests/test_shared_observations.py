"""Parity with the observations of transformers 4.57.6 shipped in shared/data/tokenizer."""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path

import pytest

from onespeech.tokenizer import Qwen3Tokenizer


@pytest.fixture(scope="module")
def observations(tokenizer_dir: Path) -> dict:
    return json.loads((tokenizer_dir / "hf-4.57.6-observations.json").read_text(encoding="utf-8"))


def test_every_shared_encode_observation_is_identical(tokenizer: Qwen3Tokenizer, observations: dict) -> None:
    cases = observations["encode_add_special_tokens_false"]
    assert len(cases) == 224
    mismatches = [c["text"] for c in cases if tokenizer.encode(c["text"], allow_special=True) != c["ids"]]
    assert mismatches == []


def test_shared_texts_round_trip_to_nfc(tokenizer: Qwen3Tokenizer, observations: dict) -> None:
    for case in observations["encode_add_special_tokens_false"]:
        assert tokenizer.decode(case["ids"]) == unicodedata.normalize("NFC", case["text"])


def test_standard_regex_ids_not_the_fix_mistral_regex_ones(tokenizer: Qwen3Tokenizer, observations: dict) -> None:
    probe = observations["fix_mistral_regex_local_load"]
    differing = 0
    for case in probe["cases"]:
        assert tokenizer.encode(case["text"], allow_special=True) == case["ids_qwen2_regex"]
        differing += case["ids_qwen2_regex"] != case["ids_fix_mistral_regex"]
    assert differing > 0  # the probe cases do tell the two regexes apart


def _tokenizer_with_config(tokenizer_dir: Path, config: Path, tmp_path: Path) -> Qwen3Tokenizer:
    for name in ("vocab.json", "merges.txt"):
        os.symlink(tokenizer_dir / name, tmp_path / name)
    os.symlink(config, tmp_path / "tokenizer_config.json")
    return Qwen3Tokenizer.load(tmp_path)


@pytest.mark.parametrize(
    ("config_key", "config_path"),
    [
        ("asr_tokenizer_config", "tokenizer/tokenizer_config.json"),
        ("aligner_tokenizer_config", "configs/Qwen3-ForcedAligner-0.6B/tokenizer_config.json"),
    ],
)
def test_skipped_ids_are_the_slow_class_ones(
    config_key: str, config_path: str, shared_data: Path, tokenizer_dir: Path, observations: dict, tmp_path: Path
) -> None:
    tok = _tokenizer_with_config(tokenizer_dir, shared_data / config_path, tmp_path)
    omitted = observations["decode_skip_special_tokens_omitted_ids"][config_key]
    assert sorted(tok.skipped_special_ids) == sorted(omitted["Qwen2Tokenizer_slow"])
    everything = list(range(151643, tok.vocab_size))
    kept = tok.decode(everything, skip_special_tokens=True)
    assert kept == "".join(tok.id_to_token(i) for i in everything if i not in omitted["Qwen2Tokenizer_slow"])
    # the fast class would also drop these; the spec keeps them
    assert "<tts_text_eod>" in kept and "<blank1>" in kept and "<asr_text>" in kept


def test_sizes_match_the_reference(tokenizer: Qwen3Tokenizer, observations: dict) -> None:
    assert tokenizer.vocab_size == observations["len_asr"]
    assert tokenizer.base_vocab_size == 151643
    assert sorted(tokenizer.skipped_special_ids) == sorted(observations["all_special_ids"])
    assert tokenizer.token_to_id(observations["eos"][0]) == observations["eos"][1]
    assert tokenizer.token_to_id(observations["pad"][0]) == observations["pad"][1]
