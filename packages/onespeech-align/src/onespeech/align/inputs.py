"""The aligner's input sequence.

The reference builds the text ``<|audio_start|><|audio_pad|><|audio_end|>`` followed
by every spoken unit and two ``<timestamp>`` tokens after each one
(``"u1<timestamp><timestamp>u2<timestamp><timestamp>"``), expands ``<|audio_pad|>`` to
one token per encoder output, and tokenizes it. There is no chat template and no
system prompt. Added tokens split the text first, so each unit is tokenized on its
own; we therefore encode unit by unit and place the special ids directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .errors import TooManyTokensError

# spoken units' token ids per alignment: 4 per unit on average at the 4096-unit limit
MAX_TEXT_IDS = 16384


class _Encoder(Protocol):
    def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True)
class SpecialIds:
    """Token ids from the aligner's config.json."""

    audio_start: int  # thinker_config.audio_start_token_id (151669)
    audio_pad: int  # thinker_config.audio_token_id (151676), replaced by audio embeddings
    audio_end: int  # thinker_config.audio_end_token_id (151670)
    timestamp: int  # timestamp_token_id (151705)


@dataclass(frozen=True)
class AlignerInput:
    """Token ids and where the audio and timestamp tokens sit.

    Attributes
    ----------
    ids : ndarray[int64], shape (n_tokens,)
    audio_offset : int
        Index of the first audio token (1: right after ``<|audio_start|>``).
    n_audio : int
        Number of audio tokens (encoder outputs).
    timestamp_positions : ndarray[int64], shape (2 * n_units,)
        Indices of the ``<timestamp>`` tokens: start, end of unit 0, then unit 1, ...
    """

    ids: np.ndarray
    audio_offset: int
    n_audio: int
    timestamp_positions: np.ndarray


def encode_units(tokenizer: _Encoder, units: list[str], max_ids: int = MAX_TEXT_IDS) -> list[list[int]]:
    """Token ids of each spoken unit, refusing more than ``max_ids`` in total.

    The bound keeps the decoder's single pass to a bounded number of positions
    whatever the text (one 1 MiB "word" would otherwise become ~131k positions).

    Raises
    ------
    TooManyTokensError
        The units tokenize to more than ``max_ids`` ids.
    """
    encoded: list[list[int]] = []
    total = 0
    for k, unit in enumerate(units):
        ids = tokenizer.encode(unit)
        total += len(ids)
        if total > max_ids:
            raise TooManyTokensError(
                f"the text's units tokenize to more than {max_ids} ids ({total} by unit {k + 1} of "
                f"{len(units)}); alignment allows at most {max_ids}; align it in shorter pieces"
            )
        encoded.append(ids)
    return encoded


def build_input(unit_ids: list[list[int]], n_audio: int, special: SpecialIds) -> AlignerInput:
    """Token ids for ``n_audio`` audio tokens followed by the units' ids with their timestamps."""
    ids = [special.audio_start, *([special.audio_pad] * n_audio), special.audio_end]
    positions: list[int] = []
    for unit in unit_ids:
        ids.extend(unit)
        positions.extend((len(ids), len(ids) + 1))
        ids.extend((special.timestamp, special.timestamp))
    return AlignerInput(
        ids=np.asarray(ids, dtype=np.int64),
        audio_offset=1,
        n_audio=n_audio,
        timestamp_positions=np.asarray(positions, dtype=np.int64),
    )
