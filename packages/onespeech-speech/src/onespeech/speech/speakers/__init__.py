"""Speaker attribution: Resemblyzer's GE2E encoder on our runtime, clustering, diarization.

- :mod:`.torch_checkpoint`: a restricted reader for ``torch.save`` files (no torch, no unpickling)
- :mod:`.convert`: Resemblyzer ``pretrained.pt`` -> runtime tensor file
- :mod:`.mel`, :mod:`.encoder`: the encoder's front end and network in numpy
"""

from onespeech.speech.speakers.encoder import SpeakerEncoder
from onespeech.speech.speakers.torch_checkpoint import (
    CheckpointFormatError,
    CheckpointRefusedError,
    TorchCheckpointError,
    read_torch_checkpoint,
)

__all__ = [
    "CheckpointFormatError",
    "CheckpointRefusedError",
    "SpeakerEncoder",
    "TorchCheckpointError",
    "read_torch_checkpoint",
]
