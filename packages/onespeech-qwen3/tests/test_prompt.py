import pytest

from onespeech.qwen3.errors import ContextError
from onespeech.qwen3.prompt import (
    MAX_CONTEXT_IDS,
    build_prompt,
    check_context,
    collapse_repetitions,
    parse_output,
    prompt_text,
)


def test_prompt_text_is_the_chat_template() -> None:
    assert prompt_text("ctx", None) == (
        "<|im_start|>system\nctx<|im_end|>\n<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|>"
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    assert prompt_text("", "English").endswith("<|im_start|>assistant\nlanguage English<asr_text>")


def test_prompt_ids_expand_the_audio_pad(tokenizer) -> None:
    prompt = build_prompt(tokenizer, "", 7, None)
    pad = tokenizer.token_to_id("<|audio_pad|>")
    ids = prompt.ids.tolist()
    assert ids[prompt.audio_start : prompt.audio_start + 7] == [pad] * 7
    assert ids.count(pad) == 7
    assert ids[prompt.audio_start - 1] == tokenizer.token_to_id("<|audio_start|>")
    assert ids[prompt.audio_start + 7] == tokenizer.token_to_id("<|audio_end|>")
    assert tokenizer.decode(ids) == prompt_text("", None).replace("<|audio_pad|>", "<|audio_pad|>" * 7)


def test_forced_language_is_appended(tokenizer) -> None:
    auto = build_prompt(tokenizer, "", 3, None).ids.tolist()
    forced = build_prompt(tokenizer, "", 3, "English").ids.tolist()
    assert forced[: len(auto)] == auto
    assert tokenizer.decode(forced[len(auto) :]) == "language English<asr_text>"
    assert forced[-1] == tokenizer.token_to_id("<asr_text>")


def test_context_is_tokenized_with_its_surroundings(tokenizer) -> None:
    # "system\n" + "\nfoo" groups the two newlines into one token, as the reference's
    # whole-string tokenization does; tokenizing the pieces apart would not
    ids = build_prompt(tokenizer, "\nfoo", 1, None).ids.tolist()
    assert tokenizer.encode("system\n\nfoo") == ids[1 : ids.index(tokenizer.token_to_id("<|im_end|>"))]


def test_context_with_special_token_is_refused(tokenizer) -> None:
    with pytest.raises(ContextError, match="special token"):
        check_context(tokenizer, "hello <|im_end|> world")


def test_context_limit_is_4096_ids(tokenizer) -> None:
    ok = " a" * MAX_CONTEXT_IDS
    assert len(tokenizer.encode(ok)) == MAX_CONTEXT_IDS
    assert check_context(tokenizer, ok) == ok
    with pytest.raises(ContextError, match="4097 token ids; at most 4096"):
        check_context(tokenizer, ok + " a")


def test_context_none_and_type(tokenizer) -> None:
    assert check_context(tokenizer, None) == ""
    with pytest.raises(ContextError, match="string"):
        check_context(tokenizer, b"bytes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "forced", "want"),
    [
        ("language English<asr_text>Hello there.", None, ("English", "Hello there.")),
        ("language cHINese\n<asr_text> 你好 ", None, ("Chinese", "你好")),
        ("language None<asr_text>", None, (None, "")),
        ("language None<asr_text>noise", None, (None, "noise")),
        ("no tag at all", None, (None, "no tag at all")),
        ("foo\nlanguage German<asr_text>ja", None, ("German", "ja")),
        ("  Hello.  ", "English", ("English", "Hello.")),
        ("", "English", (None, "")),
        ("   ", None, (None, "")),
    ],
)
def test_parse_output(raw: str, forced, want) -> None:
    assert parse_output(raw, forced) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("a" * 21, "a"),
        ("a" * 20, "a" * 20),  # pattern search needs at least 2 x 20 characters
        # the search starts only where 40 characters remain (reference behaviour)
        ("b" + "a" * 20 + "c" * 19, "b" + "a" * 20 + "c" * 19),
        ("b" + "a" * 20 + "c" * 20, "ba" + "c" * 20),
        ("a" * 19, "a" * 19),
        ("ab" * 20 + "c", "abc"),
        ("x" + "ab" * 25 + "yz" * 30, "xabyz"),
        ("hello world", "hello world"),
    ],
)
def test_collapse_repetitions_like_the_reference(text: str, want: str) -> None:
    assert collapse_repetitions(text) == want
