"""Every limit and rejection of the spec, each with its specific exception."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from onespeech.tokenizer import (
    FileTooLargeError,
    InvalidTextError,
    Qwen3Tokenizer,
    SpecialTokenNotAllowedError,
    TextTooLongError,
    TokenizerError,
    TokenizerFileError,
    UnknownTokenIdError,
    VocabularyLimitError,
)
from onespeech.tokenizer.bytelevel import BYTE_TO_CHAR

MIB = 1024 * 1024


def write_tokenizer(directory: Path, vocab: dict[str, int], merges: list[str], config: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (directory / "merges.txt").write_text("#version: 0.2\n" + "".join(m + "\n" for m in merges), encoding="utf-8")
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory


def byte_vocab() -> dict[str, int]:
    return {c: i for i, c in enumerate(BYTE_TO_CHAR)}


def tiny(tmp_path: Path, extra_vocab: dict[str, int] | None = None, merges: list[str] | None = None,
         config: dict | None = None) -> Path:
    vocab = byte_vocab() | {"ĠĠ": 256} | (extra_vocab or {})
    return write_tokenizer(tmp_path / "tok", vocab, merges if merges is not None else ["Ġ Ġ"], config or {})


def test_every_error_is_a_value_error() -> None:
    for cls in (FileTooLargeError, InvalidTextError, SpecialTokenNotAllowedError, TextTooLongError,
                TokenizerFileError, UnknownTokenIdError, VocabularyLimitError):
        assert issubclass(cls, TokenizerError) and issubclass(cls, ValueError)


def test_tiny_tokenizer_loads_and_round_trips(tmp_path: Path) -> None:
    tok = Qwen3Tokenizer.load(tiny(tmp_path))
    # pieces "a", "   ", " b" (the last space of a run goes with the word)
    assert tok.encode("a    b") == [ord("a"), 256, 32, 32, ord("b")]
    assert tok.decode(tok.encode("héllo  wörld")) == "héllo  wörld"


# ------------------------------------------------------------------- files


def test_file_over_16_mib_is_refused(tmp_path: Path) -> None:
    directory = tiny(tmp_path)
    with open(directory / "vocab.json", "r+b") as f:
        f.truncate(16 * MIB + 1)
    with pytest.raises(FileTooLargeError, match="16 MiB"):
        Qwen3Tokenizer.load(directory)


def test_file_of_exactly_16_mib_is_accepted(tmp_path: Path) -> None:
    directory = tiny(tmp_path)
    path = directory / "merges.txt"
    data = path.read_bytes()
    path.write_bytes(data + b"\n" * (16 * MIB - len(data)))  # blank lines are skipped
    assert path.stat().st_size == 16 * MIB
    assert Qwen3Tokenizer.load(directory).encode("  ") == [256]


@pytest.mark.parametrize(("token_id", "ok"), [(199_999, True), (200_000, False)])
def test_vocabulary_ids_below_200000(tmp_path: Path, token_id: int, ok: bool) -> None:
    directory = tiny(tmp_path, extra_vocab={"ab": token_id}, merges=["Ġ Ġ", "a b"])
    if ok:
        assert Qwen3Tokenizer.load(directory).encode("ab") == [199_999]
    else:
        with pytest.raises(VocabularyLimitError, match="below 200,000"):
            Qwen3Tokenizer.load(directory)


@pytest.mark.parametrize(("token_id", "ok"), [(199_999, True), (200_000, False)])
def test_added_token_ids_below_200000(tmp_path: Path, token_id: int, ok: bool) -> None:
    config = {"added_tokens_decoder": {str(token_id): {"content": "<x>", "special": False}}}
    directory = tiny(tmp_path, config=config)
    if ok:
        assert Qwen3Tokenizer.load(directory).encode("a<x>") == [BYTE_TO_CHAR.index("a"), 199_999]
    else:
        with pytest.raises(VocabularyLimitError, match="below 200,000"):
            Qwen3Tokenizer.load(directory)


@pytest.mark.parametrize(("count", "ok"), [(199_999, True), (200_000, False)])
def test_merge_count_below_200000(tmp_path: Path, count: int, ok: bool) -> None:
    directory = tiny(tmp_path, merges=["Ġ Ġ"] * count)
    if ok:
        assert Qwen3Tokenizer.load(directory).encode("  ") == [256]
    else:
        with pytest.raises(VocabularyLimitError, match="merge count must be below 200,000"):
            Qwen3Tokenizer.load(directory)


@pytest.mark.parametrize("name", ["vocab.json", "merges.txt", "tokenizer_config.json"])
def test_missing_file_is_named(tmp_path: Path, name: str) -> None:
    directory = tiny(tmp_path)
    os.remove(directory / name)
    with pytest.raises(TokenizerFileError, match=name):
        Qwen3Tokenizer.load(directory)


@pytest.mark.parametrize(
    ("vocab_extra", "merges", "config", "message"),
    [
        ({}, ["Ġ Ġ Ġ"], {}, "two tokens"),
        ({}, ["Ġ x"], {}, "missing from vocab.json"),
        ({"zz": 5}, ["Ġ Ġ"], {}, "more than one token"),
        ({"a b": 300}, ["Ġ Ġ"], {}, "byte-level alphabet"),
        ({"ab": -1}, ["Ġ Ġ"], {}, "non-negative"),
        ({}, ["Ġ Ġ"], {"added_tokens_decoder": {"300": {"content": "<x>", "lstrip": True}}}, "lstrip"),
        ({}, ["Ġ Ġ"], {"added_tokens_decoder": {"5": {"content": "<x>"}}}, "takes id 5"),
        ({}, ["Ġ Ġ"], {"eos_token": "<nope>"}, "<nope>"),
    ],
)
def test_malformed_files_are_refused(tmp_path: Path, vocab_extra, merges, config, message) -> None:
    with pytest.raises(TokenizerFileError, match=message):
        Qwen3Tokenizer.load(tiny(tmp_path, extra_vocab=vocab_extra, merges=merges, config=config))


def test_vocab_without_every_byte_is_refused(tmp_path: Path) -> None:
    vocab = byte_vocab()
    del vocab["Ġ"]
    write_tokenizer(tmp_path, vocab, [], {})
    with pytest.raises(TokenizerFileError, match="single-byte tokens"):
        Qwen3Tokenizer.load(tmp_path)


def test_invalid_json_is_refused(tmp_path: Path) -> None:
    directory = tiny(tmp_path)
    (directory / "tokenizer_config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(TokenizerFileError, match="not valid JSON"):
        Qwen3Tokenizer.load(directory)


# -------------------------------------------------------------------- text


def test_text_of_exactly_1_mib_is_accepted(tokenizer: Qwen3Tokenizer) -> None:
    text = "ab " * (MIB // 3) + "x" * (MIB % 3)
    assert len(text.encode("utf-8")) == MIB
    assert tokenizer.decode(tokenizer.encode(text)) == text


@pytest.mark.parametrize("text", ["a" * (MIB + 1), "语" * (MIB // 3 + 1), "é" * (MIB // 2) + "x"])
def test_text_over_1_mib_of_utf8_is_refused(tokenizer: Qwen3Tokenizer, text: str) -> None:
    assert len(text.encode("utf-8")) > MIB
    with pytest.raises(TextTooLongError, match="1 MiB"):
        tokenizer.encode(text)


@pytest.mark.parametrize("text", ["\ud800", "abc\udfff", "x\udc00\ud800y", "😀\ud83d"])
def test_lone_surrogates_are_refused(tokenizer: Qwen3Tokenizer, text: str) -> None:
    with pytest.raises(InvalidTextError, match="lone surrogate"):
        tokenizer.encode(text)


@pytest.mark.parametrize("value", [b"bytes", None, 12, ["a"]])
def test_non_str_text_is_a_type_error(tokenizer: Qwen3Tokenizer, value: object) -> None:
    with pytest.raises(TypeError, match="must be a str"):
        tokenizer.encode(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("spelling", ["<|im_start|>", "<|endoftext|>", "<blank3>", "<tts_text_eod>", "<|audio_pad|>"])
def test_special_spelling_needs_permission(tokenizer: Qwen3Tokenizer, spelling: str) -> None:
    with pytest.raises(SpecialTokenNotAllowedError, match=f"{spelling}.*at character 3.*allow_special=True"):
        tokenizer.encode("hi " + spelling + " there")
    assert tokenizer.token_to_id(spelling) in tokenizer.encode("hi " + spelling, allow_special=True)


@pytest.mark.parametrize(("spelling", "token_id"), [("<asr_text>", 151704), ("<think>", 151667), ("<non_speech>", 151675)])
def test_non_special_added_tokens_are_atomic_without_permission(tokenizer: Qwen3Tokenizer, spelling: str,
                                                                token_id: int) -> None:
    assert tokenizer.encode(f"English{spelling}hello") == [*tokenizer.encode("English"), token_id,
                                                           *tokenizer.encode("hello")]


def test_no_implicit_tokens(tokenizer: Qwen3Tokenizer) -> None:
    assert tokenizer.encode("") == []
    assert tokenizer.encode("Hello world") == [9707, 1879]


# ------------------------------------------------------------------ decode


@pytest.mark.parametrize("bad", [-1, 151705, 10**9])
def test_unknown_ids_are_refused(tokenizer: Qwen3Tokenizer, bad: int) -> None:
    with pytest.raises(UnknownTokenIdError, match=f"token id {bad} is not in the vocabulary"):
        tokenizer.decode([9707, bad])
    with pytest.raises(UnknownTokenIdError):
        tokenizer.id_to_token(bad)


@pytest.mark.parametrize("bad", [1.0, "1", None])
def test_non_integer_ids_are_a_type_error(tokenizer: Qwen3Tokenizer, bad: object) -> None:
    with pytest.raises(TypeError, match="integers"):
        tokenizer.decode([9707, bad])  # type: ignore[list-item]


def test_incomplete_utf8_decodes_to_replacement_characters(tokenizer: Qwen3Tokenizer) -> None:
    ids = [tokenizer.token_to_id(BYTE_TO_CHAR[b]) for b in "😀".encode()]  # F0 9F 98 80, one token each
    assert tokenizer.decode(ids) == "😀"
    assert tokenizer.decode(ids[:3]) == "\ufffd"  # truncated sequence: one replacement
    assert tokenizer.decode(ids[1:]) == "\ufffd" * 3  # stray continuation bytes: one each
    # an added token between the bytes of one character splits it in two, as in transformers
    assert tokenizer.decode([*ids[:2], 151704, *ids[2:]]) == "\ufffd<asr_text>\ufffd\ufffd"


def test_id_and_token_lookups(tokenizer: Qwen3Tokenizer) -> None:
    assert tokenizer.token_to_id("Ġworld") == 1879
    assert tokenizer.id_to_token(1879) == "Ġworld"
    assert tokenizer.token_to_id("<asr_text>") == 151704
    assert tokenizer.id_to_token(151704) == "<asr_text>"
    assert tokenizer.token_to_id("not a token") is None
    assert tokenizer.encode_batch(["Hello world", ""]) == [[9707, 1879], []]
    assert tokenizer.decode_batch([[9707, 1879], [151645]], skip_special_tokens=True) == ["Hello world", ""]
