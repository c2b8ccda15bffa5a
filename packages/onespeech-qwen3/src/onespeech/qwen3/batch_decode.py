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
  one sequence always runs, even one whose cache alone is larger. None (the
  default) is auto: `AUTO_KV_FRACTION` (a quarter) of the bytes of weights the
  model reads (`BatchLimits.kv_budget`), so the caches stay in proportion to the
  weights in every precision.
- ``max_batch``: at most this many live sequences.

`BatchDecoder` is the decode loop: `BatchDecoder.join` prefills a prompt into
the batch once it fits, `BatchDecoder.step` advances every live sequence by one
token, and each sequence says when it is done (`DecodeSequence.generation`).
Sequences can join and leave between any two steps, so a caller can compute
each prompt (the encoder's pass over a chunk) just in time, and several callers
(threads: the server's requests) can share one batch, each driving steps while
it waits for its own sequences (continuous batching). `generate_batch` is that
loop over an iterable of prompts.

Why the bits equal decoding alone: every operation a step applies to a row is
the one-row path's, in its summation order (see `ops.linear_rows`); the
prefill, the first logits and the greedy choice (end ids masked from the first
``min_new_tokens`` choices, first maximum) are `Qwen3Decoder.generate`'s own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np

from onespeech.kernels import ops
from onespeech.kernels.cancel import Cancel, is_cancelled
from onespeech.qwen3.decoder import Generation, KVCache, Qwen3Decoder
from onespeech.qwen3.errors import RecognitionCancelledError, raise_if_recognition_cancelled

#: The auto KV budget's share of the weights the model reads (`BatchLimits.kv_budget`).
#: Peak memory in decode is those weights, the caches and the rest of the process
#: (activations, audio, Python and its libraries: about 165 MiB in the file path);
#: the target is the weights + 15% (docs/benchmarks.md, measured against the runtime
#: files, which hold a copy of the tied output head that is never read). A quarter of
#: the 0.6B recognizer's weights is 746 MiB in FP32, 373 MiB in BF16 (whose cache
#: is half as large) and 225 MiB in INT8 (whose cache stays float32): a 30 s chunk
#: at 100 new tokens counts 110 MiB (55 MiB in BF16), at 512 about 200 MiB.
AUTO_KV_FRACTION = 0.25
DEFAULT_MAX_BATCH = 8


@dataclass(frozen=True)
class BatchLimits:
    """Bounds of a decoding batch.

    Attributes
    ----------
    kv_budget_bytes : int >= 1 or None
        The live sequences' KV caches, each counted at its capacity (prompt +
        max_new_tokens positions), stay within this; one sequence always runs.
        None (default): auto, ``AUTO_KV_FRACTION`` (a quarter) of the bytes of
        weights the decoding model reads, made bytes by :meth:`resolve` when a
        batch is made (`Qwen3Recognizer.weight_bytes` for a recognizer's batch,
        else the decoder's own `Qwen3Decoder.weight_bytes`).
    max_batch : int >= 1
        At most this many sequences decode together.
    """

    kv_budget_bytes: int | None = None
    max_batch: int = DEFAULT_MAX_BATCH

    def __post_init__(self) -> None:
        for name, auto in (("kv_budget_bytes", " or None (auto)"), ("max_batch", "")):
            value = getattr(self, name)
            if auto and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} is invalid; expected an int >= 1{auto}")

    def kv_budget(self, weight_bytes: int) -> int:
        """The budget in bytes: ``kv_budget_bytes``, or if auto ``AUTO_KV_FRACTION`` of ``weight_bytes``.

        The auto budget is at least 1 byte (one sequence always runs whatever the budget).

        Parameters
        ----------
        weight_bytes : int >= 0
            Bytes of the weights the decoding model reads (`Qwen3Recognizer.weight_bytes`).
        """
        if isinstance(weight_bytes, bool) or not isinstance(weight_bytes, int) or weight_bytes < 0:
            raise ValueError(f"weight_bytes={weight_bytes!r} is invalid; expected an int >= 0")
        if self.kv_budget_bytes is not None:
            return self.kv_budget_bytes
        return max(1, int(weight_bytes * AUTO_KV_FRACTION))

    def resolve(self, weight_bytes: int) -> BatchLimits:
        """These limits with the budget in bytes (:meth:`kv_budget`); an explicit budget is kept."""
        return replace(self, kv_budget_bytes=self.kv_budget(weight_bytes))


@dataclass(eq=False)
class DecodeSequence:
    """One prompt's greedy decoding in a `BatchDecoder`.

    Attributes
    ----------
    key : object
        The caller's label (a chunk index, a request), returned untouched.
    generation : Generation | None
        Set once the sequence is done: equal bit for bit (ids, ``finished``, kept
        logits) to ``Qwen3Decoder.generate`` of its prompt alone.
    error : BaseException | None
        Set instead if it left the batch without a result: its ``cancel`` was set
        (``RecognitionCancelledError``), or a step failed.
    """

    key: object
    cache: KVCache
    logits: np.ndarray
    max_new_tokens: int
    min_new_tokens: int
    cancel: Cancel
    first: np.ndarray | None
    kept: list[np.ndarray] | None
    ids: list[int] = field(default_factory=list)
    generation: Generation | None = None
    error: BaseException | None = None

    @property
    def done(self) -> bool:
        """The sequence left the batch (``generation`` or ``error`` is set)."""
        return self.generation is not None or self.error is not None

    def result(self) -> Generation:
        """The generation of a done sequence; raises its ``error`` if it has one."""
        if self.error is not None:
            raise self.error
        if self.generation is None:
            raise RuntimeError("this sequence is still decoding; step the batch until it is done")
        return self.generation


class BatchDecoder:
    """The decode loop: sequences join between steps, each step advances all of them.

    Thread-safe: ``join``, ``step`` and ``discard`` may be called from several
    threads sharing one batch; steps run one at a time (a sequence that joins
    during a step joins at the next one), and whichever caller calls ``step``
    advances every live sequence, its own and the others'.

    Parameters
    ----------
    decoder : Qwen3Decoder
        Runs every step (and each prefill).
    eos_ids : iterable of int
        End ids of every sequence.
    limits : BatchLimits, optional
        The memory and size bounds (defaults: `BatchLimits()`). An auto budget is
        resolved against ``decoder.weight_bytes`` (`BatchLimits.resolve`);
        `Qwen3Recognizer.batch_decoder` resolves it against the whole recognizer.

    Attributes
    ----------
    limits : BatchLimits
        The bounds in force, the budget in bytes.
    steps : int
        Decode steps run so far.
    shared_steps : int
        Steps that advanced sequences of more than one owner (``join(owner=...)``).
    """

    def __init__(self, decoder: Qwen3Decoder, eos_ids: Iterable[int], limits: BatchLimits | None = None) -> None:
        self.decoder = decoder
        limits = limits if limits is not None else BatchLimits()
        self._budget = limits.kv_budget(decoder.weight_bytes)
        self.limits = replace(limits, kv_budget_bytes=self._budget)
        self._eos = set(int(i) for i in eos_ids)
        self._eos_rows = np.array(sorted(self._eos), dtype=np.int64)
        self._live: list[DecodeSequence] = []
        self._owners: dict[int, object] = {}  # id(sequence) -> owner, for shared_steps
        self._reserved = 0  # bytes of caches being prefilled outside the lock
        self._joining = 0
        self._lock = threading.Lock()  # the live list and the reservations
        self._step_lock = threading.Lock()  # one step at a time
        self._changed = threading.Condition(self._lock)
        self.steps = 0
        self.shared_steps = 0

    def __len__(self) -> int:
        """Live sequences (decoding, not yet done)."""
        with self._lock:
            return len(self._live)

    def _room(self, capacity: int) -> bool:
        count = len(self._live) + self._joining
        if count == 0:
            return True  # one sequence always runs
        if count >= self.limits.max_batch:
            return False
        used = sum(self.decoder.kv_bytes(s.cache.capacity) for s in self._live) + self._reserved
        return used + self.decoder.kv_bytes(capacity) <= self._budget

    def join(
        self,
        embeds: np.ndarray,
        max_new_tokens: int,
        *,
        key: object = None,
        owner: object = None,
        cancel: Cancel = None,
        keep_first_logits: bool = False,
        keep_logits: bool = False,
        min_new_tokens: int = 0,
        decoder: Qwen3Decoder | None = None,
    ) -> DecodeSequence | None:
        """Prefill a prompt and add it to the batch, if it fits now; None if it does not.

        The prompt runs alone into a cache of its own (capacity: prompt +
        ``max_new_tokens`` positions) and takes its first choice, as
        ``Qwen3Decoder.generate`` starts; a sequence whose first choice ends it is
        returned done and never joins. Otherwise it decodes from the next step on.
        When None is returned, ``step`` until a sequence leaves, then try again.

        Parameters
        ----------
        embeds : ndarray[float32], shape (n_prompt, hidden_size)
        max_new_tokens : int >= 1
        key, owner : object
            The caller's labels: ``key`` is kept on the sequence; sequences of
            different ``owner`` in one step count as a shared step.
        cancel : threading.Event-like, callable or None
            This sequence's signal: checked during its prefill and before each
            step (a set signal makes it leave with ``RecognitionCancelledError``).
        keep_first_logits, keep_logits, min_new_tokens
            As for ``Qwen3Decoder.generate``.
        decoder : Qwen3Decoder, optional
            Runs the prefill instead of the batch's decoder (another instance over
            the same weights, e.g. another server worker's).
        """
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens!r} is invalid; expected an int >= 1")
        if decoder is not None and decoder.kv_bytes(1) != self.decoder.kv_bytes(1):
            raise ValueError("the prefill decoder's caches differ from the batch's (another model or precision); "
                             "give a decoder over the same weights in the same precision")
        capacity = embeds.shape[0] + max_new_tokens
        reserved = self.decoder.kv_bytes(capacity)
        with self._lock:
            if not self._room(capacity):
                return None
            self._reserved += reserved
            self._joining += 1
        try:
            raise_if_recognition_cancelled(cancel)
            seq = _prefill(decoder or self.decoder, embeds, key, capacity, max_new_tokens, min_new_tokens, cancel,
                           keep_first_logits, keep_logits)
            ended = self._choose(seq)
        finally:
            with self._lock:
                self._reserved -= reserved
                self._joining -= 1
                self._changed.notify_all()
        if not ended:
            with self._lock:
                self._live.append(seq)
                self._owners[id(seq)] = owner
                self._changed.notify_all()
        return seq

    def step(self, timeout: float = 0.05) -> list[DecodeSequence]:
        """Advance every live sequence by one token; the sequences that left the batch.

        With no live sequence (another caller's may be joining), waits up to
        ``timeout`` seconds for one and returns []. Sequences whose ``cancel`` is
        set leave first, with ``RecognitionCancelledError``. If the step itself
        fails, every sequence in it leaves with that error, which is raised.
        """
        with self._step_lock:
            with self._lock:
                if not self._live:
                    self._changed.wait(timeout)
                    return []
                left = [s for s in self._live if is_cancelled(s.cancel)]
                for seq in left:
                    seq.error = RecognitionCancelledError("recognition was cancelled by the caller's signal")
                live = [s for s in self._live if s.error is None]
                owners = {id(self._owners[id(s)]) for s in live}
            if live:
                try:
                    logits = self.decoder.step_batch([s.ids[-1] for s in live], [s.cache for s in live],
                                                     _all_cancelled(live))
                except BaseException as error:
                    with self._lock:
                        for seq in live:
                            seq.error = error
                        self._drop(live)
                    raise
                self.steps += 1
                self.shared_steps += len(owners) > 1
                for row, seq in enumerate(live):
                    seq.logits = logits[row]
                    if self._choose(seq):
                        left.append(seq)
            with self._lock:
                self._drop(left)  # finished sequences drop their caches here
            return left

    def discard(self, sequences: Iterable[DecodeSequence]) -> None:
        """Take these sequences out of the batch unfinished (their caller gave up on them)."""
        with self._step_lock, self._lock:
            self._drop([s for s in sequences if not s.done])

    def _drop(self, sequences: list[DecodeSequence]) -> None:
        gone = {id(s) for s in sequences}
        self._live = [s for s in self._live if id(s) not in gone]
        for key in gone:
            self._owners.pop(key, None)
        for seq in sequences:
            seq.cache = _RELEASED
        self._changed.notify_all()

    def _choose(self, seq: DecodeSequence) -> bool:
        """`generate`'s greedy choice from ``seq.logits``; True (and the result set) if the sequence ended."""
        logits = seq.logits
        if seq.kept is not None:
            seq.kept.append(logits.copy())
        if len(seq.ids) < seq.min_new_tokens and self._eos_rows.size:
            logits[self._eos_rows] = -np.inf
        token = ops.argmax(logits)
        kept = None if seq.kept is None else tuple(seq.kept)
        if token in self._eos:
            seq.generation = Generation(seq.ids, True, seq.first, kept)
            return True
        seq.ids.append(token)
        if len(seq.ids) >= seq.max_new_tokens:
            seq.generation = Generation(seq.ids, False, seq.first, kept)
            return True
        return False


