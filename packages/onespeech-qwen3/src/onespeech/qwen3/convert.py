"""Publisher checkpoint -> runtime files (FP32, BF16 or INT8) plus a manifest.

Runtime layout of one precision ``p`` (``fp32``, ``bf16`` or ``int8``), every file in the
``onespeech.kernels.tensorfile`` format (raw, 64-byte aligned, memory-mappable)::

    {p}-encoder-00.ost ...   the audio tower (AuT encoder + projector), split only
                             if it would exceed MAX_FILE_BYTES
    {p}-decoder-00.ost ...   decoder layers four to a file; the last one also holds
                             thinker.model.norm.weight
    {p}-embed.ost            thinker.model.embed_tokens.weight
    {p}-head.ost             thinker.lm_head.weight = the output head the reference
                             actually uses (see below)
    manifest.{p}.json        onespeech-manifest: every file's size and SHA-256, the
                             tensor index, source digests, converter version
    config.json, generation_config.json, preprocessor_config.json,
    chat_template.json, tokenizer_config.json, vocab.json, merges.txt
                             copied unchanged (the runtime directory is self-contained)

Tensors keep their publisher names and shapes. FP32 files hold the bfloat16
values expanded exactly (bits << 16); BF16 files keep the bfloat16 bits as
uint16. INT8 files hold every Linear weight of the encoder and the decoder layers and the
recognizer's output head (:func:`int8_quantized`) as int8 codes per output channel,
quantized from the exactly widened values by ``ops.quantize_int8``, with its float32
scales beside it under ``name + "_scale"``; the convolutions, embedding, the forced
aligner's head, norms and biases keep their bfloat16 bits (docs/qwen3.md says why
those stay float). The output head: with ``tie_word_embeddings`` true, the reference ties
``lm_head`` to ``embed_tokens`` on load and ignores the stored ``lm_head``
(measured; docs/checkpoints.md), so the head file holds the token embedding under
the name ``thinker.lm_head.weight`` and the manifest says where it came from; the
forced aligner (untied, 5000 classes) keeps its stored head.

Every byte is a function of the publisher files: no timestamps or paths go into
the outputs, tensors are written in a fixed order, so converting twice gives
identical files.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from onespeech.kernels import ops
from onespeech.kernels.int8matrix import SCALE_SUFFIX
from onespeech.kernels.precision import Precision
from onespeech.kernels.store import sha256_file, write_manifest
from onespeech.kernels.tensorfile import write_tensor_file
from onespeech.qwen3.config import EMBED_NAME, LM_HEAD_NAME, Qwen3Config, load_config
from onespeech.qwen3.errors import ConfigError, ConversionError
from onespeech.qwen3.safetensors import Checkpoint, open_checkpoint, weight_files

__all__ = [
    "CONVERTER_ID",
    "CONVERTER_VERSION",
    "MAX_FILE_BYTES",
    "PRECISIONS",
    "ConversionError",
    "convert",
    "check_layer_counts",
    "expected_tensors",
    "int8_quantized",
    "manifest_name",
    "runtime_head_name",
    "runtime_tensors",
]

#: Version of the conversion, recorded in each runtime file's metadata and in the install
#: records: files of another version are converted again. 2: the INT8 output head is int8.
CONVERTER_VERSION = 2
#: The converter and its version as the manifests and install records name them.
CONVERTER_ID = f"onespeech.qwen3.convert {CONVERTER_VERSION}"
RUNTIME_FORMAT = "onespeech-qwen3-runtime"
#: The precisions runtime files are converted to.
PRECISIONS = ("fp32", "bf16", "int8")
#: The largest runtime file written, in bytes: 2 GiB keeps every file mappable and copyable on
#: filesystems and tools with 32-bit size limits.
MAX_FILE_BYTES = 2 << 30
LAYERS_PER_FILE = 4
# tensor-file index (a few KB for four layers) and 64-byte alignment per tensor
_HEADER_SLACK = 1 << 16
_ALIGN_SLACK = 64
EXTENSION = ".ost"
# publisher files copied next to the runtime files (optional ones only if present)
COPIED_FILES = ("config.json", "generation_config.json", "preprocessor_config.json", "chat_template.json",
                "tokenizer_config.json", "vocab.json", "merges.txt")  # fmt: skip
REQUIRED_COPIED = ("config.json",)


def manifest_name(precision: Precision | str) -> str:
    """The manifest of one precision, e.g. ``manifest.fp32.json``."""
    return f"manifest.{Precision.parse(precision).value}.json"


_LAYER_NAME = re.compile(r"thinker\.(audio_tower|model)\.layers\.(\d+)\.")


def check_layer_counts(config: Qwen3Config, names: Iterable[str], source: str | os.PathLike[str]) -> None:
    """Refuse a config whose layer counts differ from the tensors present.

    Runs before :func:`expected_tensors` builds its table, so a config declaring 10^8
    layers is refused at once instead of after gigabytes of names.

    Raises
    ------
    ConfigError
        ``encoder_layers`` or ``num_hidden_layers`` is not the number of layers in ``names``.
    """
    present = {"audio_tower": 0, "model": 0}
    for name in names:
        match = _LAYER_NAME.match(name)
        if match:
            present[match[1]] = max(present[match[1]], int(match[2]) + 1)
    declared = {"audio_tower": config.audio.num_layers, "model": config.text.num_layers}
    fields = {"audio_tower": "audio_config.encoder_layers", "model": "text_config.num_hidden_layers"}
    for part, count in declared.items():
        if count != present[part]:
            raise ConfigError(
                f"{os.fspath(source)}: thinker_config.{fields[part]} is {count} but the checkpoint holds "
                f"{present[part]} such layers"
            )


def expected_tensors(config: Qwen3Config) -> dict[str, tuple[int, ...]]:
    """Every tensor a publisher checkpoint with this config holds: name -> shape."""
    audio, text = config.audio, config.text
    d, ch = audio.d_model, audio.downsample_hidden_size
    a = "thinker.audio_tower."
    shapes: dict[str, tuple[int, ...]] = {
        a + "conv2d1.weight": (ch, 1, 3, 3),
        a + "conv2d1.bias": (ch,),
        a + "conv2d2.weight": (ch, ch, 3, 3),
        a + "conv2d2.bias": (ch,),
        a + "conv2d3.weight": (ch, ch, 3, 3),
        a + "conv2d3.bias": (ch,),
        a + "conv_out.weight": (d, audio.conv_out_features),
        a + "ln_post.weight": (d,),
        a + "ln_post.bias": (d,),
        a + "proj1.weight": (d, d),
        a + "proj1.bias": (d,),
        a + "proj2.weight": (audio.output_dim, d),
        a + "proj2.bias": (audio.output_dim,),
    }
    for i in range(audio.num_layers):
        p = f"{a}layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            shapes[f"{p}self_attn.{proj}.weight"] = (d, d)
            shapes[f"{p}self_attn.{proj}.bias"] = (d,)
        for norm in ("self_attn_layer_norm", "final_layer_norm"):
            shapes[f"{p}{norm}.weight"] = (d,)
            shapes[f"{p}{norm}.bias"] = (d,)
        shapes[f"{p}fc1.weight"] = (audio.ffn_dim, d)
        shapes[f"{p}fc1.bias"] = (audio.ffn_dim,)
        shapes[f"{p}fc2.weight"] = (d, audio.ffn_dim)
        shapes[f"{p}fc2.bias"] = (d,)
    h, hd = text.hidden_size, text.head_dim
    q, kv = text.num_heads * hd, text.num_kv_heads * hd
    shapes[EMBED_NAME] = (text.vocab_size, h)
    for i in range(text.num_layers):
        p = f"thinker.model.layers.{i}."
        shapes[p + "self_attn.q_proj.weight"] = (q, h)
        shapes[p + "self_attn.k_proj.weight"] = (kv, h)
        shapes[p + "self_attn.v_proj.weight"] = (kv, h)
        shapes[p + "self_attn.o_proj.weight"] = (h, q)
        shapes[p + "self_attn.q_norm.weight"] = (hd,)
        shapes[p + "self_attn.k_norm.weight"] = (hd,)
        shapes[p + "mlp.gate_proj.weight"] = (text.intermediate_size, h)
        shapes[p + "mlp.up_proj.weight"] = (text.intermediate_size, h)
        shapes[p + "mlp.down_proj.weight"] = (h, text.intermediate_size)
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
    shapes["thinker.model.norm.weight"] = (h,)
    shapes[LM_HEAD_NAME] = (config.output_rows, h)
    return shapes


def int8_quantized(name: str, shape: tuple[int, ...], config: Qwen3Config) -> bool:
    """Whether INT8 runtime files store tensor ``name`` as int8 codes.

    Every Linear weight: the matrices (two dims) other than the token embedding (a
    lookup table), the recognizer's vocabulary head included (as bfloat16 it was about
    40% of the bytes an INT8 decode step reads). The forced aligner's head
    (``config.classify_num`` classes, one pass per chunk) stays float: its error lands
    directly on the timestamp classes and it costs little. The convolutions (four
    dims), norms and biases stay float too.
    """
    if len(shape) != 2 or name == EMBED_NAME:
        return False
    return name != LM_HEAD_NAME or config.classify_num is None


def runtime_head_name(config: Qwen3Config, precision: Precision | str) -> str:
    """The runtime tensor a recognizer's decoder reads as output head.

    Under INT8 the head file's own codes (``thinker.lm_head.weight``, quantized from the
    head the reference uses); otherwise the tensor the reference uses
    (``config.output_head_name``), so a tied head shares the embedding's pages.
    """
    head_shape = (config.output_rows, config.text.hidden_size)
    if Precision.parse(precision).value == "int8" and int8_quantized(LM_HEAD_NAME, head_shape, config):
        return LM_HEAD_NAME
    return config.output_head_name


def runtime_tensors(config: Qwen3Config, precision: Precision | str) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every tensor the runtime files of ``precision`` hold: name -> (shape, dtype tag).

    The publisher tensors (:func:`expected_tensors`) as float32, bf16, or under INT8
    int8 codes for :func:`int8_quantized` ones plus their float32 scales and bf16 for
    the rest.
    """
    precision = Precision.parse(precision).value
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    for name, shape in expected_tensors(config).items():
        if precision == "int8" and int8_quantized(name, shape, config):
            out[name] = (shape, "int8")
            out[name + SCALE_SUFFIX] = (shape[:1], "float32")
        else:
            out[name] = (shape, "float32" if precision == "fp32" else "bf16")
    return out


