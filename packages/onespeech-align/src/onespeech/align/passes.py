"""The decoder's single full-sequence pass, keeping one layer's keys/values at a time.

The aligner needs no key/value history after its one causal pass, yet
``Qwen3Decoder.forward`` writes every layer's keys and values into a cache. A
cache of all layers for a 300 s input (about 7,000 positions x 28 layers x 8 kv
heads x 128 x 2 x 4 bytes) would hold about 1.6 GB. Each layer writes all of its
positions before it reads them, and no layer reads another's, so every layer can
share one buffer: the cache handed to the decoder exposes the same
(n, n_kv_heads, head_dim) buffer under every layer index (a zero stride on the
layer axis). The arithmetic is unchanged.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from onespeech.kernels.cancel import Cancel
from onespeech.qwen3.decoder import Qwen3Decoder, rope_tables


class SharedLayerCache:
    """A KVCache look-alike whose layers all share one keys and one values buffer.

    Attributes
    ----------
    k, v : ndarray[float32 | uint16 (bf16)], shape (n_layers, capacity, n_kv_heads, head_dim)
        Zero-stride views over one (capacity, n_kv_heads, head_dim) buffer each.
    cos, sin : ndarray[float32], shape (capacity, head_dim)
    length, capacity : int
    """

    def __init__(self, decoder: Qwen3Decoder, capacity: int, bf16: bool = False) -> None:
        dims = decoder.dims
        self.capacity = capacity
        self.length = 0
        # bfloat16 bits under BF16, as KVCache keeps them (the values are bf16-rounded anyway)
        dtype = np.uint16 if bf16 else np.float32
        self.k = _every_layer(np.empty((capacity, dims.num_kv_heads, dims.head_dim), dtype), dims.num_layers)
        self.v = _every_layer(np.empty((capacity, dims.num_kv_heads, dims.head_dim), dtype), dims.num_layers)
        self.cos, self.sin = rope_tables(np.arange(capacity), dims.head_dim, dims.rope_theta)


def _every_layer(buffer: np.ndarray, n_layers: int) -> np.ndarray:
    return as_strided(buffer, shape=(n_layers, *buffer.shape), strides=(0, *buffer.strides), writeable=True)


def causal_hidden_states(
    decoder: Qwen3Decoder, embeds: np.ndarray, cancel: Cancel = None, *, bf16: bool = False
) -> np.ndarray:
    """Final-normed hidden states f32[n, hidden] of one causal pass over ``embeds`` f32[n, hidden].

    ``bf16`` must match the decoder's BF16 activations (the cache then holds bfloat16 bits).
    """
    cache = SharedLayerCache(decoder, max(1, embeds.shape[0]), bf16)
    return decoder.forward(embeds, cache, cancel)  # type: ignore[arg-type]
