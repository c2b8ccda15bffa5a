"""Parity with every locked observation of the tokenizer oracle.

tools/oracles/qwen3/tokenizer_observations.json holds synthetic strings and what
transformers 4.57.6's slow Qwen2Tokenizer and Qwen2TokenizerFast did with them
(``oracle_tokenizer.py`` regenerates it and fails on drift). Encoding follows
the fast class where the two differ (added tokens split before NFC, see
docs/tokenizer.md); decoding follows the slow class.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest

from onespeech.tokenizer import Qwen3Tokenizer, SpecialTokenNotAllowedError
from onespeech.tokenizer.bytelevel import to_byte_chars
from onespeech.tokenizer.pretokenize import split

FIXTURE = Path(__file__).resolve().parents[3] / "tools" / "oracles" / "qwen3" / "tokenizer_observations.json"


@pytest.fixture(scope="module")
def records() -> list[dict]:
    if not FIXTURE.is_file():
        pytest.skip(f"needs the committed fixture {FIXTURE}")
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert data["n_generated"] >= 2000
    return data["records"]


@pytest.fixture(scope="module")
def special_ids(tokenizer_dir: Path) -> set[int]:
    config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    return {int(i) for i, t in config["added_tokens_decoder"].items() if t["special"]}


def test_encode_ids_identical_on_every_record(tokenizer: Qwen3Tokenizer, records: list[dict]) -> None:
    wrong = [r["text"] for r in records if tokenizer.encode(r["text"], allow_special=True) != r.get("fast_ids", r["ids"])]
    assert wrong == []


def test_slow_and_fast_differ_only_where_nfc_eats_an_added_token(records: list[dict], tokenizer: Qwen3Tokenizer) -> None:
    # The slow class normalizes before splitting added tokens: ">" + U+0338 becomes U+226F.
    spellings = [tokenizer.id_to_token(i) for i in range(tokenizer.base_vocab_size, tokenizer.vocab_size)]

    def n_spelled(text: str) -> int:
        return sum(text.count(s) for s in spellings)

    differing = [r for r in records if "fast_ids" in r]
    assert differing  # the fixture does exercise the documented difference
    for r in differing:
        assert n_spelled(unicodedata.normalize("NFC", r["text"])) < n_spelled(r["text"])


def test_decode_identical_on_every_record(tokenizer: Qwen3Tokenizer, records: list[dict]) -> None:
    wrong = []
    for r in records:
        ids = r.get("decode_ids", r["ids"])
        if tokenizer.decode(ids) != r["decoded"]:
            wrong.append((r["text"], "decoded"))
        if tokenizer.decode(ids, skip_special_tokens=True) != r.get("decoded_skip", r["decoded"]):
            wrong.append((r["text"], "decoded_skip"))
    assert wrong == []


def test_fast_class_skip_differs_only_by_flagged_tokens(records: list[dict], special_ids: set[int],
                                                        tokenizer: Qwen3Tokenizer) -> None:
    # Documented difference: the fast class also drops <blank*> and <tts_text_eod>.
    extra = special_ids - tokenizer.skipped_special_ids
    for r in [r for r in records if "fast_decoded_skip" in r]:
        ids = [i for i in r.get("decode_ids", r["ids"]) if i not in extra]
        assert tokenizer.decode(ids, skip_special_tokens=True) == r["fast_decoded_skip"]
    assert not any("fast_decoded" in r for r in records)


def test_pre_tokenizer_pieces_identical(records: list[dict]) -> None:
    checked = 0
    for r in records:
        if "pieces" in r:
            assert [to_byte_chars(p) for p in split(unicodedata.normalize("NFC", r["text"]))] == r["pieces"], r["text"]
            checked += 1
    assert checked > 300


def test_special_spellings_refused_without_permission(tokenizer: Qwen3Tokenizer, records: list[dict],
                                                      special_ids: set[int]) -> None:
    refused = 0
    for r in records:
        if special_ids.intersection(r.get("fast_ids", r["ids"])):
            with pytest.raises(SpecialTokenNotAllowedError, match="allow_special=True"):
                tokenizer.encode(r["text"])
            refused += 1
        else:
            assert tokenizer.encode(r["text"]) == r.get("fast_ids", r["ids"])
    assert refused > 100


def test_fixture_corpus_is_what_the_seeded_generator_makes(records: list[dict]) -> None:
    # The committed strings are reproducible from oracle_tokenizer.py (and only synthetic).
    import importlib.util

    spec = importlib.util.spec_from_file_location("oracle_tokenizer", FIXTURE.parent / "oracle_tokenizer.py")
    oracle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(oracle)
    texts = oracle.edge_cases() + oracle.generated_corpus(oracle.SEED, oracle.N_GENERATED)
    assert [r["text"] for r in records] == texts
    assert FIXTURE.stat().st_size < 1024 * 1024
