"""Qwen3Backbone: the encoder and decoder other models (the forced aligner) build on."""

import numpy as np
import pytest

from onespeech.features import log_mel_spectrogram
from onespeech.qwen3 import Qwen3Backbone, Qwen3Options, Qwen3Recognizer
from onespeech.qwen3.decoder import KVCache, Qwen3Decoder


@pytest.fixture(scope="module")
def model_copy(tiny_checkpoint, tmp_path_factory):
    """The module's copy: loading converts in place, and the session's checkpoint must stay unconverted."""
    import shutil

    target = tmp_path_factory.mktemp("backbone") / "model"
    shutil.copytree(tiny_checkpoint, target)
    return target


@pytest.fixture(scope="module")
def recognizer(model_copy):
    with Qwen3Recognizer.load(model_copy, Qwen3Options(threads=1)) as rec:
        yield rec


@pytest.mark.parametrize("bf16", [False, True])
def test_single_pass_keeps_one_layer_and_equals_the_full_cache(tiny_weights, tiny_config, bf16) -> None:
    decoder = Qwen3Decoder(tiny_weights, tiny_config, bf16_activations=bf16)
    x = decoder.embed(np.random.default_rng(3).integers(0, 151000, 37))
    shared = KVCache(decoder.dims, 37, bf16, shared_layers=True)
    assert shared.k.shape == (decoder.dims.num_layers, 37, decoder.dims.num_kv_heads, decoder.dims.head_dim)
    assert shared.k.strides[0] == 0 and shared.v.strides[0] == 0
    full = decoder.forward(x, decoder.cache_for(37))
    assert np.array_equal(decoder.hidden_states(x), full)
    assert np.array_equal(decoder.forward(x, shared), full)


def test_recognizer_is_built_on_its_backbone(recognizer) -> None:
    assert isinstance(recognizer.backbone, Qwen3Backbone)
    assert recognizer.encoder is recognizer.backbone.encoder and recognizer.decoder is recognizer.backbone.decoder


def test_backbone_stages_are_the_recognizers(recognizer, model_copy) -> None:
    pcm = np.random.default_rng(0).standard_normal(16000).astype(np.float32) * 0.1
    mel = log_mel_spectrogram(pcm)
    backbone = Qwen3Backbone.load(model_copy, "fp32", kind="asr")
    try:
        assert backbone.config == recognizer.config
        audio = backbone.encode_audio(mel)
        assert np.array_equal(audio, recognizer.encoder.forward(mel))
        ids = np.array([1, 2, 3, 4, 5, 6, 7], dtype=np.int64)
        embeds = backbone.embed_prompt(ids, audio[:3], 2)
        assert np.array_equal(embeds[2:5], audio[:3])
        assert np.array_equal(embeds[[0, 1, 5, 6]], backbone.decoder.embed(ids)[[0, 1, 5, 6]])
        with pytest.raises(ValueError, match="do not fit"):
            backbone.embed_prompt(ids, audio[:3], 5)
        hidden = backbone.hidden_states(embeds)
        assert np.array_equal(hidden, recognizer.decoder.hidden_states(embeds))
        head = backbone.tensor(recognizer.config.output_head_name)
        assert np.array_equal(backbone.linear(hidden[-1:], head), recognizer.decoder.logits(hidden[-1:]))
    finally:
        backbone.close()
