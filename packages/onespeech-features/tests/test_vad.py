from pathlib import Path

import numpy as np
import pytest

from onespeech.features import (
    NonFiniteSampleError,
    PcmShapeError,
    SileroVad,
    VadModelError,
    convert_silero_onnx,
)
from onespeech.features.silero_convert import read_silero_onnx
from onespeech.kernels.tensorfile import write_tensor_file

TOLERANCE = 1e-4  # per-window probability, against onnxruntime


@pytest.fixture(scope="module")
def onnx_path(shared_data: Path) -> Path:
    return shared_data / "models" / "silero_vad.onnx"


@pytest.fixture(scope="module")
def vad(onnx_path: Path, tmp_path_factory: pytest.TempPathFactory) -> SileroVad:
    return SileroVad.load(onnx_path, cache_dir=tmp_path_factory.mktemp("vad-cache"))


def _case(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def test_probabilities_match_onnxruntime(vad: SileroVad, vad_cases: dict[str, Path]) -> None:
    # one SileroVad scores every case in turn: state must start fresh for each stream
    for name, path in vad_cases.items():
        case = _case(path)
        probs = vad.speech_probabilities(case["pcm"])
        assert probs.dtype == np.float32
        assert probs.shape == case["probabilities"].shape == (-(-case["pcm"].shape[0] // 512),), name
        assert np.abs(probs - case["probabilities"]).max() <= TOLERANCE, name


def test_state_is_carried_across_windows(vad: SileroVad, vad_cases: dict[str, Path]) -> None:
    # the joined case is noise + jfk + silence as one stream; scoring jfk alone differs
    joined = _case(vad_cases["joined_noise_jfk_silence"])
    alone = _case(vad_cases["jfk_flac"])["probabilities"]
    assert np.abs(vad.speech_probabilities(joined["pcm"]) - joined["probabilities"]).max() <= TOLERANCE
    offset = (16000 + 100) // 512  # the join is not window-aligned, so compare levels only
    assert not np.allclose(joined["probabilities"][offset + 1 : offset + 1 + alone.size - 2], alone[1:-1])


@pytest.mark.parametrize("sizes", [[1], [7], [511], [512], [513], [4096], [16384], [3, 1000, 40000, 17]])
def test_streaming_gives_identical_numbers_for_any_block_size(vad: SileroVad, sizes: list[int]) -> None:
    rng = np.random.default_rng(4)
    n = 16000 if sizes == [1] else 3 * 16000 + 333
    pcm = (0.2 * rng.standard_normal(n)).astype(np.float32)
    pcm[n // 3 : n // 2] *= 5.0
    whole = vad.speech_probabilities(pcm)
    stream = vad.stream()
    parts, position, k = [], 0, 0
    while position < n:
        size = sizes[k % len(sizes)]
        parts.append(stream.feed(pcm[position : position + size]))
        position += size
        k += 1
    parts.append(stream.finish())
    np.testing.assert_array_equal(np.concatenate(parts), whole)


def test_stream_reset_starts_fresh(vad: SileroVad) -> None:
    pcm = (0.1 * np.random.default_rng(5).standard_normal(20000)).astype(np.float32)
    stream = vad.stream()
    first = np.concatenate([stream.feed(pcm), stream.finish()])
    with pytest.raises(ValueError, match="finished"):
        stream.feed(pcm)
    stream.reset()
    second = np.concatenate([stream.feed(pcm), stream.finish()])
    np.testing.assert_array_equal(first, second)


def test_empty_and_exact_multiple_lengths(vad: SileroVad) -> None:
    assert vad.speech_probabilities(np.zeros(0, dtype=np.float32)).shape == (0,)
    assert vad.speech_probabilities(np.zeros(1024, dtype=np.float32)).shape == (2,)
    assert vad.speech_probabilities(np.zeros(1025, dtype=np.float32)).shape == (3,)


def test_nonfinite_samples_are_refused_with_their_stream_index(vad: SileroVad) -> None:
    pcm = np.zeros(5000, dtype=np.float32)
    pcm[4321] = np.nan
    with pytest.raises(NonFiniteSampleError, match="sample 4321"):
        vad.speech_probabilities(pcm)
    stream = vad.stream()
    stream.feed(np.zeros(1000, dtype=np.float32))
    with pytest.raises(NonFiniteSampleError, match="sample 5321 is nan"):
        stream.feed(pcm)


def test_multichannel_or_integer_input_is_refused(vad: SileroVad) -> None:
    with pytest.raises(PcmShapeError, match="1-D float32"):
        vad.speech_probabilities(np.zeros((1000, 2), dtype=np.float32))
    with pytest.raises(PcmShapeError, match="int16"):
        vad.stream().feed(np.zeros(1000, dtype=np.int16))


def test_onnx_is_converted_once_and_the_runtime_file_loads(onnx_path: Path, tmp_path: Path) -> None:
    first = SileroVad.load(onnx_path, cache_dir=tmp_path)
    [converted] = list(tmp_path.rglob("silero_vad-*.tensors"))
    stamp = converted.stat().st_mtime_ns
    second = SileroVad.load(onnx_path, cache_dir=tmp_path)
    assert converted.stat().st_mtime_ns == stamp  # reused, not converted again
    direct = SileroVad.load(converted)
    pcm = (0.1 * np.random.default_rng(6).standard_normal(8000)).astype(np.float32)
    for other in (second, direct):
        np.testing.assert_array_equal(other.speech_probabilities(pcm), first.speech_probabilities(pcm))


def test_damaged_cache_entry_is_named_then_converted_again(onnx_path: Path, tmp_path: Path) -> None:
    from onespeech.kernels.errors import ModelIntegrityError

    SileroVad.load(onnx_path, cache_dir=tmp_path)
    [converted] = list(tmp_path.rglob("silero_vad-*.tensors"))
    converted.write_bytes(converted.read_bytes()[:1000])
    with pytest.raises(ModelIntegrityError, match=f"remove {converted}"):  # verified like every runtime file
        SileroVad.load(onnx_path, cache_dir=tmp_path)
    converted.unlink()  # as the message says
    SileroVad.load(onnx_path, cache_dir=tmp_path)
    assert converted.stat().st_size > 1000


def test_converter_writes_the_branch_weights(onnx_path: Path, tmp_path: Path) -> None:
    tensors = read_silero_onnx(onnx_path)
    assert tensors["decoder.decoder.2.bias"][0] == pytest.approx(-0.6245977)
    out = convert_silero_onnx(onnx_path, tmp_path / "vad.tensors")
    from onespeech.kernels.tensorfile import read_tensor_file

    with read_tensor_file(out) as stored:
        assert stored.metadata["source_sha256"].startswith("1a153a22")
        np.testing.assert_array_equal(stored["encoder.0.reparam_conv.weight"], tensors["encoder.0.reparam_conv.weight"])


def test_file_that_is_not_a_model_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "vad.onnx"
    path.write_bytes(b"\x08\x08" + b"\xff" * 50)  # ONNX-looking start, then garbage
    with pytest.raises(VadModelError, match="vad.onnx"):
        SileroVad.load(path, cache_dir=tmp_path)
    other = tmp_path / "notes.bin"
    other.write_bytes(b"hello")
    with pytest.raises(VadModelError, match="notes.bin"):
        SileroVad.load(other)


def test_truncated_onnx_is_refused(onnx_path: Path, tmp_path: Path) -> None:
    path = tmp_path / "cut.onnx"
    path.write_bytes(onnx_path.read_bytes()[:100000])
    with pytest.raises(VadModelError, match="cut.onnx"):
        SileroVad.load(path, cache_dir=tmp_path)


def test_runtime_file_of_another_model_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.tensors"
    write_tensor_file(path, {"w": np.zeros(3, dtype=np.float32)}, {"format": "something-else"})
    with pytest.raises(VadModelError, match="not a Silero VAD runtime file"):
        SileroVad.load(path)


def test_missing_tensor_is_named() -> None:
    with pytest.raises(VadModelError, match="stft.forward_basis_buffer"):
        SileroVad({})
