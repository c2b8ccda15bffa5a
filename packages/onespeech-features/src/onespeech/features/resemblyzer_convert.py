"""Resemblyzer ``pretrained.pt`` -> OneSpeech runtime tensor file.

The checkpoint is read with the restricted reader (:mod:`.torch_reader`: no torch,
nothing unpickled with the standard loader); its ``model_state`` must hold the
encoder's tensors with the shapes the network assumes (``encoder.TENSOR_SHAPES``).
The training leftovers (``similarity_weight``/``_bias`` and the optimizer state) are
not carried over. The output is one tensor file in publisher names, float32.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from onespeech.features.speaker_encoder import TENSOR_SHAPES
from onespeech.features.torch_reader import CheckpointFormatError, read_torch_checkpoint
from onespeech.kernels.tensorfile import write_tensor_file

RUNTIME_FORMAT = "onespeech-resemblyzer-ge2e"
RUNTIME_VERSION = 1
RUNTIME_NAME = "resemblyzer_ge2e.tensors"


def convert_resemblyzer(source: str | os.PathLike[str], destination: str | os.PathLike[str]) -> Path:
    """Convert ``source`` (a Resemblyzer ``pretrained.pt``) into the tensor file ``destination``.

    Raises
    ------
    CheckpointRefusedError, CheckpointFormatError
        The checkpoint is hostile or malformed, or lacks/misshapes an encoder tensor.
    """
    source = Path(source)
    checkpoint = read_torch_checkpoint(source)
    state = checkpoint.get("model_state") if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict):
        raise CheckpointFormatError(f"{source}: no 'model_state' dict (a Resemblyzer checkpoint has one)")
    tensors = {}
    for name, shape in TENSOR_SHAPES.items():
        a = state.get(name)
        if not isinstance(a, np.ndarray):
            raise CheckpointFormatError(f"{source}: model_state lacks tensor {name!r}")
        if a.shape != shape or a.dtype != np.float32:
            raise CheckpointFormatError(
                f"{source}: {name} is {a.dtype}{list(a.shape)}, the encoder needs float32{list(shape)}"
            )
        if not np.isfinite(a).all():
            raise CheckpointFormatError(f"{source}: {name} holds non-finite values")
        tensors[name] = a
    destination = Path(destination)
    write_tensor_file(destination, tensors, {"format": RUNTIME_FORMAT, "version": RUNTIME_VERSION})
    return destination
