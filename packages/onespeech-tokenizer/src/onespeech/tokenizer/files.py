"""Reading vocab.json, merges.txt and tokenizer_config.json within the spec's limits.

The files are data only: JSON and text are parsed, nothing from the directory is
imported or executed. Limits: each file at most 16 MiB; every id and the merge
count below 200,000. Everything the encoder later relies on (every byte has a
token, every merge result is a token) is checked here so a bad file fails at
load with the file's name, not later inside ``encode``.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

from .added_tokens import AddedToken
from .bytelevel import BYTE_TO_CHAR
from .errors import FileTooLargeError, TokenizerFileError, VocabularyLimitError

MAX_FILE_BYTES = 16 * 1024 * 1024  # 16 MiB per file
ID_LIMIT = 200_000  # ids and the merge count must be below this
VOCAB_FILE, MERGES_FILE, CONFIG_FILE = "vocab.json", "merges.txt", "tokenizer_config.json"
NAMED_SPECIAL_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token")
_ALPHABET = frozenset(BYTE_TO_CHAR)


@dataclass(frozen=True)
class TokenizerConfig:
    """What the tokenizer uses from tokenizer_config.json."""

    added_tokens: tuple[AddedToken, ...]
    # additional_special_tokens then bos/eos/pad/unk, as spelled (None entries dropped)
    named_special_tokens: tuple[str, ...]


def read_limited(path: Path) -> bytes:
    """The bytes of ``path``; FileTooLargeError past 16 MiB, TokenizerFileError if absent."""
    try:
        with open(path, "rb") as handle:
            # read one byte past the limit so a file that grows after a stat is still caught
            data = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError as e:
        raise TokenizerFileError(f"{path} is missing; a tokenizer directory needs "
                                 f"{VOCAB_FILE}, {MERGES_FILE} and {CONFIG_FILE}") from e
    except OSError as e:
        raise TokenizerFileError(f"cannot read {path}: {e}") from e
    if len(data) > MAX_FILE_BYTES:
        raise FileTooLargeError(f"{path} is larger than the 16 MiB (16,777,216 bytes) limit per tokenizer file")
    return data


def _text(path: Path) -> str:
    try:
        return read_limited(path).decode("utf-8")
    except UnicodeDecodeError as e:
        raise TokenizerFileError(f"{path} is not valid UTF-8 (byte {e.start})") from e


def _json(path: Path) -> object:
    text = _text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise TokenizerFileError(f"{path} is not valid JSON: {e}") from e
    except RecursionError:
        # json.loads recurses per level: hostile [[[[... must not escape bare. This
        # package imports only the standard library, so it keeps its own copy of
        # onespeech.kernels.jsonfile's nesting report.
        pos, depth = _deepest_nesting(text)
        raise TokenizerFileError(
            f"{path} is not valid JSON: arrays/objects are nested {depth} levels deep at character {pos}, "
            "deeper than the JSON parser follows (tokenizer files nest fewer than 5)"
        ) from None


# a JSON string (skipped whole, so brackets inside strings do not count; an unterminated one
# runs to the end, so no quote is scanned twice) or one bracket
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.DOTALL)


def _deepest_nesting(text: str) -> tuple[int, int]:
    """(offset where the deepest nesting is first reached, that depth), up to the recursion limit."""
    limit = sys.getrecursionlimit()
    depth = best = best_pos = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        if match.group() in "[{":
            depth += 1
            if depth > best:
                best, best_pos = depth, match.start()
                if best >= limit:
                    break
        elif match.group() in "]}":
            depth -= 1
    return best_pos, best


def _check_id(value: object, what: str, path: Path) -> int:
    if type(value) is not int or value < 0:
        raise TokenizerFileError(f"{path}: {what} has id {value!r}; ids are non-negative integers")
    if value >= ID_LIMIT:
        raise VocabularyLimitError(f"{path}: {what} has id {value}; vocabulary ids must be below 200,000")
    return value


def load_vocab(path: Path) -> dict[str, int]:
    """vocab.json: byte-level spelling -> id; ids distinct, below 200,000, every byte present."""
    data = _json(path)
    if not isinstance(data, dict):
        raise TokenizerFileError(f"{path} must hold a JSON object of token -> id")
    # Whole-table checks first (C speed); the slow per-token loop only names the culprit.
    ids = data.values()
    if (set(map(type, ids)) - {int} or (data and (min(ids) < 0 or max(ids) >= ID_LIMIT))
            or len(set(ids)) != len(data) or not set("".join(data)) <= _ALPHABET or "" in data):
        _find_bad_vocab_entry(data, path)
    missing = [c for c in BYTE_TO_CHAR if c not in data]
    if missing:
        raise TokenizerFileError(f"{path} lacks {len(missing)} single-byte tokens (first {missing[0]!r}); "
                                 "byte-level BPE needs all 256")
    return data


def _find_bad_vocab_entry(data: dict, path: Path) -> None:
    seen: set[int] = set()
    for token, token_id in data.items():
        _check_id(token_id, f"token {token!r}", path)
        if token_id in seen:
            raise TokenizerFileError(f"{path}: id {token_id} is used by more than one token")
        seen.add(token_id)
        if not token or not set(token) <= _ALPHABET:
            raise TokenizerFileError(f"{path}: token {token!r} is not spelled in the byte-level alphabet")


def load_merges(path: Path, vocab: dict[str, int]) -> list[tuple[str, str]]:
    """merges.txt in rank order; each merge's parts and result must be tokens."""
    lines = _text(path).splitlines()
    # like transformers: an optional "#version" first line, blank lines skipped
    first = 1 if lines and lines[0].strip().startswith("#version:") else 0
    parts = [p for p in map(str.split, lines[first:]) if p]
    if len(parts) >= ID_LIMIT:
        raise VocabularyLimitError(f"{path} has {len(parts)} merges; the merge count must be below 200,000")
    # Whole-file checks at C speed; the per-line loop only runs to name a bad line.
    if (set(map(len, parts)) - {2} or not vocab.keys() >= set(chain.from_iterable(parts))
            or not vocab.keys() >= set(map("".join, parts))):
        _find_bad_merge(lines, first, vocab, path)
    # Every part is a vocabulary token: share the vocabulary's string objects
    # instead of keeping 300k copies of them (about 50 MB with the real files).
    canonical = {token: token for token in vocab}
    return [(canonical[a], canonical[b]) for a, b in parts]


