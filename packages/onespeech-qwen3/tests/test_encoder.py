import threading

import numpy as np
import pytest

from onespeech.kernels import ops
from onespeech.qwen3.encoder import AudioEncoder, chunk_tokens, output_length, sinusoid_positions
from onespeech.qwen3.errors import RecognitionCancelled


def reference_output_length(n: int) -> int:
    """The reference's _get_feat_extract_output_lengths, spelled as it is there."""
    leave = n % 100
    feat = (leave - 1) // 2 + 1
    return ((feat - 1) // 2 + 1 - 1) // 2 + 1 + (n // 100) * 13


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 50, 99, 100, 101, 199, 200, 250, 1234, 2999, 3000, 30000])
def test_output_length_matches_reference_formula(n: int) -> None:
    assert output_length(n) == reference_output_length(n)


def test_full_chunk_gives_13_tokens() -> None:
    assert chunk_tokens(100) == 13 and chunk_tokens(1) == 1


def test_sinusoids_layout() -> None:
    pos = sinusoid_positions(5, 8)
    assert pos.dtype == np.float32 and pos.shape == (5, 8)
    assert np.array_equal(pos[0], np.array([0, 0, 0, 0, 1, 1, 1, 1], dtype=np.float32))
    inv = np.exp(-np.log(10000.0) / 3 * np.arange(4))
    np.testing.assert_allclose(pos[3, :4], np.sin(3 * inv), rtol=1e-6)
    np.testing.assert_allclose(pos[3, 4:], np.cos(3 * inv), rtol=1e-6)


@pytest.fixture(scope="module")
def encoder(tiny_weights, tiny_config) -> AudioEncoder:
    return AudioEncoder(tiny_weights, tiny_config)


def mel(n_frames: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((128, n_frames)).astype(np.float32)


@pytest.mark.parametrize("n_frames", [1, 37, 100, 250, 1000])
def test_output_shape(encoder: AudioEncoder, tiny_config, n_frames: int) -> None:
    out = encoder.forward(mel(n_frames))
    assert out.shape == (output_length(n_frames), tiny_config.audio.output_dim) and out.dtype == np.float32
    assert np.isfinite(out).all()


def test_conv_chunks_are_independent_with_positions_restarting(encoder: AudioEncoder) -> None:
    a = mel(300, seed=1)
    b = a.copy()
    b[:, 200:] = 0.5  # change only the third chunk
    ea, _ = encoder._embed_chunks(a, None)
    eb, _ = encoder._embed_chunks(b, None)
    np.testing.assert_allclose(ea[:26], eb[:26], rtol=0, atol=1e-5)
    assert not np.allclose(ea[26:], eb[26:])
    # the same frames in another chunk give the same embedding: positions restart
    c = np.concatenate([a[:, :100], a[:, :100]], axis=1)
    ec, _ = encoder._embed_chunks(c, None)
    np.testing.assert_allclose(ec[:13], ec[13:], rtol=0, atol=1e-5)  # BLAS blocking differs by ulps


def test_full_attention_reaches_across_8_seconds_windowed_does_not(encoder: AudioEncoder) -> None:
    a = mel(1500, seed=2)
    b = a.copy()
    b[:, 1400:] += 1.0  # frames beyond the first 8 s window (800 frames = 104 tokens)
    full_a, full_b = encoder.forward(a), encoder.forward(b)
    win_a, win_b = encoder.forward(a, attention="windowed"), encoder.forward(b, attention="windowed")
    assert not np.allclose(full_a[:104], full_b[:104])  # the spec's observation about the CPU path
    assert np.array_equal(win_a[:104], win_b[:104])
    assert not np.allclose(win_a[104:], win_b[104:])


def test_windowed_equals_full_within_one_window(encoder: AudioEncoder) -> None:
    x = mel(800, seed=3)
    np.testing.assert_array_equal(encoder.forward(x), encoder.forward(x, attention="windowed"))


def test_windows_are_104_tokens(encoder: AudioEncoder) -> None:
    _, window = encoder._embed_chunks(mel(250), None)
    assert window == 104
    _, window = encoder._embed_chunks(mel(50), None)  # one short chunk: 7 tokens x 8
    assert window == 56
    assert encoder._attention_blocks(250, 104) == [(0, 104), (104, 208), (208, 250)]


@pytest.mark.parametrize("bad", [np.zeros((128, 0), np.float32), np.zeros((80, 10), np.float32), np.zeros((128, 10))])
def test_bad_mel_is_refused(encoder: AudioEncoder, bad: np.ndarray) -> None:
    with pytest.raises(ValueError, match="expected float32"):
        encoder.forward(bad)


def test_unknown_attention_is_refused(encoder: AudioEncoder) -> None:
    with pytest.raises(ValueError, match="windowed"):
        encoder.forward(mel(10), attention="sliding")


def test_cancellation_between_layers(encoder: AudioEncoder, monkeypatch) -> None:
    event = threading.Event()
    calls = []
    real = encoder._layer

    def layer(*args):
        calls.append(1)
        event.set()  # cancel during the first layer
        return real(*args)

    monkeypatch.setattr(encoder, "_layer", layer)
    with pytest.raises(RecognitionCancelled):
        encoder.forward(mel(100), cancel=event)
    assert len(calls) == 1
    with pytest.raises(RecognitionCancelled):
        encoder.forward(mel(100), cancel=lambda: True)


def test_bf16_activations_are_bf16_values(tiny_weights, tiny_config) -> None:
    enc = AudioEncoder(tiny_weights, tiny_config, bf16_activations=True)
    m = mel(120)
    given = m.copy()
    out = enc.forward(m)
    assert np.array_equal(out, ops.round_bf16(out))
    assert np.array_equal(m, given), "BF16 rounds in place, but never the caller's features"
    assert not np.array_equal(m, ops.round_bf16(m))
    full = AudioEncoder(tiny_weights, tiny_config).forward(mel(120))
    assert np.abs(out - full).max() / np.abs(full).max() < 0.05
