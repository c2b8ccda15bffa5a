"""INT8 precision: conversion (staged, verified, atomic), the quantized layers, recognition on every kernel variant."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from onespeech.kernels import cpu, ops
from onespeech.kernels.errors import ModelIntegrityError
from onespeech.kernels.int8matrix import SCALE_SUFFIX, Int8Matrix, matrix
from onespeech.kernels.store import sha256_file
from onespeech.qwen3 import Qwen3Options, Qwen3Recognizer
from onespeech.qwen3 import convert as convert_module
from onespeech.qwen3.config import EMBED_NAME, LM_HEAD_NAME
from onespeech.qwen3.runtime import ensure_runtime, has_runtime, load_model, load_runtime
from onespeech.qwen3.safetensors import open_checkpoint
from onespeech_tools.signals import tone

# the SIMD variants this CPU runs, each compared with the generic one
VARIANTS = [v for v in cpu.supported_variants() if v != "generic"]


@pytest.fixture(scope="module")
def int8_dir(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("int8") / "model"
    shutil.copytree(tiny_checkpoint, directory)
    ensure_runtime(directory, "int8")
    return directory


@pytest.fixture()
def fresh_dir(tiny_checkpoint: Path, tmp_path: Path) -> Path:
    directory = tmp_path / "model"
    shutil.copytree(tiny_checkpoint, directory)
    return directory


def _widened(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def test_linear_weights_become_per_channel_codes_the_rest_keeps_its_bf16_bits(int8_dir: Path) -> None:
    with load_model(int8_dir, "int8") as model, open_checkpoint(int8_dir) as ckpt:
        assert model.precision == "int8" and not has_runtime(int8_dir, "fp32")
        config = model.config
        quantized = [n for n in ckpt if convert_module.int8_quantized(n, ckpt[n].shape, config)]
        # every Linear of the encoder (conv_out and the projector included), of the decoder layers, and the head
        assert "thinker.audio_tower.conv_out.weight" in quantized and "thinker.audio_tower.proj2.weight" in quantized
        assert "thinker.model.layers.4.mlp.down_proj.weight" in quantized
        assert LM_HEAD_NAME in quantized and EMBED_NAME not in quantized
        assert set(model) == set(ckpt) | {n + SCALE_SUFFIX for n in quantized}
        for name in ckpt:
            # the head file holds the head the reference uses: the tied embedding (test_runtime)
            source = config.output_head_name if name == LM_HEAD_NAME else name
            if name in quantized:
                codes, scale = ops.quantize_int8(_widened(ckpt[source]))
                w = matrix(model, name)
                assert isinstance(w, Int8Matrix)
                assert np.array_equal(w.codes, codes) and np.array_equal(w.scale, scale)
            else:
                assert model[name].dtype == np.uint16 and np.array_equal(model[name], ckpt[name]), name
        assert config.output_head_name == EMBED_NAME
        assert convert_module.runtime_head_name(config, "int8") == LM_HEAD_NAME
        assert convert_module.runtime_head_name(config, "bf16") == EMBED_NAME


def test_the_aligners_head_stays_bf16_under_int8(shared_data: Path, tmp_path: Path) -> None:
    from onespeech_tools.checkpoints import make_checkpoint

    directory = make_checkpoint(tmp_path / "aligner", "tiny", 7, kind="aligner", data_dir=shared_data)
    ensure_runtime(directory, "int8")
    with load_model(directory, "int8") as model, open_checkpoint(directory) as ckpt:
        assert model.config.classify_num is not None
        assert model[LM_HEAD_NAME].dtype == np.uint16 and np.array_equal(model[LM_HEAD_NAME], ckpt[LM_HEAD_NAME])
        assert LM_HEAD_NAME + SCALE_SUFFIX not in set(model)
        assert isinstance(matrix(model, "thinker.model.layers.0.mlp.up_proj.weight"), Int8Matrix)
        assert convert_module.runtime_head_name(model.config, "int8") == LM_HEAD_NAME  # untied: its own head


def test_conversion_is_deterministic_and_beside_other_precisions(int8_dir: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    shutil.copytree(int8_dir, again)
    for p in again.glob("*int8*"):
        p.unlink()
    ensure_runtime(again, "int8")
    for p in sorted(int8_dir.glob("int8-*.ost")):
        assert sha256_file(again / p.name) == sha256_file(p), p.name
    with load_model(again, "bf16") as bf16, load_runtime(again, "int8") as int8:
        assert bf16[EMBED_NAME].dtype == np.uint16 and int8["thinker.model.layers.0.mlp.up_proj.weight"].dtype == np.int8


def _flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))
    time.sleep(0.01)
    os.utime(path)  # a new mtime even on coarse-clock filesystems


def test_corrupt_int8_file_is_refused_by_name_then_reconverted(fresh_dir: Path) -> None:
    load_model(fresh_dir, "int8").close()  # converted, digests checked once
    target = fresh_dir / "int8-decoder-00.ost"
    before = sha256_file(target)
    _flip_byte(target, target.stat().st_size - 100)  # inside the last tensor's int8 codes
    with pytest.raises(ModelIntegrityError) as info:
        load_model(fresh_dir, "int8")
    assert info.value.path == str(target) and f"remove {target}" in str(info.value)
    os.remove(info.value.path)
    with load_model(fresh_dir, "int8") as model:  # converted again from the publisher files
        assert model["thinker.model.layers.0.self_attn.q_proj.weight"].dtype == np.int8
    assert sha256_file(target) == before


def test_files_of_an_older_converter_are_converted_again(fresh_dir: Path) -> None:
    """An INT8 install from before the int8 head (converter 1, its head bf16) is converted again on
    load; runtime files alone, with no publisher files to convert, are refused by name."""
    from onespeech.kernels.store import read_manifest, write_manifest

    load_model(fresh_dir, "int8").close()
    for name in ("manifest.int8.json", "install.int8.json"):  # the record lists the manifest: hashed anew
        old = read_manifest(fresh_dir, name=name)
        write_manifest(fresh_dir, list(old.files), name=name,
                       metadata={**old.metadata, "converter": "onespeech.qwen3.convert 1"})  # fmt: skip
    runtime_only = fresh_dir.parent / "runtime-only"
    shutil.copytree(fresh_dir, runtime_only)
    for path in runtime_only.glob("model*.safetensors*"):
        path.unlink()
    with pytest.raises(ModelIntegrityError, match="written by converter 'onespeech.qwen3.convert 1'") as info:
        load_model(runtime_only, "int8")
    assert info.value.path == str(runtime_only / "manifest.int8.json")
    with Qwen3Recognizer.load(fresh_dir, Qwen3Options(precision="int8", threads=1)) as rec:
        assert isinstance(rec.decoder._head, Int8Matrix)
    for name in ("install.int8.json", "manifest.int8.json"):
        assert read_manifest(fresh_dir, name=name).metadata["converter"] == convert_module.CONVERTER_ID


def test_failed_int8_conversion_installs_nothing(fresh_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = convert_module.write_tensor_file

    def failing(path, tensors, metadata=None):  # type: ignore[no-untyped-def]
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk full (simulated)")
        real(path, tensors, metadata)

    monkeypatch.setattr(convert_module, "write_tensor_file", failing)
    before = sorted(p.name for p in fresh_dir.iterdir())
    with pytest.raises(OSError, match="disk full"):
        ensure_runtime(fresh_dir, "int8")
    assert sorted(p.name for p in fresh_dir.iterdir()) == before and not has_runtime(fresh_dir, "int8")


@pytest.mark.parametrize("fused", [True, False])
def test_int8_layers_run_through_linear_int8(int8_dir: Path, fused: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []
    real = ops.linear_int8

    def counting(x, w, w_scale, bias=None):  # type: ignore[no-untyped-def]
        calls.append(w.shape)
        return real(x, w, w_scale, bias)

    monkeypatch.setattr(ops, "linear_int8", counting)
    if not fused:
        monkeypatch.setattr(ops, "_kernels", None)  # no compiled kernels: no fused layers
    with Qwen3Recognizer.load(int8_dir, Qwen3Options(precision="int8", threads=1, max_new_tokens=2)) as rec:
        cfg = rec.config
        assert (rec.decoder._fused is not None) == fused and not rec.backbone.bf16_activations
        ids = rec.generate(tone(1.0), max_new_tokens=2)
    assert len(ids) == 2
    layers_per_token = 7 * cfg.text.num_layers
    # + conv_out, proj1, proj2, and the two convolutions over many channels (1 s: one batch of chunks)
    encoder = 6 * cfg.audio.num_layers + 3 + 2
    # one encoder pass, the prefill and one more token (the second choice needs the first's step),
    # whose layers are fused calls where the kernels are compiled; the head after each
    assert len(calls) == encoder + (1 if fused else 2) * layers_per_token + 2
    c = cfg.audio.downsample_hidden_size
    assert calls.count((c, 9 * c)) == 2  # conv2d2 and conv2d3 on their patches
    assert (c, 9) not in calls  # the first convolution (one input channel) stays float
    assert calls.count((cfg.output_rows, cfg.text.hidden_size)) == 2  # the head is an int8 product too


@pytest.mark.parametrize("variant", ["generic", *VARIANTS])
def test_int8_fused_decode_gives_the_op_paths_ids_and_logits(
    int8_dir: Path, variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = cpu.load_variant(variant)
    if module is None:
        pytest.skip(f"the {variant} kernels are not built here")
    monkeypatch.setattr(ops, "_kernels", module)
    pcm = tone(1.5)
    with Qwen3Recognizer.load(int8_dir, Qwen3Options(precision="int8", threads=2)) as rec:
        assert rec.decoder._fused is not None
        embeds = rec.chunk_prompt(pcm)
        results, generations = [], []
        for _ in ("fused", "op by op"):
            results.append(rec.recognize(pcm, None, 12, keep_first_logits=True).generation)
            generations.append(rec.decoder.generate(embeds, 12, eos_ids=(), keep_logits=True))
            rec.decoder._fused = None  # from now on every step op by op, through ops.linear_int8
    assert results[0].ids == results[1].ids and results[0].finished == results[1].finished
    assert results[0].first_logits is not None and results[1].first_logits is not None
    assert np.array_equal(results[0].first_logits.view(np.uint32), results[1].first_logits.view(np.uint32))
    fused, plain = generations
    assert fused.ids == plain.ids and len(fused.ids) == 12
    assert fused.logits is not None and plain.logits is not None
    for step, (a, b) in enumerate(zip(fused.logits, plain.logits, strict=True)):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), f"logits of choice {step}"


def test_int8_is_close_to_fp32(int8_dir: Path, tiny_checkpoint: Path, tmp_path: Path) -> None:
    from onespeech.features import log_mel_spectrogram

    fp32_dir = tmp_path / "fp32"
    shutil.copytree(tiny_checkpoint, fp32_dir)
    mel = log_mel_spectrogram(tone(1.0))
    with Qwen3Recognizer.load(int8_dir, Qwen3Options(precision="int8", threads=1)) as int8, \
            Qwen3Recognizer.load(fp32_dir, Qwen3Options(threads=1)) as fp32:  # fmt: skip
        got, want = int8.encoder.forward(mel), fp32.encoder.forward(mel)
    assert not np.array_equal(got, want)
    assert np.abs(got - want).max() / np.abs(want).max() < 0.1


@pytest.mark.parametrize("variant", VARIANTS)
def test_int8_ids_are_the_same_on_the_generic_and_simd_variants(
    int8_dir: Path, variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run(name: str) -> tuple[list[int], np.ndarray]:
        module = cpu.load_variant(name)
        if module is None:
            pytest.skip(f"the {name} kernels are not built here")
        monkeypatch.setattr(ops, "_kernels", module)
        with Qwen3Recognizer.load(int8_dir, Qwen3Options(precision="int8", threads=2)) as rec:
            result = rec.recognize(tone(1.5), None, 6, keep_first_logits=True)
            assert result.generation.first_logits is not None
            return result.generation.ids, result.generation.first_logits

    want_ids, want_logits = run("generic")
    ids, logits = run(variant)
    assert ids == want_ids
    # The int8 products give the same bits on every variant, but the float operators between them
    # (attention, the head) may sum in another order, and where a last-bit difference meets a
    # rounding boundary of the next product's activation codes it becomes a whole code step: the
    # logits then differ by more than any rounding bound (1e-2 of their range was seen here), so
    # no tolerance is asserted on them; what must hold is the same choices (above) and the same
    # bits wherever no such operator came first (below).
    assert logits.shape == want_logits.shape and np.isfinite(logits).all()


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("seconds", [0.05, 1.0, 2.5])  # one short chunk; one full; three, the last shorter
def test_int8_convolutions_give_the_same_bits_on_every_variant(
    int8_dir: Path, variant: str, seconds: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The front end up to the encoder layers: the first convolution and GELU give the same bits
    everywhere, so the int8 convolutions after them see the same codes, and so does conv_out."""
    from onespeech.features import log_mel_spectrogram

    mel = log_mel_spectrogram(tone(seconds))

    def front(name: str) -> tuple[np.ndarray, np.ndarray]:
        module = cpu.load_variant(name)
        if module is None:
            pytest.skip(f"the {name} kernels are not built here")
        monkeypatch.setattr(ops, "_kernels", module)
        with Qwen3Recognizer.load(int8_dir, Qwen3Options(precision="int8", threads=2)) as rec:
            enc = rec.encoder
            assert all(isinstance(k, Int8Matrix) for k in enc._conv[1:])
            assert isinstance(enc._conv[0], np.ndarray)
            chunks = -(-mel.shape[1] // enc.chunk_frames)
            x = np.zeros((chunks, mel.shape[0], enc.chunk_frames, 1), np.float32)
            for j in range(chunks):
                part = mel[:, j * enc.chunk_frames : (j + 1) * enc.chunk_frames]
                x[j, :, : part.shape[1], 0] = part
            flat = enc._conv_stack(x)
            return flat, enc._linear(flat.reshape(-1, flat.shape[-1]), "conv_out")

    want = front("generic")
    got = front(variant)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))
