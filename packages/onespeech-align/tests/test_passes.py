"""The aligner's one causal pass with a shared per-layer key/value buffer."""

from __future__ import annotations

import numpy as np


def test_shared_layer_pass_equals_the_cached_pass(tiny_aligner):
    from onespeech.align.passes import causal_hidden_states

    decoder = tiny_aligner._decoder
    rng = np.random.default_rng(1)
    embeds = rng.normal(scale=0.05, size=(37, decoder.dims.hidden_size)).astype(np.float32)
    np.testing.assert_array_equal(causal_hidden_states(decoder, embeds), decoder.hidden_states(embeds))
