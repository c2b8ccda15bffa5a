"""Seeded random checkpoints in the publisher's exact layout (numpy only).

The published Qwen3-ASR / Qwen3-ForcedAligner weights cannot be downloaded on our
machines, so tests, parity oracles and benchmarks run on checkpoints built here:
the publisher's file set (``config.json``, ``generation_config.json``,
``preprocessor_config.json``, ``chat_template.json``, tokenizer files copied from
``shared/data`` at generation time) and ``model.safetensors`` in bfloat16 with
exactly the published tensor names and shapes.

- ``tiny``: the real config with small widths and few layers but the real
  vocabulary size and token ids (default tests, CI parity).
- ``0.6b`` / ``1.7b``: the released shapes (612 tensors / 938,008,576 parameters;
  708 / 2,349,217,408 in two shards with an index, byte-for-byte the published
  file sizes).

Weights are drawn so that parity on them means something (DESIGN.md, "Testing
without the real weights"): matrices with std 1/sqrt(fan_in), small token
embeddings, q_norm/k_norm weights scaled up (x2), decoder residual outputs scaled by
1/sqrt(2 * layers) so a 28-layer decoder stays well conditioned in float32, and an
``lm_head`` that differs from
the embedding even though ``tie_word_embeddings`` is true (the published
checkpoints also store a separate head; see docs/checkpoints.md for which matrix
the reference uses).

Every tensor has its own random stream derived from ``(seed, tensor name)``, and
tensors are generated and written one row block at a time, so the same seed gives
identical bytes and a full-size checkpoint never sits in memory.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from onespeech_tools import safetensors_writer
from onespeech_tools.data import shared_data_dir

SIZES = ("tiny", "0.6b", "1.7b")
KINDS = ("asr", "aligner")

# released configuration folder per (kind, size); tiny derives from the 0.6B one
_CONFIG_FOLDERS = {
    ("asr", "0.6b"): "Qwen3-ASR-0.6B",
    ("asr", "1.7b"): "Qwen3-ASR-1.7B",
    ("asr", "tiny"): "Qwen3-ASR-0.6B",
    ("aligner", "0.6b"): "Qwen3-ForcedAligner-0.6B",
    ("aligner", "tiny"): "Qwen3-ForcedAligner-0.6B",
}

# small publisher files copied verbatim from the released configuration folder
_SMALL_FILES = ("generation_config.json", "preprocessor_config.json", "chat_template.json", "tokenizer_config.json")
# tokenizer files shared by all three models
_TOKENIZER_FILES = ("vocab.json", "merges.txt")

# Tiny widths. Audio: 3 layers (so per-layer code paths repeat), d_model 64 with 4
# heads, conv channels 16 (conv_out input 16 * 128/8 = 256). Text: 5 layers so the
# runtime's four-layers-per-file split gets a second file, GQA 4:2, head_dim 32.
# The real vocabulary, token ids, windows (n_window 50, n_window_infer 800) and
# rope theta are kept; mrope_section is scaled to head_dim 32 ([24, 20, 20] / 4).
_TINY_AUDIO = {
    "d_model": 64,
    "encoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "encoder_layers": 3,
    "num_hidden_layers": 3,
    "downsample_hidden_size": 16,
    "output_dim": 64,
}
_TINY_TEXT = {
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "intermediate_size": 128,
    "num_hidden_layers": 5,
}
_TINY_MROPE_SECTION = [6, 5, 5]

# The published 1.7B checkpoint splits its name-sorted tensors before
# "thinker.model.layers.5.mlp.gate_proj.weight": shard 1 holds 4,220,240,640 data
# bytes. Any limit in [4,220,240,640, 4,245,406,464) reproduces both shard sizes
# (4,220,320,824 and 478,200,688 bytes) exactly.
SHARD_MAX_BYTES = 4_230_000_000
_SHARDED_SIZES = ("1.7b",)

# Weight scales (see the module docstring for why).
EMBED_STD = 0.05
NORM_JITTER = 0.1
# x2, not the x4 DESIGN.md mentions: x4 makes a 28-layer decoder's attention so sharp
# that float32 rounding is amplified ~1e3 (measured: reference float32 vs float64
# logits 1.8e-3 apart); x2 with the residual scaling below gives 2e-6 and still
# varied greedy output (x1 collapses into one repeated token).
QK_NORM_SCALE = 2.0
BIAS_STD = 0.05

# Decoder residual-branch outputs (o_proj, down_proj) get std gain/sqrt(2 * layers)
# on top of 1/sqrt(fan_in) (GPT-2's depth scaling), which keeps a deep random
# decoder from amplifying rounding noise (see QK_NORM_SCALE).
DECODER_RESIDUAL_GAIN = 1.0

# elements generated per block: bounds memory for the 150k-row embeddings
_BLOCK_ELEMENTS = 1 << 22


class CheckpointError(ValueError):
    """A request the generator cannot satisfy (unknown size or kind, missing data)."""


@dataclass(frozen=True)
class TensorSpec:
    """Name, shape and initialisation rule of one published tensor."""

    name: str
    shape: tuple[int, ...]
    init: str  # "matrix" | "embed" | "bias" | "norm" | "qknorm"
    gain: float = 1.0  # extra factor on a matrix's 1/sqrt(fan_in) std

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def _check(size: str, kind: str) -> None:
    if kind not in KINDS:
        raise CheckpointError(f"unknown checkpoint kind {kind!r}; allowed: {', '.join(KINDS)}")
    if size not in SIZES:
        raise CheckpointError(f"unknown checkpoint size {size!r}; allowed: {', '.join(SIZES)}")
    if (kind, size) not in _CONFIG_FOLDERS:
        raise CheckpointError(f"no {size} {kind} model exists; the aligner comes in: tiny, 0.6b")


def model_config(size: str, kind: str = "asr", data_dir: Path | None = None) -> dict:
    """The ``config.json`` content for ``size``/``kind`` as a dict."""
    _check(size, kind)
    folder = (data_dir or shared_data_dir()) / "configs" / _CONFIG_FOLDERS[(kind, size)]
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if size == "tiny":
        config = _tiny(config)
    return config


def _tiny(config: dict) -> dict:
    config = copy.deepcopy(config)
    thinker = config["thinker_config"]
    thinker["audio_config"].update(_TINY_AUDIO)
    text = thinker["text_config"]
    text.update(_TINY_TEXT)
    text["rope_scaling"]["mrope_section"] = list(_TINY_MROPE_SECTION)
    # the projector must land in the decoder's width
    thinker["audio_config"]["output_dim"] = text["hidden_size"]
    return config


def tensor_specs(config: dict) -> list[TensorSpec]:
    """Every published tensor of a checkpoint with this config, sorted by name.

    Mirrors the reference modules (qwen_asr.core.transformers_backend): the AuT
    audio tower (three stride-2 3x3 convolutions with bias, conv_out without bias,
    16 tensors per encoder layer, ln_post, proj1, proj2), the Qwen3 decoder with
    q/k norms, and ``lm_head`` (vocab rows for ASR, ``classify_num`` rows for the
    forced aligner).
    """
    thinker = config["thinker_config"]
    audio = thinker["audio_config"]
    text = thinker["text_config"]
    specs: list[TensorSpec] = []

    def add(name: str, shape: tuple[int, ...], init: str, gain: float = 1.0) -> None:
        specs.append(TensorSpec(name, tuple(int(s) for s in shape), init, gain))

    a = "thinker.audio_tower."
    d, ffn, ch = audio["d_model"], audio["encoder_ffn_dim"], audio["downsample_hidden_size"]
    add(a + "conv2d1.weight", (ch, 1, 3, 3), "matrix")
    add(a + "conv2d1.bias", (ch,), "bias")
    for i in (2, 3):
        add(a + f"conv2d{i}.weight", (ch, ch, 3, 3), "matrix")
        add(a + f"conv2d{i}.bias", (ch,), "bias")
    # three stride-2 convolutions take the mel bins to ceil(ceil(ceil(n/2)/2)/2)
    freq = audio["num_mel_bins"]
    for _ in range(3):
        freq = (freq + 1) // 2
    add(a + "conv_out.weight", (d, ch * freq), "matrix")
    for layer in range(audio["encoder_layers"]):
        p = f"{a}layers.{layer}."
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            add(p + f"self_attn.{proj}.weight", (d, d), "matrix")
            add(p + f"self_attn.{proj}.bias", (d,), "bias")
        for norm in ("self_attn_layer_norm", "final_layer_norm"):
            add(p + f"{norm}.weight", (d,), "norm")
            add(p + f"{norm}.bias", (d,), "bias")
        add(p + "fc1.weight", (ffn, d), "matrix")
        add(p + "fc1.bias", (ffn,), "bias")
        add(p + "fc2.weight", (d, ffn), "matrix")
        add(p + "fc2.bias", (d,), "bias")
    add(a + "ln_post.weight", (d,), "norm")
    add(a + "ln_post.bias", (d,), "bias")
    add(a + "proj1.weight", (d, d), "matrix")
    add(a + "proj1.bias", (d,), "bias")
    add(a + "proj2.weight", (audio["output_dim"], d), "matrix")
    add(a + "proj2.bias", (audio["output_dim"],), "bias")

    m = "thinker.model."
    hidden, inter = text["hidden_size"], text["intermediate_size"]
    head_dim = text.get("head_dim") or hidden // text["num_attention_heads"]
    q_out = text["num_attention_heads"] * head_dim
    kv_out = text["num_key_value_heads"] * head_dim
    add(m + "embed_tokens.weight", (text["vocab_size"], hidden), "embed")
    residual = DECODER_RESIDUAL_GAIN / math.sqrt(2 * text["num_hidden_layers"])
    for layer in range(text["num_hidden_layers"]):
        p = f"{m}layers.{layer}."
        add(p + "self_attn.q_proj.weight", (q_out, hidden), "matrix")
        add(p + "self_attn.k_proj.weight", (kv_out, hidden), "matrix")
        add(p + "self_attn.v_proj.weight", (kv_out, hidden), "matrix")
        add(p + "self_attn.o_proj.weight", (hidden, q_out), "matrix", residual)
        add(p + "self_attn.q_norm.weight", (head_dim,), "qknorm")
        add(p + "self_attn.k_norm.weight", (head_dim,), "qknorm")
        add(p + "mlp.gate_proj.weight", (inter, hidden), "matrix")
        add(p + "mlp.up_proj.weight", (inter, hidden), "matrix")
        add(p + "mlp.down_proj.weight", (hidden, inter), "matrix", residual)
        add(p + "input_layernorm.weight", (hidden,), "norm")
        add(p + "post_attention_layernorm.weight", (hidden,), "norm")
    add(m + "norm.weight", (hidden,), "norm")
    head_rows = thinker["classify_num"] if thinker.get("model_type") == "qwen3_forced_aligner" else text["vocab_size"]
    add("thinker.lm_head.weight", (head_rows, hidden), "matrix")
    return sorted(specs, key=lambda spec: spec.name)


def _rng(seed: int, name: str) -> np.random.Generator:
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    words = [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, *words])))


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 bit patterns (round to nearest even), as uint16."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> np.uint32(16)) & np.uint32(1)) + np.uint32(0x7FFF)
    return ((bits + rounding) >> np.uint32(16)).astype(np.uint16)


def tensor_blocks(spec: TensorSpec, seed: int) -> Iterator[np.ndarray]:
    """The tensor's bfloat16 values (uint16) as consecutive row blocks."""
    rng = _rng(seed, spec.name)
    rows = spec.shape[0]
    row_size = spec.numel // rows
    block_rows = max(1, _BLOCK_ELEMENTS // row_size)
    for start in range(0, rows, block_rows):
        count = min(block_rows, rows - start)
        shape = (count, *spec.shape[1:])
        noise = rng.standard_normal(shape, dtype=np.float32)
        yield f32_to_bf16(_scale(spec, noise))


def _scale(spec: TensorSpec, noise: np.ndarray) -> np.ndarray:
    if spec.init == "matrix":
        fan_in = spec.numel // spec.shape[0]
        return noise * np.float32(spec.gain / math.sqrt(fan_in))
    if spec.init == "embed":
        return noise * np.float32(EMBED_STD)
    if spec.init == "bias":
        return noise * np.float32(BIAS_STD)
    if spec.init == "norm":
        return np.float32(1.0) + noise * np.float32(NORM_JITTER)
    if spec.init == "qknorm":
        return np.float32(QK_NORM_SCALE) * (np.float32(1.0) + noise * np.float32(NORM_JITTER))
    raise ValueError(f"unknown init rule {spec.init!r}")


def tensor_array(spec: TensorSpec, seed: int) -> np.ndarray:
    """The whole tensor (bfloat16 bits as uint16); for tests and small tensors."""
    return np.concatenate(list(tensor_blocks(spec, seed)), axis=0).reshape(spec.shape)


def shard_specs(specs: list[TensorSpec], size: str) -> list[list[TensorSpec]]:
    """Split name-sorted specs into shards as the publisher did (one shard below 1.7B)."""
    if size not in _SHARDED_SIZES:
        return [specs]
    shards: list[list[TensorSpec]] = [[]]
    used = 0
    for spec in specs:
        nbytes = 2 * spec.numel
        if used + nbytes > SHARD_MAX_BYTES and shards[-1]:
            shards.append([])
            used = 0
        shards[-1].append(spec)
        used += nbytes
    return shards


def shard_names(count: int) -> list[str]:
    if count == 1:
        return ["model.safetensors"]
    return [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]


def plan_shards(specs: list[TensorSpec], size: str) -> list[tuple[str, safetensors_writer.FilePlan, list[TensorSpec]]]:
    """Each weight file's name, planned header and tensors."""
    shards = shard_specs(specs, size)
    names = shard_names(len(shards))
    return [
        (name, safetensors_writer.plan_file((s.name, "BF16", s.shape) for s in shard), shard)
        for name, shard in zip(names, shards, strict=True)
    ]


def index_json(plans: list[tuple[str, safetensors_writer.FilePlan, list[TensorSpec]]]) -> str:
    """``model.safetensors.index.json`` as transformers 4.57 writes it."""
    weight_map = {spec.name: name for name, _, shard in plans for spec in shard}
    total_size = sum(plan.data_size for _, plan, _ in plans)
    total_parameters = sum(spec.numel for _, _, shard in plans for spec in shard)
    index = {"metadata": {"total_parameters": total_parameters, "total_size": total_size}, "weight_map": weight_map}
    return json.dumps(index, indent=2, sort_keys=True) + "\n"


def make_checkpoint(
    out_dir: str | os.PathLike[str],
    size: str,
    seed: int = 0,
    kind: str = "asr",
    data_dir: str | os.PathLike[str] | None = None,
    end_scale: float | None = None,
    max_slot: int | None = None,
) -> Path:
    """Write a publisher-layout checkpoint with seeded random bfloat16 weights.

    Parameters
    ----------
    out_dir
        Folder to fill (created if missing; existing publisher files are overwritten).
    size
        ``"tiny"``, ``"0.6b"`` or ``"1.7b"`` (the aligner: ``"tiny"`` or ``"0.6b"``).
    seed
        Same seed, same bytes.
    kind
        ``"asr"`` (Qwen3-ASR) or ``"aligner"`` (Qwen3-ForcedAligner).
    data_dir
        The shared data folder holding ``configs/`` and ``tokenizer/`` (default:
        :func:`shared_data_dir`).
    end_scale
        ASR only: make greedy decoding end. The embedding rows of the end tokens
        (``generation_config.json``'s ``eos_token_id``; the reference's output rows,
        as the head is tied) become ``end_scale`` times the final norm's weight, so
        an end token's logit is ``end_scale * sum_i w_i^2 h_i / rms(h)``: large
        whenever the last hidden state leans the norm weight's way, which random
        weights do every few steps (see docs/checkpoints.md). None: untouched.
    max_slot
        Aligner only: zero the timestamp head's rows from ``max_slot`` on, so the
        predicted slots fall within the first ``max_slot`` x 80 ms (random heads
        otherwise predict times beyond a short clip's end, which the aligner
        discards). None: untouched.

    Returns
    -------
    Path
        ``out_dir``.
    """
    _check(size, kind)
    data = Path(data_dir) if data_dir is not None else shared_data_dir()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    source = data / "configs" / _CONFIG_FOLDERS[(kind, size)]
    if size == "tiny":
        config = model_config(size, kind, data)
        (out / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    else:
        config = json.loads((source / "config.json").read_text(encoding="utf-8"))
        shutil.copyfile(source / "config.json", out / "config.json")
    for name in _SMALL_FILES:
        shutil.copyfile(source / name, out / name)
    for name in _TOKENIZER_FILES:
        shutil.copyfile(data / "tokenizer" / name, out / name)

    specs = tensor_specs(config)
    edits: dict[str, dict[int, np.ndarray]] = {}
    if end_scale is not None:
        edits[_EMBED_NAME] = _end_rows(specs, seed, source, end_scale)
    if max_slot is not None:
        edits[_HEAD_NAME] = _zero_rows_from(specs, kind, max_slot)
    plans = plan_shards(specs, size)
    for name, plan, shard in plans:
        chunks = ((spec.name, block) for spec in shard for block in _edited_blocks(spec, seed, edits.get(spec.name)))
        safetensors_writer.write_file(out / name, plan, chunks)
    if len(plans) > 1:
        (out / "model.safetensors.index.json").write_text(index_json(plans), encoding="utf-8")
    return out


_EMBED_NAME = "thinker.model.embed_tokens.weight"
_FINAL_NORM_NAME = "thinker.model.norm.weight"
_HEAD_NAME = "thinker.lm_head.weight"


def _end_rows(specs: list[TensorSpec], seed: int, source: Path, end_scale: float) -> dict[int, np.ndarray]:
    """Embedding rows (bfloat16 bits) that make the end tokens win greedy decoding every few steps."""
    if not math.isfinite(end_scale) or end_scale <= 0:
        raise CheckpointError(f"end_scale={end_scale} must be a positive finite number (0.1 in the tests)")
    by_name = {spec.name: spec for spec in specs}
    if by_name[_EMBED_NAME].shape[0] != by_name[_HEAD_NAME].shape[0]:
        raise CheckpointError("end_scale needs a tied ASR checkpoint (the aligner's head is not the embedding)")
    generation = json.loads((source / "generation_config.json").read_text(encoding="utf-8"))
    eos = generation["eos_token_id"]
    norm = tensor_array(by_name[_FINAL_NORM_NAME], seed).astype(np.uint32) << np.uint32(16)
    row = f32_to_bf16(norm.view(np.float32) * np.float32(end_scale))
    return {int(i): row for i in (eos if isinstance(eos, list) else [eos])}


def _zero_rows_from(specs: list[TensorSpec], kind: str, max_slot: int) -> dict[int, np.ndarray]:
    if kind != "aligner":
        raise CheckpointError("max_slot applies to the aligner's timestamp head only")
    head = next(spec for spec in specs if spec.name == _HEAD_NAME)
    if not 0 < max_slot <= head.shape[0]:
        raise CheckpointError(f"max_slot={max_slot} is outside 1..{head.shape[0]}")
    zero = np.zeros(head.shape[1:], dtype=np.uint16)
    return dict.fromkeys(range(max_slot, head.shape[0]), zero)


def _edited_blocks(spec: TensorSpec, seed: int, edits: dict[int, np.ndarray] | None) -> Iterator[np.ndarray]:
    if not edits:
        yield from tensor_blocks(spec, seed)
        return
    first = 0
    for block in tensor_blocks(spec, seed):
        for row in range(first, first + block.shape[0]):
            if row in edits:
                block[row - first] = edits[row]
        first += block.shape[0]
        yield block


def main(argv: list[str] | None = None) -> int:
    """``python -m onespeech_tools.checkpoints OUT [--size] [--kind] [--seed] [--end-scale] [--max-slot]``."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m onespeech_tools.checkpoints",
        description="write a seeded random publisher-layout checkpoint (see docs/checkpoints.md)",
    )
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--size", choices=SIZES, default="tiny")
    parser.add_argument("--kind", choices=KINDS, default="asr")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--end-scale", type=float, default=None, metavar="X",
                        help="asr only: make greedy decoding end (0.1 ends after 1 to 217 tokens on the shared clips)")
    parser.add_argument("--max-slot", type=int, default=None, metavar="N",
                        help="aligner only: zero the timestamp head from row N on, so words get times "
                             "within N x 80 ms (120: 9.6 s)")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="the shared data folder with configs/ and tokenizer/ (default: found as the tests find it)")
    args = parser.parse_args(argv)
    try:
        make_checkpoint(args.out_dir, args.size, args.seed, args.kind, data_dir=args.data_dir,
                        end_scale=args.end_scale, max_slot=args.max_slot)
    except (CheckpointError, FileNotFoundError) as error:
        parser.error(str(error))
    print(args.out_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
