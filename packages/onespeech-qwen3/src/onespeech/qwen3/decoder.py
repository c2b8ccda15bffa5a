"""The Qwen3 text decoder with a preallocated past/present KV cache.

Architecture (HF Qwen3 as the Qwen3-ASR thinker uses it)::

    embeddings f32[n, D] (audio pad rows already replaced by encoder output)
      -> layers: x = rms_norm(h); q/k/v = x W; per-head RMS norm of q and k;
         rotary positions (rotate_half); grouped-query causal attention over the
         cache; h += o_proj(attn); h += down(silu(gate(x')) * up(x')), x' = rms_norm(h)
      -> final rms_norm -> output head (only where logits are needed)

Rotary positions: the released config asks for interleaved multimodal rope
(mrope_section), but qwen-asr gives all three position rows the same ids
(0, 1, 2, ... over audio and text alike), so every frequency sees the same
position and the result is plain 1-D rope with theta = rope_theta.

One shape plan is kept: the cache is sized for prompt + max_new_tokens of the
current request; a request of another size replaces it (the old one is dropped,
never reused for autoregressive generation). Batched decoding
(`onespeech.qwen3.batch_decode`) gives each sequence a cache of its own
(`new_cache`) and advances all live sequences one token per `step_batch`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from onespeech.kernels import int8matrix, ops
from onespeech.kernels.cancel import Cancel
from onespeech.kernels.int8matrix import Int8Matrix, matrix
from onespeech.qwen3.config import Qwen3Config, TextDecoderConfig
from onespeech.qwen3.errors import raise_if_recognition_cancelled
from onespeech.qwen3.runtime import activation_rounding, tensor_bytes, tensors_under


def rope_tables(positions: np.ndarray, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin f32[n, head_dim] for integer positions, as HF's default rope in float32.

    inv_freq = 1 / theta ** (arange(0, head_dim, 2) / head_dim); both halves repeat the
    frequencies (``cat(freqs, freqs)``), matching rotate_half.
    """
    exponent = np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
    inv_freq = (np.float32(1.0) / np.power(np.float32(theta), exponent)).astype(np.float32)
    freqs = np.asarray(positions, dtype=np.float32)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=1)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


class KVCache:
    """Past keys/values of every layer, preallocated for ``capacity`` positions.

    With ``shared_layers`` every layer shares one keys and one values buffer: enough
    for a single causal pass from an empty cache (:meth:`Qwen3Decoder.hidden_states`),
    which then needs one layer's memory instead of ``n_layers`` (a 300 s aligner input:
    about 60 MB instead of 1.6 GB). Such a cache cannot be extended by a second call.

    Attributes
    ----------
    k, v : ndarray[float32 | uint16 (bf16)], shape (n_layers, capacity, n_kv_heads, head_dim)
        bfloat16 under BF16 precision: keys and values are rounded to bfloat16
        anyway (as the reference's bf16 cache holds them), so storing the bits
        halves the cache and what decode attention reads, and changes no value.
        With ``shared_layers``: zero-stride views of one buffer each.
    length : int
        Positions filled so far.
    cos, sin : ndarray[float32], shape (capacity, head_dim)
        Rotary tables for every position of the plan.
    """

    def __init__(
        self, dims: TextDecoderConfig, capacity: int, bf16: bool = False, *, shared_layers: bool = False
    ) -> None:
        self.capacity = capacity
        dtype = np.uint16 if bf16 else np.float32
        if shared_layers:
            # one pass from an empty cache: each layer writes all of its positions before
            # reading them and no layer reads another's, so one buffer serves every layer
            # (a zero stride on the layer axis) and the arithmetic is unchanged
            self.k = _every_layer(np.zeros((capacity, dims.num_kv_heads, dims.head_dim), dtype), dims.num_layers)
            self.v = _every_layer(np.zeros((capacity, dims.num_kv_heads, dims.head_dim), dtype), dims.num_layers)
        else:
            shape = (dims.num_layers, capacity, dims.num_kv_heads, dims.head_dim)
            self.k = np.zeros(shape, dtype=dtype)
            self.v = np.zeros(shape, dtype=dtype)
        self.cos, self.sin = rope_tables(np.arange(capacity), dims.head_dim, dims.rope_theta)
        self.length = 0

    def reset(self) -> None:
        """Forget the past (fresh decoder state) without reallocating."""
        self.length = 0


