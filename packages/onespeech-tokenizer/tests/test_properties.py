"""Hypothesis properties: round trip to NFC, pre-token coverage, no undocumented exceptions."""

from __future__ import annotations

import unicodedata

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onespeech.tokenizer import InvalidTextError, Qwen3Tokenizer, SpecialTokenNotAllowedError
from onespeech.tokenizer.bpe import BytePairEncoder
from onespeech.tokenizer.bytelevel import to_byte_chars
from onespeech.tokenizer.pretokenize import split

# characters the split and NFC treat specially, mixed into arbitrary text
INTERESTING = list("'sStTrReEvVmMlLdD ſ\n\r\t\x0b\x0c\x1c\xa0\u3000\u2028\x85.,!0١²½Ⅻ😀𝔘𠀀é") + [
    "e\u0301", "\u0301", "\u0338", ">\u0338", "\u1100\u1161", "\u0e49", "\u093f", "  ", "\r\n", "\n\n", "'s", "'LL",
]
TEXT = st.lists(st.one_of(st.characters(codec="utf-8"), st.sampled_from(INTERESTING)), max_size=40).map("".join)
SPELLINGS = ["<|im_start|>", "<|im_end|>", "<asr_text>", "<blank1>", "<tts_text_eod>", "<|endoftext|>"]
PROPS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _without_added_spellings(tokenizer: Qwen3Tokenizer, text: str) -> bool:
    return "<" not in text or all(
        tokenizer.id_to_token(i) not in text for i in range(tokenizer.base_vocab_size, tokenizer.vocab_size)
    )


@PROPS
@given(text=TEXT)
def test_decode_of_encode_is_nfc(tokenizer: Qwen3Tokenizer, text: str) -> None:
    if _without_added_spellings(tokenizer, text):
        assert tokenizer.decode(tokenizer.encode(text)) == unicodedata.normalize("NFC", text)


@PROPS
@given(parts=st.lists(st.one_of(TEXT, st.sampled_from(SPELLINGS)), max_size=6))
def test_added_tokens_round_trip_and_text_between_is_nfc(tokenizer: Qwen3Tokenizer, parts: list[str]) -> None:
    # Documented exception to decode(encode(s)) == NFC(s): NFC never reaches across an
    # added token, so the text between two added tokens is normalized on its own.
    text = "".join(parts)
    ids = tokenizer.encode(text, allow_special=True)
    want = "".join(
        part if isinstance(part, str) and part in SPELLINGS else unicodedata.normalize("NFC", part)
        for part in _segments(text)
    )
    assert tokenizer.decode(ids) == want


def _segments(text: str) -> list[str]:
    out, pos = [], 0
    while pos < len(text):
        hits = [(text.find(s, pos), -len(s), s) for s in SPELLINGS if text.find(s, pos) >= 0]
        if not hits:
            out.append(text[pos:])
            break
        start, _, spelling = min(hits)
        if start > pos:
            out.append(text[pos:start])
        out.append(spelling)
        pos = start + len(spelling)
    return out


@PROPS
@given(text=TEXT)
def test_pre_tokens_cover_the_text(text: str) -> None:
    pieces = split(text)
    assert "".join(pieces) == text
    assert all(pieces)


@PROPS
@given(text=st.text(st.characters(), max_size=60))
def test_encoder_raises_only_documented_errors(tokenizer: Qwen3Tokenizer, text: str) -> None:
    # st.characters() includes lone surrogates
    try:
        ids = tokenizer.encode(text)
    except (InvalidTextError, SpecialTokenNotAllowedError):
        return
    assert all(0 <= i < tokenizer.vocab_size for i in ids)


@PROPS
@given(ids=st.lists(st.integers(min_value=0, max_value=151704), max_size=30), skip=st.booleans())
def test_any_valid_ids_decode(tokenizer: Qwen3Tokenizer, ids: list[int], skip: bool) -> None:
    assert isinstance(tokenizer.decode(ids, skip_special_tokens=skip), str)


@PROPS
@given(text=st.lists(st.sampled_from(list("aab  \n😀语é'sx1") + ["ab", "语音"]), max_size=120).map("".join))
def test_heap_and_pass_bpe_agree(tokenizer: Qwen3Tokenizer, text: str) -> None:
    bpe: BytePairEncoder = tokenizer._bpe
    assert bpe._use_heap()  # the shipped merges are rank-monotone, so long pieces take the heap
    word = list(to_byte_chars(text))
    assert bpe._merge_heap(word) == bpe._merge_passes(word)


@PROPS
@given(runs=st.lists(st.tuples(st.sampled_from(list("a =!\n'語é😀") + ["ab", "語音", "\u3000"]),
                               st.integers(min_value=1, max_value=70)), min_size=1, max_size=6))
def test_string_passes_then_heap_agree_with_the_pass_loop(tokenizer: Qwen3Tokenizer, runs: list) -> None:
    # repetitive pieces: the string passes finish them or hand a half-merged word to the heap
    bpe: BytePairEncoder = tokenizer._bpe
    text = "".join(unit * count for unit, count in runs)
    word = list(to_byte_chars(text))
    want = bpe._merge_passes(word)
    merged, done = bpe._merge_string_passes(word)
    if not done:
        merged = bpe._merge_heap(merged) if len(merged) >= 2 else merged
    assert merged == want
    bpe._cache.clear()
    assert list(bpe._encode_new(text)) == [tokenizer.token_to_id(s) for s in want]
