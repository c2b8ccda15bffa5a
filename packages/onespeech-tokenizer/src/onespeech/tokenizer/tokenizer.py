"""Qwen3Tokenizer: the Qwen2/Qwen3 byte-level BPE tokenizer, stdlib only.

Encoding, step by step (tokenizers' pipeline order):
1. check the text: a str, valid Unicode (no lone surrogates), at most 1 MiB of UTF-8;
2. split out added tokens (atomic, leftmost-longest); special ones need ``allow_special``;
3. NFC each stretch between them;
4. split each stretch with the Qwen2 pre-tokenizer pattern;
5. byte-level BPE each piece (cached per piece).
No BOS/EOS or task tokens are added.

Decoding follows transformers 4.57.6's slow ``Qwen2Tokenizer``: added tokens
are emitted as their spelling, the bytes of the regular tokens between them are
decoded as UTF-8 with U+FFFD for invalid or incomplete sequences, and
``skip_special_tokens=True`` omits exactly the named special tokens
(``additional_special_tokens`` plus bos/eos/pad/unk).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable
from pathlib import Path

from .added_tokens import AddedToken, AddedVocabulary
from .bpe import BytePairEncoder
from .bytelevel import tokens_to_bytes
from .errors import (
    InvalidTextError,
    SpecialTokenNotAllowedError,
    TextTooLongError,
    TokenizerFileError,
    UnknownTokenIdError,
)
from .files import CONFIG_FILE, MERGES_FILE, VOCAB_FILE, TokenizerConfig, load_config, load_merges, load_vocab
from .normalize import nfc
from .pretokenize import split

MAX_TEXT_BYTES = 1024 * 1024  #: 1 MiB of UTF-8 per encode call


class Qwen3Tokenizer:
    """Byte-level BPE tokenizer of Qwen3-ASR and Qwen3-ForcedAligner.

    Build it with :meth:`load`; the constructor takes already parsed data.

    Parameters
    ----------
    vocab : dict[str, int]
        Byte-level token spelling -> id (vocab.json).
    merges : list[tuple[str, str]]
        Merge pairs in rank order (merges.txt).
    config : TokenizerConfig
        Added tokens and named special tokens (tokenizer_config.json).
    """

    def __init__(self, vocab: dict[str, int], merges: list[tuple[str, str]], config: TokenizerConfig) -> None:
        self._vocab = vocab
        self._bpe = BytePairEncoder(vocab, merges)
        added = _added_tokens(vocab, config)
        self._added = AddedVocabulary(added)
        # ids omitted by decode(skip_special_tokens=True): the named list only
        self._skipped_ids = frozenset(self._added.by_content[s].id for s in config.named_special_tokens)
        self._tokens: dict[int, str] = dict(zip(vocab.values(), vocab.keys(), strict=True))
        self._tokens.update((t.id, t.content) for t in added)
        self._added_ids = frozenset(t.id for t in added)
        self._pieces_table: dict[int, bytes | str] | None = None  # built by the first decode

    @property
    def _pieces(self) -> dict[int, bytes | str]:
        """id -> bytes of a regular token, or the spelling of an added token."""
        if self._pieces_table is None:
            table: dict[int, bytes | str] = dict(
                zip(self._vocab.values(), tokens_to_bytes(list(self._vocab)), strict=True)
            )
            table.update((i, self._tokens[i]) for i in self._added_ids)
            self._pieces_table = table
        return self._pieces_table

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Qwen3Tokenizer:
        """Read vocab.json, merges.txt and tokenizer_config.json from ``directory``.

        Nothing in the directory is executed. Raises ``TokenizerFileError`` (a
        ``ValueError``) for a missing or malformed file, ``FileTooLargeError``
        past 16 MiB per file and ``VocabularyLimitError`` for an id or merge
        count of 200,000 or more.
        """
        directory = Path(directory)
        key = _files_key(directory)
        cached = _LOADED.get(key) if key is not None else None
        if cached is not None:
            return cached
        tokenizer = cls._load_files(directory)
        if key is not None:
            _LOADED[key] = tokenizer
            while len(_LOADED) > _LOADED_ENTRIES:
                _LOADED.pop(next(iter(_LOADED)))
        return tokenizer

    @classmethod
    def _load_files(cls, directory: Path) -> Qwen3Tokenizer:
        # ~450k small containers are built; pausing the cyclic collector
        # (nothing here forms cycles) roughly halves the load time.
        collecting = gc.isenabled()
        gc.disable()
        try:
            vocab = load_vocab(directory / VOCAB_FILE)
            merges = load_merges(directory / MERGES_FILE, vocab)
            return cls(vocab, merges, load_config(directory / CONFIG_FILE))
        finally:
            if collecting:
                gc.enable()

    @property
    def vocab_size(self) -> int:
        """Number of token ids: regular tokens plus added tokens (151,705 for Qwen3-ASR)."""
        return len(self._tokens)

    @property
    def base_vocab_size(self) -> int:
        """Number of regular (vocab.json) tokens, transformers' ``vocab_size`` (151,643)."""
        return len(self._vocab)

    @property
    def skipped_special_ids(self) -> frozenset[int]:
        """Ids that ``decode(..., skip_special_tokens=True)`` omits."""
        return self._skipped_ids

    def token_to_id(self, token: str) -> int | None:
        """Id of an added token's spelling or a byte-level vocab spelling (``"Ġthe"``), else None."""
        added = self._added.by_content.get(token)
        return added.id if added is not None else self._vocab.get(token)

    def id_to_token(self, token_id: int) -> str:
        """The added token's spelling or the byte-level vocab spelling of ``token_id``."""
        try:
            return self._tokens[token_id]
        except (KeyError, TypeError):
            raise UnknownTokenIdError(self._unknown_id_message(token_id)) from None

    def encode(self, text: str, allow_special: bool = False) -> list[int]:
        """Token ids of ``text``.

        Parameters
        ----------
        text : str
            At most 1 MiB of UTF-8, without lone surrogates.
        allow_special : bool
            Whether spellings of special tokens (``<|im_start|>``...) in ``text``
            encode to their ids; if False they raise SpecialTokenNotAllowedError.

        Returns
        -------
        list[int]
            The ids; no BOS/EOS or task tokens are added.
        """
        check_text(text)
        ids: list[int] = []
        pos = 0
        for part in self._added.split(text):
            if isinstance(part, str):
                self._bpe.encode(split(nfc(part)), ids)
                pos += len(part)
                continue
            if part.special and not allow_special:
                raise SpecialTokenNotAllowedError(
                    f"text spells the special token {part.content!r} at character {pos}; pass "
                    f"allow_special=True to encode it as id {part.id}, or remove it from the text"
                )
            ids.append(part.id)
            pos += len(part.content)
        return ids

    def encode_batch(self, texts: Iterable[str], allow_special: bool = False) -> list[list[int]]:
        """:meth:`encode` of each text."""
        return [self.encode(text, allow_special) for text in texts]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Text of token ids.

        Parameters
        ----------
        ids : iterable of int
            Token ids; any id outside the vocabulary raises UnknownTokenIdError.
        skip_special_tokens : bool
            Omit the named special tokens (additional_special_tokens and
            bos/eos/pad/unk). Other added tokens, even ones flagged special
            such as ``<blank1>`` or ``<tts_text_eod>``, remain.

        Returns
        -------
        str
            The text; invalid or incomplete UTF-8 decodes to U+FFFD.
        """
        ids = self._checked_ids(ids)
        if skip_special_tokens:
            skipped = self._skipped_ids
            ids = [i for i in ids if i not in skipped]
        pieces = self._pieces
        if self._added_ids.isdisjoint(ids):
            return b"".join([pieces[i] for i in ids]).decode("utf-8", "replace")  # type: ignore[misc]  # no added id: all bytes
        # Added tokens are their own stretches, so a byte sequence cut by one
        # decodes as two incomplete sequences (as in transformers).
        out: list[str] = []
        run: list[bytes] = []
        for i in ids:
            piece = pieces[i]
            if isinstance(piece, bytes):
                run.append(piece)
                continue
            if run:
                out.append(b"".join(run).decode("utf-8", "replace"))
                run = []
            out.append(piece)
        if run:
            out.append(b"".join(run).decode("utf-8", "replace"))
        return "".join(out)

    def decode_batch(self, batch: Iterable[Iterable[int]], skip_special_tokens: bool = False) -> list[str]:
        """:meth:`decode` of each id sequence."""
        return [self.decode(ids, skip_special_tokens) for ids in batch]

    def _checked_ids(self, ids: Iterable[int]) -> list[int]:
        ids = list(ids) if not isinstance(ids, list) else ids
        if not set(map(type, ids)) <= {int}:
            ids = [_as_int(i) for i in ids]
        tokens = self._tokens
        for i in ids:
            if i not in tokens:
                raise UnknownTokenIdError(self._unknown_id_message(i))
        return ids

    def _unknown_id_message(self, token_id: object) -> str:
        return (f"token id {token_id!r} is not in the vocabulary; valid ids are the {self.vocab_size} ids "
                f"0..{max(self._tokens)} of this tokenizer")


def _as_int(value: object) -> int:
    # numpy integers and bools pass (as in transformers); floats and strings do not
    try:
        return int(value.__index__())  # type: ignore[attr-defined]
    except AttributeError:
        raise TypeError(f"token ids must be integers, got {type(value).__name__} {value!r}") from None


def check_text(text: object) -> None:
    """Check text against the input rules: a str of valid Unicode, at most 1 MiB of UTF-8.

    Every entry point that takes text (the tokenizer, the forced aligner) checks it here.

    Raises
    ------
    TypeError
        Not a str.
    TextTooLongError
        More than 1 MiB (1,048,576 bytes) of UTF-8.
    InvalidTextError
        A lone UTF-16 surrogate.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if len(text) > MAX_TEXT_BYTES:  # every character takes at least one byte
        raise TextTooLongError(f"text has {len(text)} characters; the limit is 1 MiB (1,048,576 bytes) of UTF-8")
    if text.isascii():
        return
    try:
        n_bytes = len(text.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise InvalidTextError(
            f"text has a lone surrogate U+{ord(text[e.start]):04X} at character {e.start}; "
            "only valid Unicode (no unpaired UTF-16 surrogates) can be encoded"
        ) from None
    if n_bytes > MAX_TEXT_BYTES:
        raise TextTooLongError(f"text is {n_bytes} bytes of UTF-8; the limit is 1 MiB (1,048,576 bytes)")


def _added_tokens(vocab: dict[str, int], config: TokenizerConfig) -> list[AddedToken]:
    """Added tokens of the config, plus named special tokens that only the vocab spells."""
    by_id = {i: t for t, i in vocab.items()}
    tokens: dict[str, AddedToken] = {}
    ids: set[int] = set()
    for token in config.added_tokens:
        if token.content in tokens or token.id in ids:
            raise TokenizerFileError(f"{CONFIG_FILE}: added token {token.content!r} (id {token.id}) repeats "
                                     "another added token's content or id")
        if token.id in by_id and by_id[token.id] != token.content:
            raise TokenizerFileError(f"{CONFIG_FILE}: added token {token.content!r} takes id {token.id}, "
                                     f"which {VOCAB_FILE} gives to {by_id[token.id]!r}")
        tokens[token.content] = token
        ids.add(token.id)
    for spelling in config.named_special_tokens:
        if spelling in tokens:
            continue
        if spelling not in vocab:
            raise TokenizerFileError(f"{CONFIG_FILE} names the special token {spelling!r}, which is neither "
                                     f"an added token nor in {VOCAB_FILE}")
        tokens[spelling] = AddedToken(vocab[spelling], spelling, True)
    # a named special token is special even if its added_tokens_decoder flag says otherwise
    named = set(config.named_special_tokens)
    return [AddedToken(t.id, t.content, t.special or t.content in named) for t in tokens.values()]


__all__ = ["MAX_TEXT_BYTES", "Qwen3Tokenizer", "check_text"]


# Loading takes seconds (151k merges in pure Python) and file transcription loads the
# recognizer and then the aligner for every file, each with the same tokenizer files:
# the last few loads are kept, keyed by each file's identity and stat, so a changed
# file is read again. A tokenizer is immutable once built, so sharing it is safe.
_LOADED: dict[tuple, Qwen3Tokenizer] = {}
_LOADED_ENTRIES = 2


def _files_key(directory: Path) -> tuple | None:
    key = []
    for name in (VOCAB_FILE, MERGES_FILE, CONFIG_FILE):
        try:
            st = (directory / name).stat()
        except OSError:
            return None  # the load itself reports the missing file
        key.append((name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(key)