def _find_bad_merge(lines: list[str], first: int, vocab: dict[str, int], path: Path) -> None:
    for number, line in enumerate(lines[first:], start=first + 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise TokenizerFileError(f"{path} line {number}: a merge is two tokens separated by a space, "
                                     f"got {line!r}")
        if parts[0] not in vocab or parts[1] not in vocab or parts[0] + parts[1] not in vocab:
            raise TokenizerFileError(f"{path} line {number}: merge {line!r} uses or makes a token missing "
                                     f"from {VOCAB_FILE}")


def _spelling(value: object, key: str, path: Path) -> str | None:
    """A special-token entry: null, a string, or an AddedToken-style dict with "content"."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    raise TokenizerFileError(f"{path}: {key} must be null, a string or an object with a string content")


def _added_token(key: str, entry: object, path: Path) -> AddedToken:
    if not key.isdigit() or not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
        raise TokenizerFileError(f"{path}: added_tokens_decoder entry {key!r} needs a numeric key "
                                 "and a string content")
    token_id = _check_id(int(key), f"added token {entry['content']!r}", path)
    if not entry["content"]:
        raise TokenizerFileError(f"{path}: added token {token_id} has an empty content")
    # Matching options the released files never set; refused rather than ignored.
    for flag in ("lstrip", "rstrip", "single_word", "normalized"):
        if entry.get(flag, False):
            raise TokenizerFileError(f"{path}: added token {entry['content']!r} sets {flag}=true; "
                                     "only false is supported")
    return AddedToken(token_id, entry["content"], bool(entry.get("special", False)))


def load_config(path: Path) -> TokenizerConfig:
    """tokenizer_config.json: added tokens and the named special-token list."""
    data = _json(path)
    if not isinstance(data, dict):
        raise TokenizerFileError(f"{path} must hold a JSON object")
    decoder = data.get("added_tokens_decoder", {})
    if not isinstance(decoder, dict):
        raise TokenizerFileError(f"{path}: added_tokens_decoder must be an object of id -> token")
    added = tuple(_added_token(key, entry, path) for key, entry in decoder.items())
    additional = data.get("additional_special_tokens") or []
    if not isinstance(additional, list):
        raise TokenizerFileError(f"{path}: additional_special_tokens must be a list")
    named = [_spelling(v, "additional_special_tokens", path) for v in additional]
    named += [_spelling(data.get(key), key, path) for key in NAMED_SPECIAL_KEYS]
    return TokenizerConfig(added, tuple(s for s in named if s is not None))
