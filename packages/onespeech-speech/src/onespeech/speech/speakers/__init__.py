"""Speaker attribution: Resemblyzer's GE2E encoder on our runtime, clustering, diarization.

- :mod:`.torch_checkpoint`: a restricted reader for ``torch.save`` files (no torch, no unpickling)
- :mod:`.convert`: Resemblyzer ``pretrained.pt`` -> runtime tensor file
- :mod:`.mel`, :mod:`.encoder`: the encoder's front end and network in numpy
- :mod:`.segmentation`, :mod:`.clustering`, :mod:`.diarize`: who speaks when (``diarize``)
- :mod:`.turns`: a speaker's turn, pauses up to ``max_pause`` included; :mod:`.formats`: turns as RTTM and JSON
- :mod:`.attribution`: speakers onto a Document (``attribute_speakers``)
- :mod:`.model`: the encoder from the catalog (fetched on first use)
"""

from onespeech.speech.speakers.attribution import attribute_speakers
from onespeech.speech.speakers.diarize import DiarizationOptions, Diarizer, Turn, diarize
from onespeech.speech.speakers.encoder import SpeakerEncoder
from onespeech.speech.speakers.model import load_speaker_encoder, speaker_model_path
from onespeech.speech.speakers.torch_checkpoint import (
    CheckpointFormatError,
    CheckpointRefusedError,
    TorchCheckpointError,
    read_torch_checkpoint,
)

__all__ = [
    "CheckpointFormatError",
    "CheckpointRefusedError",
    "DiarizationOptions",
    "Diarizer",
    "SpeakerEncoder",
    "TorchCheckpointError",
    "Turn",
    "attribute_speakers",
    "diarize",
    "load_speaker_encoder",
    "read_torch_checkpoint",
    "speaker_model_path",
]