def _natural_key(name: str) -> list[Any]:
    """Sort layer 10 after layer 9."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _check_checkpoint(checkpoint: Checkpoint, config: Qwen3Config) -> None:
    check_layer_counts(config, checkpoint, checkpoint.files[0].path.parent / "config.json")
    expected = expected_tensors(config)
    missing = sorted(set(expected) - set(checkpoint), key=_natural_key)
    if missing:
        raise ConversionError(checkpoint.files[0].path, f"{len(missing)} tensors missing, first {missing[0]!r}")
    extra = sorted(set(checkpoint) - set(expected), key=_natural_key)
    if extra:
        path = checkpoint._owner[extra[0]].path
        raise ConversionError(path, f"unexpected tensor {extra[0]!r} for this config ({len(extra)} in all)")
    for name, shape in expected.items():
        info = checkpoint.info(name)
        path = checkpoint._owner[name].path
        if info.shape != shape:
            raise ConversionError(path, f"tensor {name!r} has shape {list(info.shape)}, config needs {list(shape)}")
        if info.dtype != "BF16":
            raise ConversionError(path, f"tensor {name!r} is {info.dtype}; the publisher checkpoints are BF16")


def _groups(config: Qwen3Config, names: Iterable[str]) -> list[tuple[str, list[str]]]:
    """File stem -> tensor names, before size splitting."""
    encoder: list[str] = []
    decoder_layers: dict[int, list[str]] = {}
    other: list[str] = []
    for name in names:
        match = re.match(r"thinker\.model\.layers\.(\d+)\.", name)
        if name.startswith("thinker.audio_tower."):
            encoder.append(name)
        elif match:
            decoder_layers.setdefault(int(match.group(1)), []).append(name)
        elif name not in (EMBED_NAME, LM_HEAD_NAME):
            other.append(name)
    groups = [("encoder", sorted(encoder, key=_natural_key))]
    layers = sorted(decoder_layers)
    for index, start in enumerate(range(0, len(layers), LAYERS_PER_FILE)):
        chunk = [n for layer in layers[start : start + LAYERS_PER_FILE] for n in sorted(decoder_layers[layer])]
        groups.append((f"decoder-{index:02d}", chunk))
    if other:  # the final norm rides with the last decoder layers
        groups[-1][1].extend(sorted(other, key=_natural_key))
    return groups


def _split_by_size(stem: str, names: list[str], sizes: dict[str, int], path_hint: Path) -> list[tuple[str, list[str]]]:
    """Split one group so no file exceeds MAX_FILE_BYTES (numbered stems keep their order)."""
    parts: list[list[str]] = [[]]
    used = 0
    budget = MAX_FILE_BYTES - _HEADER_SLACK
    for name in names:
        size = sizes[name] + _ALIGN_SLACK
        if size > budget:
            raise ConversionError(path_hint, f"tensor {name!r} alone exceeds the {MAX_FILE_BYTES}-byte file limit")
        if used + size > budget and parts[-1]:
            parts.append([])
            used = 0
        parts[-1].append(name)
        used += size
    if stem.startswith("decoder"):
        if len(parts) > 1:
            raise ConversionError(path_hint, f"four decoder layers exceed the {MAX_FILE_BYTES}-byte file limit")
        return [(stem, parts[0])]
    return [(f"{stem}-{i:02d}", part) for i, part in enumerate(parts)]


def _runtime_arrays(name: str, bits: np.ndarray, precision: str, config: Qwen3Config) -> dict[str, np.ndarray]:
    """The runtime tensors of one publisher tensor (its codes and scales under INT8)."""
    if precision == "int8":
        if not int8_quantized(name, bits.shape, config):
            return {name: _expand(bits, "bf16")}
        codes, scale = ops.quantize_int8(_expand(bits, "fp32"))
        return {name: codes, name + SCALE_SUFFIX: scale}
    return {name: _expand(bits, precision)}


def _expand(bits: np.ndarray, precision: str) -> np.ndarray:
    if precision == "bf16":
        return np.ascontiguousarray(bits, dtype=np.uint16)
    # bfloat16 is the top half of a float32: the expansion is exact
    wide = np.ascontiguousarray(bits, dtype=np.uint16).astype(np.uint32)
    wide <<= np.uint32(16)  # in place: one float32-sized buffer per tensor
    return wide.view(np.float32)


def _digests(paths: Iterable[Path]) -> dict[str, dict[str, Any]]:
    out = {}
    for path in paths:
        digest = sha256_file(path)
        out[path.name] = {"size": digest.size, "sha256": digest.sha256}
    return out


def convert(
    publisher_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    precision: Precision | str = Precision.FLOAT32,
    *,
    revision: str | None = None,
) -> list[str]:
    """Write the runtime files of ``precision`` for ``publisher_dir`` into ``out_dir``.

    ``out_dir`` is normally a staging directory (``onespeech.kernels.store``) that
    the caller installs atomically; see :func:`onespeech.qwen3.runtime.ensure_runtime`.

    Parameters
    ----------
    publisher_dir
        ``config.json`` plus ``model.safetensors`` or index + shards (bfloat16).
    out_dir
        Existing directory to write into (may be ``publisher_dir``'s staging dir).
    precision
        ``"fp32"`` / ``"bf16"`` / ``"int8"`` (or a Precision enum member).
    revision
        The publisher revision, recorded in the manifest when known.

    Returns
    -------
    list of str
        The file names written (runtime files, copies, and the manifest last).

    Raises
    ------
    ConversionError
        A tensor is missing, unexpected, mis-shaped or not bfloat16.
    ConfigError, SafetensorsError
        Unreadable configuration or weights.
    """
    precision = Precision.parse(precision).value
    source, out = Path(publisher_dir), Path(out_dir)
    config = load_config(source)
    sources = weight_files(source)
    written: list[str] = []
    with open_checkpoint(source) as checkpoint:
        _check_checkpoint(checkpoint, config)
        layout = runtime_tensors(config, precision)
        sizes = {}
        for name in checkpoint:
            shape, tag = layout[name]
            # an int8 matrix's file also holds its scales (4 bytes per row)
            sizes[name] = checkpoint.info(name).numel * {"float32": 4, "bf16": 2, "int8": 1}[tag] + (
                4 * shape[0] if tag == "int8" else 0)
        plan: list[tuple[str, list[str]]] = []
        for stem, names in _groups(config, checkpoint):
            plan.extend(_split_by_size(stem, names, sizes, sources[0]))
        for stem, name in (("embed", EMBED_NAME), ("head", LM_HEAD_NAME)):
            # one tensor per file: refused (not split) if it alone exceeds the limit
            _split_by_size(stem, [name], sizes, sources[0])
            plan.append((stem, [name]))
        head_source = config.output_head_name
        index: dict[str, dict[str, Any]] = {}
        for stem, names in plan:
            file_name = f"{precision}-{stem}{EXTENSION}"
            tensors = {}
            for name in names:
                stored = head_source if name == LM_HEAD_NAME else name
                for runtime_name, array in _runtime_arrays(name, checkpoint[stored], precision, config).items():
                    tensors[runtime_name] = array
                    index[runtime_name] = {"file": file_name, "dtype": layout[runtime_name][1],
                                           "shape": list(array.shape)}  # fmt: skip
            metadata = {"format": RUNTIME_FORMAT, "converter": CONVERTER_VERSION, "precision": precision}
            write_tensor_file(out / file_name, tensors, metadata)
            del tensors
            written.append(file_name)
    for name in COPIED_FILES:
        if (source / name).is_file():
            if (out / name).resolve() != (source / name).resolve():
                shutil.copyfile(source / name, out / name)
            written.append(name)
        elif name in REQUIRED_COPIED:
            raise ConversionError(source / name, "required publisher file is missing")
    metadata = {
        "runtime_format": RUNTIME_FORMAT,
        "converter": CONVERTER_ID,
        "precision": precision,
        "model_type": config.model_type,
        "revision": revision,
        "source": _digests([*sources, *(source / n for n in COPIED_FILES if (source / n).is_file())]),
        "output_head": {"name": LM_HEAD_NAME, "source": head_source},
        "layers_per_file": LAYERS_PER_FILE,
        "max_file_bytes": MAX_FILE_BYTES,
        "tensors": index,
    }
    name = manifest_name(precision)
    write_manifest(out, written, name=name, metadata=metadata)
    written.append(name)
    return written
