"""Load runtime files (converting publisher files in place on first use).

``ensure_runtime(model_dir, precision)`` makes sure ``model_dir`` holds verified
runtime files of that precision. It is the kernels' one install path
(:func:`onespeech.kernels.resolve.resolve_local`): an install record whose source
files are unchanged means nothing to do; otherwise the publisher files are
converted into a staging directory under the directory lock, verified and
installed atomically (data files first, manifest and record last), so no reader
ever sees a half-written runtime. Publisher files that changed since the
conversion (a new fine-tune copied over) are converted again. A second process
converting the same directory gets ``ConversionInProgressError`` (retry after the
first completes).

``load_runtime(directory, precision)`` checks the manifest (every file's size at
each load, SHA-256 once per install, remembered by file stat in the cache), memory-maps
the tensor files and returns a :class:`RuntimeModel`: the parsed config plus a
mapping from publisher tensor name to read-only array (float32, or uint16
bfloat16 bits for BF16; under INT8 the Linear weights are int8 codes with their
float32 scales under ``name + "_scale"``, paired by ``onespeech.kernels.int8matrix.matrix``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from onespeech.kernels import ops
from onespeech.kernels.errors import ModelIntegrityError
from onespeech.kernels.precision import Precision
from onespeech.kernels.resolve import convert_directory, install_record_name, resolve_local
from onespeech.kernels.store import Manifest, verify_manifest
from onespeech.kernels.tensorfile import TensorFile, read_tensor_file
from onespeech.qwen3.config import Qwen3Config, load_config
from onespeech.qwen3.convert import (
    CONVERTER_ID,
    RUNTIME_FORMAT,
    check_layer_counts,
    manifest_name,
    runtime_tensors,
)

__all__ = [
    "RuntimeModel",
    "ensure_runtime",
    "has_runtime",
    "install_runtime",
    "load_model",
    "load_runtime",
    "tensor_bytes",
    "tensors_under",
]


class RuntimeModel(Mapping[str, np.ndarray]):
    """A loaded runtime directory: ``model[name]`` -> memory-mapped array.

    Attributes
    ----------
    directory : Path
    precision : str
        ``"fp32"``, ``"bf16"`` or ``"int8"``.
    config : Qwen3Config
    manifest : Manifest
        Its metadata holds the tensor index, the output-head source and the
        publisher digests.

    Use as a context manager (or call :meth:`close`) to release the mapped files.
    """

    def __init__(
        self, directory: Path, precision: str, config: Qwen3Config, manifest: Manifest, files: list[TensorFile]
    ) -> None:
        self.directory = directory
        self.precision = precision
        self.config = config
        self.manifest = manifest
        self._files = files
        self._owner = {name: file for file in files for name in file}

    def __getitem__(self, name: str) -> np.ndarray:
        return self._owner[name][name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._owner)

    def __len__(self) -> int:
        return len(self._owner)

    @property
    def files(self) -> list[Path]:
        return [file.path for file in self._files]

    def close(self) -> None:
        """Drop the mappings (arrays still referenced keep their pages until released)."""
        for file in self._files:
            file.close()
        self._owner = {}

    def __enter__(self) -> RuntimeModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RuntimeModel({str(self.directory)!r}, {self.precision}, {len(self)} tensors)"


def tensors_under(weights: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """The tensors whose names start with ``prefix``, keyed by the rest of the name.

    Matrices stay views of the mapped files. bfloat16 vectors (norm weights and
    biases, a few KB each) are widened to float32 once here rather than by every
    kernel call that reads them (the widening is exact, so no value changes).
    """
    out = {}
    for name, t in weights.items():
        if name.startswith(prefix):
            out[name[len(prefix) :]] = ops.bf16_to_f32(t) if t.dtype == np.uint16 and t.ndim == 1 else t
    return out


def tensor_bytes(weights: Mapping[str, np.ndarray], prefix: str) -> int:
    """Bytes of the tensors whose names start with ``prefix``, as stored (mapped), not as widened.

    What a model part that reads every tensor under its prefix keeps resident
    (`AudioEncoder.weight_bytes`, `Qwen3Decoder.weight_bytes`).
    """
    return sum(int(t.nbytes) for name, t in weights.items() if name.startswith(prefix))


def _round_in_place(x: np.ndarray) -> np.ndarray:
    return ops.round_bf16(x, out=x)


def _identity(x: np.ndarray) -> np.ndarray:
    return x


def activation_rounding(bf16: bool) -> Callable[[np.ndarray], np.ndarray]:
    """What the encoder and decoder apply at operator boundaries the ops do not round themselves.

    Under BF16 precision: rounding to bfloat16 **in place** (no allocation), so it
    must only be given an operator's fresh output, never a caller's array; the
    decoder's per-token operators round their own outputs (``round_to_bf16=``)
    and use this only for residual sums. Otherwise: identity.
    """
    return _round_in_place if bf16 else _identity


def has_runtime(directory: str | os.PathLike[str], precision: Precision | str = Precision.FLOAT32) -> bool:
    """True if ``directory`` holds the install record of ``precision`` (installed runtime files)."""
    return (Path(directory) / install_record_name(precision)).is_file()


def ensure_runtime(
    model_dir: str | os.PathLike[str], precision: Precision | str = Precision.FLOAT32, *, kind: str = "asr"
) -> Path:
    """Convert ``model_dir``'s publisher files into runtime files there, once (see the module docstring).

    Returns
    -------
    Path
        The directory holding the runtime files: ``model_dir``, or its conversion in
        the cache when ``model_dir`` is read-only.

    Raises
    ------
    FileNotFoundError
        Neither runtime files of ``precision`` nor publisher files are present.
    ConversionInProgressError
        Another process is converting this directory; retry after it completes.
    ModelIntegrityError
        A publisher or converted file is damaged (names the file).
    """
    return resolve_local(model_dir, precision, kind=kind)


def install_runtime(
    publisher_dir: str | os.PathLike[str],
    runtime_dir: str | os.PathLike[str],
    precision: Precision | str = Precision.FLOAT32,
    *,
    revision: str | None = None,
) -> Path:
    """Convert ``publisher_dir`` and install the result in ``runtime_dir`` (may be the same directory).

    :func:`onespeech.kernels.resolve.convert_directory`: under ``runtime_dir``'s lock,
    convert into a staging directory, verify every output, write the install record,
    install. Returns ``runtime_dir``.

    Raises
    ------
    ConversionInProgressError
        Another process holds the lock; retry after it completes.
    """
    return convert_directory(publisher_dir, runtime_dir, precision, kind="asr", revision=revision)


def load_runtime(
    directory: str | os.PathLike[str],
    precision: Precision | str = Precision.FLOAT32,
    *,
    digests: Literal["once", "always", "never"] = "once",
) -> RuntimeModel:
    """Verify and memory-map the runtime files of ``precision`` in ``directory``.

    Raises
    ------
    FileNotFoundError
        No manifest of this precision (the directory is not converted).
    ModelIntegrityError
        A listed file is missing, has the wrong size or digest, or its tensors do
        not match the manifest and config; the message names the file to remove.
    """
    precision = Precision.parse(precision).value
    directory = Path(directory)
    name = manifest_name(precision)
    if not (directory / name).is_file():
        raise FileNotFoundError(f"{directory} has no {precision} runtime files ({name} is missing)")
    manifest = verify_manifest(directory, name=name, digests=digests)
    meta = manifest.metadata
    if meta.get("runtime_format") != RUNTIME_FORMAT or meta.get("precision") != precision:
        raise ModelIntegrityError(directory / name, f"not a {precision} {RUNTIME_FORMAT} manifest")
    if meta.get("converter") != CONVERTER_ID:
        raise ModelIntegrityError(directory / name, f"written by converter {meta.get('converter')!r}; this runtime "
                                                    f"reads the files of {CONVERTER_ID!r}")
    config = load_config(directory)
    index = meta.get("tensors")
    if not isinstance(index, dict):
        raise ModelIntegrityError(directory / name, "the manifest has no tensor index")
    files: list[TensorFile] = []
    try:
        for file_name in sorted({entry["file"] for entry in index.values()}):
            if file_name not in manifest.files:
                raise ModelIntegrityError(directory / name, f"tensor file {file_name} is not a listed file")
            files.append(read_tensor_file(directory / file_name))
        model = RuntimeModel(directory, precision, config, manifest, files)
        _check_tensors(model, index, directory / name)
    except BaseException:
        for file in files:
            file.close()
        raise
    return model


def _check_tensors(model: RuntimeModel, index: dict[str, Any], manifest_path: Path) -> None:
    check_layer_counts(model.config, index, model.directory / "config.json")
    expected = runtime_tensors(model.config, model.precision)
    if set(index) != set(expected):
        missing = sorted(set(expected) - set(index))
        extra = sorted(set(index) - set(expected))
        raise ModelIntegrityError(manifest_path, f"tensor index differs from the config (missing {missing[:3]}, "
                                                 f"extra {extra[:3]})")  # fmt: skip
    for name, (shape, tag) in expected.items():
        dtype = _DTYPE_OF_TAG[tag]
        entry = index[name]
        file = model._owner.get(name)
        if file is None or file.path.name != entry["file"]:
            raise ModelIntegrityError(model.directory / entry["file"], f"tensor {name!r} is not in this file")
        array = file[name]
        if array.shape != shape or array.dtype != dtype:
            raise ModelIntegrityError(
                file.path, f"tensor {name!r} is {array.dtype} {list(array.shape)}, expected {np.dtype(dtype)} {list(shape)}"
            )


_DTYPE_OF_TAG = {"float32": np.float32, "bf16": np.uint16, "int8": np.int8}


def load_model(
    model_dir: str | os.PathLike[str], precision: Precision | str = Precision.FLOAT32, *, kind: str = "asr"
) -> RuntimeModel:
    """:func:`ensure_runtime` then :func:`load_runtime` (what the recognizer and the aligner need)."""
    return load_runtime(ensure_runtime(model_dir, precision, kind=kind), precision)
