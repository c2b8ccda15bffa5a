"""Greedy decoding of several prompts together, each bit-identical to decoding it alone.

Each prompt is prefilled alone (prompt lengths differ) into a KV cache of its own;
then every decode step advances all live sequences by one token in one
`Qwen3Decoder.step_batch`, which reads each weight matrix once for all of them
(decoding one sequence reads every weight once per token, and that read is
what a decode step costs). A sequence leaves the batch as it finishes (an end
token or its token budget) and the next waiting prompt is prefilled and joins
at the following step, while the batch stays within its bounds:

- ``kv_budget_bytes``: the live sequences' caches, each counted at its full
  capacity (``Qwen3Decoder.kv_bytes(prompt + max_new_tokens)``), stay within it;
  one sequence always runs, even one whose cache alone is larger.
- ``max_batch``: at most this many live sequences.

Prompts are taken from the iterable only when they can join, so a caller can
compute each one (the encoder's pass over a chunk) just in time.

Why the bits equal decoding alone: every operation a step applies to a row is
the one-row path's, in its summation order (see `ops.linear_rows`); the
prefill, the first logits and the greedy choice (end ids masked from the first
``min_new_tokens`` choices, first maximum) are `Qwen3Decoder.generate`'s own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from onespeech.kernels import ops
from onespeech.kernels.cancel import Cancel
from onespeech.qwen3.decoder import Generation, KVCache, Qwen3Decoder
from onespeech.qwen3.errors import raise_if_cancelled

# live sequences' caches counted at full capacity: 1 GiB holds about four 30 s
# chunks of the 0.6B model in FP32 with max_new_tokens=512 (~0.23 MB per
# position), nine in BF16
DEFAULT_KV_BUDGET_BYTES = 1 << 30
DEFAULT_MAX_BATCH = 8


@dataclass
class _Sequence:
    """One prompt's decoding state while it is in the batch."""

    index: int
    cache: KVCache
    logits: np.ndarray
    first: np.ndarray | None
    kept: list[np.ndarray] | None
    ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class BatchLimits:
    """Bounds of a decoding batch.

    Attributes
    ----------
    kv_budget_bytes : int >= 1
        The live sequences' KV caches, each counted at its capacity (prompt +
        max_new_tokens positions), stay within this; one sequence always runs.
    max_batch : int >= 1
        At most this many sequences decode together.
    """

    kv_budget_bytes: int = DEFAULT_KV_BUDGET_BYTES
    max_batch: int = DEFAULT_MAX_BATCH

    def __post_init__(self) -> None:
        for name in ("kv_budget_bytes", "max_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} is invalid; expected an int >= 1")


def generate_batch(
    decoder: Qwen3Decoder,
    prompts: Iterable[np.ndarray],
    max_new_tokens: int,
    eos_ids: Iterable[int],
    cancel: Cancel = None,
    *,
    limits: BatchLimits | None = None,
    keep_first_logits: bool = False,
    keep_logits: bool = False,
    min_new_tokens: int = 0,
) -> list[Generation]:
    """`Qwen3Decoder.generate` of every prompt, the live ones decoded together.

    Parameters
    ----------
    decoder : Qwen3Decoder
    prompts : iterable of ndarray[float32], shape (n_prompt_i, hidden_size)
        Prompt embeddings, taken one at a time when the prompt can join the batch.
    max_new_tokens, eos_ids, cancel, keep_first_logits, min_new_tokens
        As for `Qwen3Decoder.generate`, the same for every prompt.
    limits : BatchLimits, optional
        The memory and size bounds (defaults: `BatchLimits()`).
    keep_logits : bool
        Return every choice's logits (``Generation.logits``).

    Returns
    -------
    list of Generation, one per prompt in order, each equal bit for bit (ids,
    ``finished`` and any kept logits) to ``generate`` of that prompt alone.
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens!r} is invalid; expected an int >= 1")
    limits = limits if limits is not None else BatchLimits()
    eos = set(int(i) for i in eos_ids)
    eos_rows = np.array(sorted(eos), dtype=np.int64)
    results: dict[int, Generation] = {}
    live: list[_Sequence] = []
    source: Iterator[np.ndarray] = iter(prompts)
    waiting: np.ndarray | None = None
    taken = 0
    exhausted = False

    def used() -> int:
        return sum(decoder.kv_bytes(s.cache.capacity) for s in live)

    while True:
        # admit waiting prompts while they fit (one always runs)
        while not exhausted and len(live) < limits.max_batch:
            if waiting is None:
                raise_if_cancelled(cancel)
                waiting = next(source, None)
                if waiting is None:
                    exhausted = True
                    break
            capacity = waiting.shape[0] + max_new_tokens
            if live and used() + decoder.kv_bytes(capacity) > limits.kv_budget_bytes:
                break
            seq = _prefill(decoder, waiting, taken, capacity, cancel, keep_first_logits, keep_logits)
            waiting, taken = None, taken + 1
            if not _choose(seq, eos, eos_rows, min_new_tokens, max_new_tokens, results):
                live.append(seq)
        if not live:
            break
        raise_if_cancelled(cancel)
        logits = decoder.step_batch([s.ids[-1] for s in live], [s.cache for s in live], cancel)
        still = []
        for row, seq in enumerate(live):
            seq.logits = logits[row]
            if not _choose(seq, eos, eos_rows, min_new_tokens, max_new_tokens, results):
                still.append(seq)
        live = still  # finished sequences drop their caches here
    return [results[i] for i in range(taken)]


def _prefill(
    decoder: Qwen3Decoder,
    embeds: np.ndarray,
    index: int,
    capacity: int,
    cancel: Cancel,
    keep_first_logits: bool,
    keep_logits: bool,
) -> _Sequence:
    """The prompt alone through the decoder into a cache of its own, as `generate` starts."""
    cache = decoder.new_cache(capacity)
    hidden = decoder.forward(embeds, cache, cancel)
    logits = decoder.logits(hidden[-1])
    first = logits.copy() if keep_first_logits else None
    return _Sequence(index, cache, logits, first, [] if keep_logits else None)


def _choose(
    seq: _Sequence,
    eos: set[int],
    eos_rows: np.ndarray,
    min_new_tokens: int,
    max_new_tokens: int,
    results: dict[int, Generation],
) -> bool:
    """`generate`'s greedy choice from ``seq.logits``; True (and the result recorded) if the sequence ended."""
    logits = seq.logits
    if seq.kept is not None:
        seq.kept.append(logits.copy())
    if len(seq.ids) < min_new_tokens and eos_rows.size:
        logits[eos_rows] = -np.inf
    token = ops.argmax(logits)
    kept = None if seq.kept is None else tuple(seq.kept)
    if token in eos:
        results[seq.index] = Generation(seq.ids, True, seq.first, kept)
        return True
    seq.ids.append(token)
    if len(seq.ids) >= max_new_tokens:
        results[seq.index] = Generation(seq.ids, False, seq.first, kept)
        return True
    return False