def _every_layer(buffer: np.ndarray, n_layers: int) -> np.ndarray:
    return as_strided(buffer, shape=(n_layers, *buffer.shape), strides=(0, *buffer.strides), writeable=True)


@dataclass(frozen=True)
class Generation:
    """Greedy ids after the prompt; ``finished`` is True if an end token stopped it.

    ``first_logits``: the prefill's last-position logits, if asked. ``logits``: if
    asked, the logits of every choice in order (the first is ``first_logits``; one
    more than ``ids`` when an end token stopped it), before end ids are masked.
    """

    ids: list[int]
    finished: bool
    first_logits: np.ndarray | None = None
    logits: tuple[np.ndarray, ...] | None = None


class Qwen3Decoder:
    """Qwen3 decoder over loaded tensors.

    Parameters
    ----------
    weights : mapping of str to ndarray
        Tensors by publisher name (``thinker.model.layers.0.self_attn.q_proj.weight``
        ...), float32 or bfloat16 (uint16); matrices are kept as views, never copied
        (bfloat16 vectors are widened once, see `tensors_under`).
    config : Qwen3Config
        The parsed config.json (its ``text`` part sizes the decoder).
    prefix : str
        Name prefix of the decoder's tensors.
    head : str | None
        Full name of the output-head matrix [V, D]. Default: the one the reference
        uses (``config.output_head_name``: the token embedding, since the ASR configs
        tie it). None builds a decoder without head (the forced aligner has its own).
    bf16_activations : bool
        Round activations to bfloat16 at operator boundaries (BF16 precision).

    Attributes
    ----------
    weight_bytes : int
        Bytes of the tensors it reads, as given: every tensor under ``prefix``
        (layers, final norm, token embedding) and the output head (its int8 codes
        and scales under INT8) when that is not one of them. A tied head is the
        embedding, counted once; the runtime's separate copy of it is never read.
    """

    def __init__(
        self,
        weights: Mapping[str, np.ndarray],
        config: Qwen3Config,
        prefix: str = "thinker.model.",
        head: str | None = "default",
        bf16_activations: bool = False,
    ) -> None:
        self.dims = config.text
        self._w = tensors_under(weights, prefix)
        if head == "default":
            head = config.output_head_name
        self._head = matrix(weights, head) if head is not None else None
        self.weight_bytes = tensor_bytes(weights, prefix)
        if head is not None and not head.startswith(prefix):  # an untied head: it and its int8 scales
            self.weight_bytes += tensor_bytes(weights, head)
        self._round: Callable[[np.ndarray], np.ndarray] = activation_rounding(bf16_activations)
        self._bf16 = bf16_activations
        # bf16 activations make k/v bf16 values, so the cache can hold their bits
        self._bf16_cache = bf16_activations
        self._cache: KVCache | None = None
        # one-token steps run each layer as one compiled call (None: op by op)
        self._fused = self._fused_layers()

    # -- building blocks ---------------------------------------------------------------

    def embed(self, ids: np.ndarray) -> np.ndarray:
        """Token embeddings f32[n, hidden_size] of int ids[n]."""
        return ops.embedding(self._w["embed_tokens.weight"], np.asarray(ids, dtype=np.int64))

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        """Output head over final-normed hidden states f32[..., D] -> f32[..., V]."""
        if self._head is None:
            raise ValueError("this decoder was built without an output head")
        return int8matrix.linear(hidden, self._head, round_to_bf16=self._bf16)

    def cache_for(self, capacity: int) -> KVCache:
        """The one cache plan, reallocated only when the request size changes."""
        if capacity < 1:
            raise ValueError(f"cache capacity {capacity} must be at least 1")
        if self._cache is None or self._cache.capacity != capacity:
            self._cache = None  # drop the old plan before allocating the new one
            self._cache = KVCache(self.dims, capacity, self._bf16_cache)
        self._cache.reset()
        return self._cache

    def _fused_layers(self) -> list[ops.DecoderLayer] | None:
        d, w = self.dims, self._w
        matrices = [f"self_attn.{m}_proj" for m in "qkvo"] + [f"mlp.{m}_proj" for m in ("gate", "up", "down")]
        norms = ["input_layernorm", "post_attention_layernorm", "self_attn.q_norm", "self_attn.k_norm"]
        layers = []
        for layer in range(d.num_layers):
            p = f"layers.{layer}."
            ws = [matrix(w, f"{p}{m}.weight") for m in matrices]
            scales = tuple(m.scale for m in ws if isinstance(m, Int8Matrix))
            if scales and len(scales) != len(ws):
                return None  # int8 beside float matrices: the op path (`_layer`) takes each as it is
            fused = ops.decoder_layer(
                tuple(m.codes if isinstance(m, Int8Matrix) else m for m in ws),
                tuple(w[f"{p}{m}.weight"] for m in norms),
                n_heads=d.num_heads,
                n_kv_heads=d.num_kv_heads,
                head_dim=d.head_dim,
                eps=d.rms_norm_eps,
                scales=scales or None,
            )
            if fused is None:
                return None
            layers.append(fused)
        return layers

    def release(self) -> None:
        """Drop the cache plan."""
        self._cache = None

    def new_cache(self, capacity: int) -> KVCache:
        """A cache of its own for one sequence of a batch (the plan of `cache_for` is not touched)."""
        if capacity < 1:
            raise ValueError(f"cache capacity {capacity} must be at least 1")
        return KVCache(self.dims, capacity, self._bf16_cache)

    def kv_bytes(self, capacity: int) -> int:
        """Bytes of a cache of ``capacity`` positions: keys and values of every layer.

        2 x num_layers x capacity x num_kv_heads x head_dim x (4 bytes, or 2 under
        BF16 precision, whose cache holds bfloat16 bits).
        """
        d = self.dims
        return 2 * d.num_layers * capacity * d.num_kv_heads * d.head_dim * (2 if self._bf16_cache else 4)

    # -- forward passes -------------------------------------------------------------------

    def forward(self, embeds: np.ndarray, cache: KVCache, cancel: Cancel = None,
                rows: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
        """Run ``n`` new positions through every layer, appending them to the cache.

        Parameters
        ----------
        embeds : ndarray[float32], shape (n, hidden_size)
            Inputs for positions ``cache.length .. cache.length + n - 1``.
        cache : KVCache
        cancel : threading.Event-like, callable or None
            Checked between layers.
        rows : array of int, optional
            The only rows (indices into ``embeds``, increasing) whose outputs the
            caller reads: a prefill reads its last row, the aligner its timestamp
            rows. The last layer still writes every row's keys and values, but
            runs its queries, attention, output projection and MLP on these rows
            alone (about 1/num_layers of the pass's products for a prefill).

        Returns
        -------
        ndarray[float32], shape (n, hidden_size), or (len(rows), hidden_size) with ``rows``
            Hidden states after the final RMS norm.
        """
        n = embeds.shape[0]
        pos = cache.length
        if pos + n > cache.capacity:
            raise ValueError(f"{pos + n} positions exceed the cache plan of {cache.capacity}")
        keep = _kept_rows(rows, n)
        cos, sin = cache.cos[pos : pos + n], cache.sin[pos : pos + n]
        hidden = np.ascontiguousarray(embeds, dtype=np.float32)
        if self._bf16:  # into a new array: the caller's embeddings are never rounded in place
            hidden = ops.round_bf16(hidden)
        fused = self._fused if n == 1 else None
        if fused is not None and not self._bf16:
            hidden = hidden.copy()  # the fused step updates it in place
        scale = self.dims.head_dim**-0.5
        for layer in range(self.dims.num_layers):
            raise_if_recognition_cancelled(cancel)
            if fused is not None:  # the same values as _layer, in one call
                k, v = cache.k[layer], cache.v[layer]
                fused[layer].step(hidden[0], k, v, pos, cos[0], sin[0], scale, round_to_bf16=self._bf16)
            else:
                last = keep if layer == self.dims.num_layers - 1 else None
                hidden = self._layer(hidden, layer, cache, pos, cos, sin, last)
        cache.length = pos + n
        if fused is not None and keep is not None:
            hidden = hidden[keep]
        return ops.rms_norm(hidden, self._w["norm.weight"], self.dims.rms_norm_eps, round_to_bf16=self._bf16)

    def step_batch(self, tokens: Sequence[int], caches: Sequence[KVCache], cancel: Cancel = None) -> np.ndarray:
        """One token of each of several sequences, each with its own cache: logits f32[B, V].

        Row ``b`` is bit for bit what ``logits(forward(embed([tokens[b]]), caches[b])[-1])``
        gives for that sequence alone: the fused layers' `step_batch` and
        `ops.linear_rows` keep every row's one-row summation order, and the
        norms, rotary positions and attention work row by row over each
        sequence's own cache and positions. Each matrix is read once per call
        for all rows. Without compiled kernels the sequences run one by one.

        Parameters
        ----------
        tokens : sequence of int, length B
            Each sequence's last chosen id (its input at position ``caches[b].length``).
        caches : sequence of KVCache, length B, distinct
            Each advanced by one position.
        cancel : threading.Event-like, callable or None
            Checked between layers.
        """
        if len(tokens) != len(caches) or not tokens:
            raise ValueError(f"{len(tokens)} tokens for {len(caches)} caches; give one token per cache, at least one")
        if len({id(c) for c in caches}) != len(caches):
            raise ValueError("step_batch needs a cache of its own per sequence; one cache was given twice")
        for c in caches:
            if c.length >= c.capacity:
                raise ValueError(f"{c.length + 1} positions exceed the cache plan of {c.capacity}")
        embeds = self.embed(np.asarray(tokens, dtype=np.int64))
        if self._fused is None:
            rows = [self.logits(self.forward(embeds[b : b + 1], c, cancel)[-1]) for b, c in enumerate(caches)]
            return np.stack(rows)
        # the same input rounding as `forward` (a fresh array either way: updated in place)
        hidden = ops.round_bf16(embeds) if self._bf16 else np.ascontiguousarray(embeds, dtype=np.float32).copy()
        positions = np.array([c.length for c in caches], dtype=np.int64)
        cos = np.stack([c.cos[c.length] for c in caches])
        sin = np.stack([c.sin[c.length] for c in caches])
        ks, vs = [c.k for c in caches], [c.v for c in caches]
        scale = self.dims.head_dim**-0.5
        for layer in range(self.dims.num_layers):
            raise_if_recognition_cancelled(cancel)
            self._fused[layer].step_batch(hidden, ks, vs, layer, positions, cos, sin, scale, round_to_bf16=self._bf16)
        for c in caches:
            c.length += 1
        normed = ops.rms_norm(hidden, self._w["norm.weight"], self.dims.rms_norm_eps, round_to_bf16=self._bf16)
        if self._head is None:
            raise ValueError("this decoder was built without an output head")
        return int8matrix.linear_rows(normed, self._head, round_to_bf16=self._bf16)

    def hidden_states(
        self, embeds: np.ndarray, cancel: Cancel = None, rows: Sequence[int] | np.ndarray | None = None
    ) -> np.ndarray:
        """Causal full-sequence forward without keeping a cache (the aligner's pass).

        Runs on a ``shared_layers`` cache: one layer's keys and values in memory,
        the same values as :meth:`forward` from an empty cache.

        Parameters
        ----------
        embeds : ndarray[float32], shape (n, hidden_size)
        rows : array of int, optional
            Only these rows' outputs are computed in full (see :meth:`forward`).

        Returns
        -------
        ndarray[float32], shape (n, hidden_size) or (len(rows), hidden_size), after the final RMS norm
        """
        cache = KVCache(self.dims, max(1, embeds.shape[0]), self._bf16_cache, shared_layers=True)
        return self.forward(embeds, cache, cancel, rows)

    def _layer(
        self, hidden: np.ndarray, layer: int, cache: KVCache, pos: int, cos: np.ndarray, sin: np.ndarray,
        keep: np.ndarray | None = None,
    ) -> np.ndarray:
        # Multi-row products (prefill) take our GEMM wherever `ops.linear` finds it
        # faster than BLAS, as the encoder's do (FP32 prefill of a 10 s clip: 0.82 of
        # its time on BLAS, Zen 4, 2 threads). It sums in another order than BLAS;
        # the near-tie rule (docs/qwen3.md) allows that, and the full-size parity
        # suites pass with it.
        r, b = self._round, self._bf16  # b: each operator rounds its own output (BF16)
        d = self.dims
        w = self._w
        p = f"layers.{layer}."
        n = hidden.shape[0]
        eps = d.rms_norm_eps
        # attention: q/k/v, per-head q/k RMS norm, rotary positions
        x = ops.rms_norm(hidden, w[p + "input_layernorm.weight"], eps, round_to_bf16=b)
        qkv = [matrix(w, p + f"self_attn.{m}_proj.weight") for m in "qkv"]
        if keep is None:
            q, k, v = int8matrix.linear_many(x, qkv, round_to_bf16=b)
            qcos, qsin = cos, sin
        else:  # every row's keys and values; queries (and all after them) at the kept rows only
            k, v = int8matrix.linear_many(x, qkv[1:], round_to_bf16=b)
            q = int8matrix.linear(np.ascontiguousarray(x[keep]), qkv[0], round_to_bf16=b)
            qcos, qsin, hidden = cos[keep], sin[keep], hidden[keep]
        q = q.reshape(q.shape[0], d.num_heads, d.head_dim)
        k = k.reshape(n, d.num_kv_heads, d.head_dim)
        v = v.reshape(n, d.num_kv_heads, d.head_dim)
        q = ops.rms_norm(q, w[p + "self_attn.q_norm.weight"], eps, round_to_bf16=b)
        k = ops.rms_norm(k, w[p + "self_attn.k_norm.weight"], eps, round_to_bf16=b)
        q, k = ops.rope(q, qcos, qsin, round_to_bf16=b), ops.rope(k, cos, sin, round_to_bf16=b)
        # present keys/values join the past in the preallocated cache
        if cache.k.dtype == np.uint16:  # k, v are bf16-rounded: the bits are exact
            k, v = ops.f32_to_bf16(k), ops.f32_to_bf16(v)
        cache.k[layer, pos : pos + n] = k
        cache.v[layer, pos : pos + n] = v
        scale = d.head_dim**-0.5
        if keep is None:
            attn = ops.attention(q, cache.k[layer, : pos + n], cache.v[layer, : pos + n], scale, pos, round_to_bf16=b)
        else:  # each run of consecutive kept rows attends as those rows of the full pass do
            parts = []
            for start, end in _runs(keep):
                first, stop = pos + keep[start], pos + keep[end - 1] + 1
                parts.append(ops.attention(q[start:end], cache.k[layer, :stop], cache.v[layer, :stop], scale, first,
                                           round_to_bf16=b))
            attn = np.concatenate(parts)
        attn = attn.reshape(q.shape[0], d.num_heads * d.head_dim)
        o = int8matrix.linear(attn, matrix(w, p + "self_attn.o_proj.weight"), round_to_bf16=b)
        hidden = r(hidden + o)
        # SwiGLU MLP
        x = ops.rms_norm(hidden, w[p + "post_attention_layernorm.weight"], eps, round_to_bf16=b)
        gate_up = [matrix(w, p + "mlp.gate_proj.weight"), matrix(w, p + "mlp.up_proj.weight")]
        gate, up = int8matrix.linear_many(x, gate_up, round_to_bf16=b)
        down = int8matrix.linear(ops.swiglu(gate, up, round_to_bf16=b), matrix(w, p + "mlp.down_proj.weight"),
                                 round_to_bf16=b)
        return r(hidden + down)

    # -- greedy generation ---------------------------------------------------------------

    def teacher_forced(
        self,
        embeds: np.ndarray,
        forced_ids: Sequence[int],
        cancel: Cancel = None,
        *,
        eos_ids: Iterable[int] = (),
        min_new_tokens: int = 0,
    ) -> list[int]:
        """The argmax after the prompt and after each prefix of ``forced_ids``.

        Runs exactly as :meth:`generate` (prefill, then one cached step per id) but
        feeds ``forced_ids`` instead of its own choices, so element ``t`` of the
        result is this model's next id after ``prompt + forced_ids[:t]``. Parity
        tools count per-step agreement with another model's greedy ids this way.
        ``eos_ids`` are masked out of the first ``min_new_tokens`` choices, as in
        :meth:`generate`.

        Returns
        -------
        list[int], one argmax per forced id
        """
        forced = [int(t) for t in forced_ids]
        if not forced:
            return []
        eos_rows = np.array(sorted(set(int(i) for i in eos_ids)), dtype=np.int64)
        cache = self.cache_for(embeds.shape[0] + len(forced))
        hidden = self.forward(embeds, cache, cancel, rows=[len(embeds) - 1])
        choices: list[int] = []
        for token in forced:
            logits = self.logits(hidden[-1])
            if len(choices) < min_new_tokens and eos_rows.size:
                logits[eos_rows] = -np.inf
            choices.append(ops.argmax(logits))
            if len(choices) == len(forced):
                return choices
            raise_if_recognition_cancelled(cancel)
            hidden = self.forward(self.embed(np.array([token])), cache, cancel)
        return choices

    def generate(
        self,
        embeds: np.ndarray,
        max_new_tokens: int,
        eos_ids: Iterable[int],
        cancel: Cancel = None,
        keep_first_logits: bool = False,
        min_new_tokens: int = 0,
        keep_logits: bool = False,
    ) -> Generation:
        """Greedy decoding after a prompt, with fresh state.

        Prefill runs the prompt and applies the head only to its last position; each
        step feeds back the argmax token. Stops after an end token (not returned) or
        after ``max_new_tokens`` ids.

        Parameters
        ----------
        embeds : ndarray[float32], shape (n_prompt, hidden_size)
        max_new_tokens : int >= 1
        eos_ids : iterable of int
        cancel : threading.Event-like, callable or None
            Checked between layers and between steps.
        keep_first_logits : bool
            Return the prefill's last-position logits (parity checks).
        min_new_tokens : int
            End tokens are masked out until this many ids exist (as transformers'
            ``min_new_tokens``); for parity runs past an early end.
        keep_logits : bool
            Return every choice's logits (``Generation.logits``; tests of batched decoding).
        """
        eos = set(int(i) for i in eos_ids)
        cache = self.cache_for(embeds.shape[0] + max_new_tokens)
        hidden = self.forward(embeds, cache, cancel, rows=[len(embeds) - 1])
        logits = self.logits(hidden[-1])
        first = logits.copy() if keep_first_logits else None
        ids: list[int] = []
        kept: list[np.ndarray] | None = [] if keep_logits else None
        eos_rows = np.array(sorted(eos), dtype=np.int64)
        while True:
            if kept is not None:
                kept.append(logits.copy())
            if len(ids) < min_new_tokens and eos_rows.size:
                logits[eos_rows] = -np.inf
            token = ops.argmax(logits)
            if token in eos:
                return Generation(ids, True, first, _kept(kept))
            ids.append(token)
            if len(ids) >= max_new_tokens:
                return Generation(ids, False, first, _kept(kept))
            raise_if_recognition_cancelled(cancel)
            hidden = self.forward(self.embed(np.array([token])), cache, cancel)
            logits = self.logits(hidden[-1])


def _kept_rows(rows: Sequence[int] | np.ndarray | None, n: int) -> np.ndarray | None:
    """``rows`` as increasing int64 indices into ``n`` rows (None: every row)."""
    if rows is None:
        return None
    keep = np.asarray(rows, dtype=np.int64).reshape(-1)
    if keep.size == 0 or keep[0] < 0 or keep[-1] >= n or np.any(np.diff(keep) <= 0):
        raise ValueError(f"rows must be increasing indices in 0..{n - 1}, at least one; got {keep.size} "
                         f"from {keep[:1].tolist()} to {keep[-1:].tolist()}")
    return keep


def _runs(keep: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) spans of ``keep`` whose values are consecutive integers."""
    breaks = np.flatnonzero(np.diff(keep) != 1) + 1
    edges = [0, *breaks.tolist(), keep.size]
    return list(zip(edges[:-1], edges[1:], strict=True))


def _kept(logits: list[np.ndarray] | None) -> tuple[np.ndarray, ...] | None:
    return None if logits is None else tuple(logits)
