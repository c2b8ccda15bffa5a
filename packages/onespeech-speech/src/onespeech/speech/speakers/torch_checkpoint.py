"""The restricted torch-checkpoint reader under its former name.

The reader moved to :mod:`onespeech.features.torch_reader` with the speaker encoder
(onespeech-features holds the small audio models). The speaker documentation named
this module as the reader's home, so its public names stay importable from here;
new code imports them from ``onespeech.features.torch_reader``.
"""

from onespeech.features.torch_reader import (
    CheckpointFormatError,
    CheckpointLimits,
    CheckpointRefusedError,
    TorchCheckpointError,
    read_torch_checkpoint,
)

__all__ = [
    "CheckpointFormatError",
    "CheckpointLimits",
    "CheckpointRefusedError",
    "TorchCheckpointError",
    "read_torch_checkpoint",
]
