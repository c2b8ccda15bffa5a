"""Speaker attribution: clustering, diarization and speakers onto a Document.

The encoder they run (Resemblyzer's GE2E on our runtime, its restricted checkpoint
reader and its conversion) is a small audio model beside the Silero VAD in
onespeech-features (:mod:`onespeech.features.speaker_encoder`,
:mod:`onespeech.features.speaker_model`, :mod:`onespeech.features.torch_reader`).

- :mod:`.segmentation`, :mod:`.clustering`, :mod:`.diarize`: who speaks when (``diarize``)
- :mod:`.turns`: a speaker's turn, pauses up to ``max_pause`` included; :mod:`.formats`: turns as RTTM and JSON
- :mod:`.attribution`: speakers onto a Document (``attribute_speakers``)
"""

from onespeech.speech.speakers.attribution import attribute_speakers
from onespeech.speech.speakers.diarize import DiarizationOptions, Diarizer, Turn, diarize

__all__ = [
    "DiarizationOptions",
    "Diarizer",
    "Turn",
    "attribute_speakers",
    "diarize",
]
