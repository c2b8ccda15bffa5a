"""The GE2E encoder: front end, LSTM and partials against independent references and the oracle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from onespeech.features.resemblyzer_convert import convert_resemblyzer
from onespeech.features.speaker_encoder import (
    STEP_BLOCK,
    TENSOR_SHAPES,
    EncoderWeightsError,
    SpeakerEncoder,
    mean_embedding,
    partial_slices,
)
from onespeech.features.speaker_mel import mel_frames, normalize_volume
from onespeech.features.torch_reader import CheckpointFormatError
from onespeech_tools.torch_checkpoint_writer import Checkpoint, resemblyzer_state

CASES = ("jfk", "librispeech", "aishell", "picovoice_de", "picovoice_ja", "short_1s", "stereo_left")


def _lstm_reference(weights: dict, mels: np.ndarray) -> np.ndarray:
    """A plain float64 per-sample LSTM -> linear -> ReLU -> L2 norm (the PyTorch equations)."""
    out = []
    for x in mels.astype(np.float64):
        for layer in range(3):
            w_ih, w_hh = weights[f"lstm.weight_ih_l{layer}"], weights[f"lstm.weight_hh_l{layer}"]
            b = weights[f"lstm.bias_ih_l{layer}"] + weights[f"lstm.bias_hh_l{layer}"]
            h = np.zeros(w_hh.shape[1])
            c = np.zeros(w_hh.shape[1])
            seq = []
            for xt in x:
                i, f, g, o = np.split(w_ih @ xt + w_hh @ h + b, 4)
                sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
                c = sig(f) * c + sig(i) * np.tanh(g)
                h = sig(o) * np.tanh(c)
                seq.append(h)
            x = np.array(seq)
        raw = np.maximum(weights["linear.weight"] @ h + weights["linear.bias"], 0)
        out.append(raw / np.linalg.norm(raw))
    return np.array(out)


@pytest.mark.parametrize("steps", [12, 2 * STEP_BLOCK + 5])  # one block; three blocks, the last partial
def test_lstm_matches_a_float64_reference(steps: int) -> None:
    weights = {k: v.astype(np.float64) for k, v in resemblyzer_state(seed=1).items()}
    encoder = SpeakerEncoder(weights, threads=1)
    mels = np.random.default_rng(2).uniform(0, 2, (3, steps, 40)).astype(np.float32)
    got = encoder.embed_partials(mels)
    want = _lstm_reference(weights, mels)
    assert got.dtype == np.float32 and got.shape == (3, 256)
    # float32 products of length <= 296 over at most 3 x 37 steps: well inside 1e-5 of the unit-norm output
    assert np.abs(got - want).max() < 1e-5
    assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-6)


def test_batches_do_not_change_results() -> None:
    encoder = SpeakerEncoder(resemblyzer_state(seed=4), threads=1)
    mels = np.random.default_rng(5).uniform(0, 1, (5, 20, 40)).astype(np.float32)
    together = encoder.embed_partials(mels)
    alone = np.concatenate([encoder.embed_partials(mels[i : i + 1]) for i in range(5)])
    assert np.abs(together - alone).max() < 1e-6


def test_mel_frames_against_a_direct_dft() -> None:
    wav = np.random.default_rng(0).normal(0, 0.1, 1000).astype(np.float32)
    got = mel_frames(wav)
    assert got.shape == (1 + 1000 // 160, 40)
    padded = np.pad(wav.astype(np.float64), 200)
    n = np.arange(400)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * n / 400)
    basis = np.exp(-2j * np.pi * np.outer(np.arange(201), n) / 400)
    from onespeech.features.mel import slaney_mel_filters

    for t in (0, 3, 6):
        power = np.abs(basis @ (padded[160 * t : 160 * t + 400] * window)) ** 2
        assert np.allclose(got[t], power @ slaney_mel_filters(40), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize(
    ("n_samples", "want"),
    [
        (16000, [(0, 160)]),  # shorter than one partial: one zero-padded window
        (25600, [(0, 160)]),  # 1.6 s: the second window would cover (25600-12320)/25600 < 75 %
        (40000, [(0, 160), (77, 237)]),  # coverage of (154, 314) is 2% -> dropped
        (45000, [(0, 160), (77, 237), (154, 314)]),  # (45000 - 24640) / 25600 = 0.795 -> kept
    ],
)
def test_partial_slices(n_samples: int, want: list) -> None:
    assert partial_slices(n_samples) == want


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="min_coverage"):
        partial_slices(1000, min_coverage=0)
    with pytest.raises(ValueError, match="rate"):
        partial_slices(1000, rate=0.1)
    encoder = SpeakerEncoder(resemblyzer_state(seed=0), threads=1)
    with pytest.raises(ValueError, match="shape"):
        encoder.embed_partials(np.zeros((2, 10, 39), np.float32))
    bad = resemblyzer_state(seed=0)
    bad["linear.weight"] = bad["linear.weight"][:, :10]
    with pytest.raises(EncoderWeightsError, match=r"linear.weight has shape \(256, 10\)"):
        SpeakerEncoder(bad)
    del bad["linear.weight"]
    with pytest.raises(EncoderWeightsError, match="lack linear.weight"):
        SpeakerEncoder(bad)


def test_normalize_volume_only_raises() -> None:
    quiet = np.full(100, 0.001, np.float32)
    loud = np.full(100, 0.5, np.float32)
    rms_db = lambda w: 20 * np.log10(np.sqrt(np.mean((w * 32767.0) ** 2)) / 32767)  # noqa: E731
    assert abs(rms_db(normalize_volume(quiet)) + 30) < 1e-4
    assert np.array_equal(normalize_volume(loud), loud)
    assert np.array_equal(normalize_volume(np.zeros(10, np.float32)), np.zeros(10, np.float32))


def test_converter_round_trip(tmp_path: Path) -> None:
    state = resemblyzer_state(seed=7)
    src = Checkpoint.from_arrays(state).write_legacy(tmp_path / "pretrained.pt")
    dst = convert_resemblyzer(src, tmp_path / "enc.tensors")
    encoder = SpeakerEncoder.load(dst, threads=1)
    direct = SpeakerEncoder(state, threads=1)
    wav = np.random.default_rng(1).normal(0, 0.05, 20000).astype(np.float32)
    assert np.array_equal(encoder.embed_utterance(wav), direct.embed_utterance(wav))


def test_converter_refuses_a_checkpoint_without_the_encoder(tmp_path: Path) -> None:
    state = resemblyzer_state(seed=7)
    del state["lstm.weight_hh_l1"]
    src = Checkpoint.from_arrays(state).write_zip(tmp_path / "pretrained.pt")
    with pytest.raises(CheckpointFormatError, match="lacks tensor 'lstm.weight_hh_l1'"):
        convert_resemblyzer(src, tmp_path / "enc.tensors")
    state = resemblyzer_state(seed=7)
    state["linear.bias"] = state["linear.bias"].astype(np.float64)
    src = Checkpoint.from_arrays(state).write_zip(tmp_path / "pretrained64.pt")
    with pytest.raises(CheckpointFormatError, match="needs float32"):
        convert_resemblyzer(src, tmp_path / "enc.tensors")


# -- parity with resemblyzer 0.1.4 (observations from tools/oracles/speakers/oracle_resemblyzer.py) --
@pytest.fixture(scope="module")
def real_encoder(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> SpeakerEncoder:
    out = tmp_path_factory.mktemp("resemblyzer") / "enc.tensors"
    return SpeakerEncoder.load(
        convert_resemblyzer(shared_data / "models" / "resemblyzer_pretrained.pt", out), threads=1
    )


def _observation(oracle_observations: Path, case: str) -> dict:
    path = oracle_observations / "resemblyzer" / f"{case}.npz"
    if not path.is_file():
        pytest.skip(f"needs {path} (run `tox -e oracle` with the shared data)")
    return dict(np.load(path))


@pytest.mark.parametrize("case", CASES)
def test_mel_matches_resemblyzer(oracle_observations: Path, case: str) -> None:
    obs = _observation(oracle_observations, case)
    got = mel_frames(obs["wav"])
    assert got.shape == obs["mel"].shape
    assert np.abs(got - obs["mel"]).max() <= 1e-5
    assert np.array_equal(normalize_volume(obs["raw"]), obs["normalized"])


@pytest.mark.parametrize("case", CASES)
def test_embeddings_match_resemblyzer(
    oracle_observations: Path, real_encoder: SpeakerEncoder, case: str
) -> None:
    obs = _observation(oracle_observations, case)
    mels, slices = real_encoder.utterance_mels(obs["wav"])
    assert [[a * 160, b * 160] for a, b in slices] == obs["slices"].tolist()
    partials = real_encoder.embed_partials(mels)
    assert np.abs(partials - obs["partial_embeds"]).max() <= 1e-5
    assert np.abs(mean_embedding(partials) - obs["embed"]).max() <= 1e-5
    assert np.abs(real_encoder.embed_utterance(obs["wav"]) - obs["embed"]).max() <= 1e-5


def test_tensor_names_cover_the_network() -> None:
    assert len(TENSOR_SHAPES) == 14
