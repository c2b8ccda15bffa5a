"""Where the default VAD model comes from, checked against the catalog's pin.

The default VAD is Silero VAD as shipped in the silero-vad wheel (catalog entry
``silero-vad``). The library never downloads it by itself: it takes, in order,

1. the file named by ``ONESPEECH_VAD_MODEL`` (a ``silero_vad.onnx`` or our converted
   tensor file; a file the user chose, so it is not held to the pin), or
2. the ``silero_vad.onnx`` inside an installed ``silero-vad`` distribution, located
   through its installed-files record without importing the package (importing it
   would import torch), and verified against the pinned size and SHA-256.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

from onespeech.kernels.store import verify_file
from onespeech.qwen3.catalog import CatalogEntry, get_entry

VAD_MODEL_ENV = "ONESPEECH_VAD_MODEL"
DEFAULT_VAD = "silero-vad"
_ONNX = "silero_vad.onnx"


class VadModelNotFoundError(FileNotFoundError):
    """No default VAD model could be found; the message says how to provide one."""


def default_vad_path(entry: CatalogEntry | None = None) -> Path:
    """Path of the default VAD model (see the module docstring for the search order).

    Raises
    ------
    VadModelNotFoundError
        If ``ONESPEECH_VAD_MODEL`` names no file, or no pinned silero-vad is installed.
    onespeech.kernels.errors.ModelIntegrityError
        If the installed ``silero_vad.onnx`` does not match the catalog's pin.
    """
    env = os.environ.get(VAD_MODEL_ENV)
    if env:
        path = Path(env)
        if not path.is_file():
            raise VadModelNotFoundError(f"{VAD_MODEL_ENV}={env!r} is not a file; point it at silero_vad.onnx")
        return path
    entry = entry if entry is not None else get_entry(DEFAULT_VAD)
    onnx = entry.file(_ONNX)
    if entry.package is None or onnx.member is None or onnx.pin is None:
        raise VadModelNotFoundError(f"catalog entry {entry.id} does not say where {_ONNX} is installed")
    hint = (
        f"install it with `pip install --no-deps {entry.package}=={entry.revision}` "
        f"or set {VAD_MODEL_ENV} to a silero_vad.onnx file"
    )
    try:
        dist = importlib.metadata.distribution(entry.package)
    except importlib.metadata.PackageNotFoundError:
        raise VadModelNotFoundError(f"the default VAD model is not installed: {hint}") from None
    path = Path(str(dist.locate_file(onnx.member)))
    if not path.is_file():
        raise VadModelNotFoundError(f"the installed silero-vad {dist.version} has no {onnx.member}: {hint}")
    verify_file(path, onnx.pin, what=f"silero-vad {dist.version} model")
    return path
