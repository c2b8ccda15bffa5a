"""Opening an aligner directory: config.json plus its tensors by publisher name.

A directory of publisher files (``model.safetensors``, bfloat16) is read through
``onespeech.qwen3.safetensors`` (numpy, memory-mapped, no pickle) and expanded to
float32, which is exact, so the FP32 forward pass sees the published values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from onespeech.kernels import ops
from onespeech.qwen3.config import ConfigError
from onespeech.qwen3.errors import Cancel, raise_if_cancelled
from onespeech.qwen3.safetensors import open_checkpoint


def open_weights(directory: Path, cancel: Cancel = None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """config.json as a dict and every tensor as float32, by publisher name."""
    path = directory / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{path} is missing; pass a Qwen3-ForcedAligner model directory") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path} is not readable JSON ({exc})") from exc
    weights: dict[str, np.ndarray] = {}
    with open_checkpoint(directory) as checkpoint:
        for name in checkpoint:
            raise_if_cancelled(cancel)
            tensor = checkpoint[name]
            weights[name] = ops.bf16_to_f32(tensor) if tensor.dtype == np.uint16 else np.array(tensor)
    return config, weights