class _Released(KVCache):
    """The cache of a sequence that left the batch (its memory is freed)."""

    def __init__(self) -> None:
        self.capacity = 0
        self.length = 0


_RELEASED = _Released()


def _all_cancelled(live: list[DecodeSequence]) -> Cancel:
    # a step stops between layers only when every sequence in it is cancelled: the
    # others' steps must complete (they leave at the next step otherwise)
    return lambda: all(is_cancelled(s.cancel) for s in live)


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
    """`Qwen3Decoder.generate` of every prompt, the live ones decoded together (a `BatchDecoder`).

    Parameters
    ----------
    decoder : Qwen3Decoder
    prompts : iterable of ndarray[float32], shape (n_prompt_i, hidden_size)
        Prompt embeddings, taken one at a time when the previous one has joined.
    max_new_tokens, eos_ids, cancel, keep_first_logits, min_new_tokens
        As for `Qwen3Decoder.generate`, the same for every prompt.
    limits : BatchLimits, optional
        The memory and size bounds (defaults: `BatchLimits()`; an auto budget is
        resolved against ``decoder.weight_bytes``, as `BatchDecoder` does).
    keep_logits : bool
        Return every choice's logits (``Generation.logits``).

    Returns
    -------
    list of Generation, one per prompt in order, each equal bit for bit (ids,
    ``finished`` and any kept logits) to ``generate`` of that prompt alone.
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens!r} is invalid; expected an int >= 1")
    batch = BatchDecoder(decoder, eos_ids, limits)
    sequences: list[DecodeSequence] = []
    try:
        for index, embeds in enumerate(_checked(prompts, cancel)):
            while True:
                seq = batch.join(embeds, max_new_tokens, key=index, cancel=cancel, min_new_tokens=min_new_tokens,
                                 keep_first_logits=keep_first_logits, keep_logits=keep_logits)
                if seq is not None:
                    break
                _step(batch)
            sequences.append(seq)
        while len(batch):
            _step(batch)
        return [s.result() for s in sequences]
    finally:
        batch.discard(sequences)


def _checked(prompts: Iterable[np.ndarray], cancel: Cancel) -> Iterable[np.ndarray]:
    for embeds in prompts:
        yield embeds
        raise_if_recognition_cancelled(cancel)


def _step(batch: BatchDecoder) -> None:
    for seq in batch.step():
        if seq.error is not None:
            raise seq.error


def _prefill(
    decoder: Qwen3Decoder,
    embeds: np.ndarray,
    key: object,
    capacity: int,
    max_new_tokens: int,
    min_new_tokens: int,
    cancel: Cancel,
    keep_first_logits: bool,
    keep_logits: bool,
) -> DecodeSequence:
    """The prompt alone through the decoder into a cache of its own, as `generate` starts."""
    cache = decoder.new_cache(capacity)
    hidden = decoder.forward(embeds, cache, cancel, rows=[len(embeds) - 1])
    logits = decoder.logits(hidden[-1])
    first = logits.copy() if keep_first_logits else None
    return DecodeSequence(key, cache, logits, max_new_tokens, min_new_tokens, cancel, first,
                          [] if keep_logits else None)
