"""The Qwen3-ASR prompt and the parsing of its answer.

qwen-asr 0.0.6 renders the released chat template with a system message holding
the biasing context and a user message holding one audio, adds the generation
prompt, and (with a forced language) appends ``language <Name><asr_text>``::

    <|im_start|>system\\n{context}<|im_end|>\\n
    <|im_start|>user\\n<|audio_start|><|audio_pad|>*N<|audio_end|><|im_end|>\\n
    <|im_start|>assistant\\n[language {Name}<asr_text>]

where N is the encoder's output length. The whole string is tokenized at once
(special tokens atomic), which is what we do too: tokenizing the pieces separately
would give different ids when the context starts with whitespace. The model answers
``language {Name}<asr_text>{text}`` (or just the text when the language was forced).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from onespeech.qwen3.errors import ContextError

MAX_CONTEXT_IDS = 4096  # spec: the system context is at most 4096 tokenizer ids
AUDIO_PAD = "<|audio_pad|>"
ASR_TEXT = "<asr_text>"
_LANG_PREFIX = "language "
REPEAT_THRESHOLD = 20  # qwen-asr collapses a unit repeated more than this many times
_MAX_PATTERN = 20  # longest repeated pattern it looks for


class _Tokenizer(Protocol):
    def encode(self, text: str, allow_special: bool = False) -> list[int]: ...

    def token_to_id(self, token: str) -> int | None: ...


@dataclass(frozen=True)
class Prompt:
    """Prompt token ids with the span of audio pad positions.

    Attributes
    ----------
    ids : ndarray[int64], shape (n_tokens,)
    audio_start : int
        Index of the first audio pad id; the encoder output replaces
        ``ids[audio_start : audio_start + n_audio]`` embeddings.
    n_audio : int
    """

    ids: np.ndarray
    audio_start: int
    n_audio: int


def prompt_text(context: str, language_name: str | None) -> str:
    """The prompt string with a single audio pad, as the chat template renders it."""
    text = (
        f"<|im_start|>system\n{context}<|im_end|>\n"
        f"<|im_start|>user\n<|audio_start|>{AUDIO_PAD}<|audio_end|><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    if language_name:
        text += f"{_LANG_PREFIX}{language_name}{ASR_TEXT}"
    return text


def check_context(tokenizer: _Tokenizer, context: str | None) -> str:
    """Validate a biasing context; returns it ("" for None).

    Raises
    ------
    ContextError
        If it holds special tokens, is not text, or exceeds 4096 token ids.
    """
    if context is None:
        return ""
    if not isinstance(context, str):
        raise ContextError(f"context must be a string or None, not {type(context).__name__}")
    try:
        ids = tokenizer.encode(context, allow_special=False)
    except ValueError as e:
        raise ContextError(f"context is not accepted: {e}") from e
    if len(ids) > MAX_CONTEXT_IDS:
        raise ContextError(
            f"context has {len(ids)} token ids; at most {MAX_CONTEXT_IDS} are allowed, shorten it"
        )
    return context


def build_prompt(
    tokenizer: _Tokenizer, context: str, n_audio: int, language_name: str | None
) -> Prompt:
    """Token ids of the recognition prompt for ``n_audio`` audio tokens.

    ``context`` must have passed ``check_context``; ``language_name`` is the model's
    name (``"English"``) or None for automatic language identification.
    """
    if n_audio < 1:
        raise ValueError(f"n_audio={n_audio}; a prompt needs at least one audio token")
    pad_id = tokenizer.token_to_id(AUDIO_PAD)
    if pad_id is None:
        raise ValueError(f"the tokenizer has no {AUDIO_PAD} token; is it the Qwen3-ASR tokenizer?")
    ids = tokenizer.encode(prompt_text(context, language_name), allow_special=True)
    audio_start = ids.index(pad_id)
    # the processor expands the one pad into n_audio pads; added tokens are atomic,
    # so expanding the id is the same as tokenizing the expanded string
    full = ids[:audio_start] + [pad_id] * n_audio + ids[audio_start + 1 :]
    return Prompt(ids=np.asarray(full, dtype=np.int64), audio_start=audio_start, n_audio=n_audio)


def parse_output(raw: str, forced_language: str | None) -> tuple[str | None, str]:
    """Split the model's decoded answer into (language name, text), as qwen-asr does.

    With a forced language the answer is text only. Otherwise it reads
    ``language {Name}<asr_text>{text}``; ``language None`` marks silent audio; an
    answer without ``<asr_text>`` is all text with an unknown language. Runs of a
    unit repeated more than 20 times are collapsed as the reference does.
    """
    s = raw.strip()
    if not s:
        return None, ""
    s = collapse_repetitions(s)
    if forced_language:
        return forced_language, s
    if ASR_TEXT not in s:
        return None, s.strip()
    meta, text = s.split(ASR_TEXT, 1)
    if "language none" in meta.lower():
        return None, text.strip()
    language = None
    for line in meta.splitlines():  # the first line starting "language " names it
        line = line.strip()
        if not line:
            continue
        if line.lower().startswith(_LANG_PREFIX):
            value = line[len(_LANG_PREFIX) :].strip()
            if value:
                language = value[:1].upper() + value[1:].lower()
            break
    return language, text.strip()


def collapse_repetitions(text: str, threshold: int = REPEAT_THRESHOLD) -> str:
    """Collapse degenerate repetitions the way qwen-asr's output parser does.

    First a character repeated more than ``threshold`` times in a row becomes one;
    then the first pattern of 1..20 characters repeated at least ``threshold`` times
    is kept once, and the rest of the string is processed the same way.
    """
    return _collapse_patterns(_collapse_char_runs(text, threshold), threshold)


def _collapse_char_runs(s: str, threshold: int) -> str:
    out = []
    i = 0
    while i < len(s):
        j = i + 1
        while j < len(s) and s[j] == s[i]:
            j += 1
        out.append(s[i] if j - i > threshold else s[i:j])
        i = j
    return "".join(out)


def _repeats_at(s: str, i: int, k: int, threshold: int) -> int:
    """End index of the run of s[i:i+k] repeated from i, or -1 if under threshold."""
    pattern = s[i : i + k]
    for rep in range(1, threshold):
        if s[i + rep * k : i + (rep + 1) * k] != pattern:
            return -1
    end = i + threshold * k
    while end + k <= len(s) and s[end : end + k] == pattern:
        end += k
    return end


def _collapse_patterns(s: str, threshold: int) -> str:
    n = len(s)
    if n < 2 * threshold:
        return s
    out = []
    i = 0
    while i <= n - 2 * threshold:
        for k in range(1, _MAX_PATTERN + 1):
            if i + k * threshold > n:
                break
            end = _repeats_at(s, i, k, threshold)
            if end >= 0:
                out.append(s[i : i + k])
                out.append(_collapse_patterns(s[end:], threshold))
                return "".join(out)
        out.append(s[i])
        i += 1
    out.append(s[i:])
    return "".join(out)
