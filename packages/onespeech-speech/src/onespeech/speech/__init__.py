"""transcribe(path) -> Document: the OneSpeech pipeline and CLI.

>>> from onespeech.speech import transcribe
>>> document = transcribe("meeting.flac")          # Qwen3-ASR-0.6B, downloaded on first use
>>> document.text, document.segments[0].words[0].start

- :func:`transcribe` / :class:`Transcriber` (``transcribe.py``): the file path.
- :class:`TranscribeOptions` (``options.py``): every transcription option, checked once.
- :class:`Document` and its parts (``document.py``), JSON round trip.
- writers (``writers.py``): txt, srt, vtt, tsv, json.
- errors (``errors.py``): every public exception of onespeech.speech (the server's HTTP errors: ``server/errors.py``).
- speakers (``speakers/``): :func:`diarize` (who speaks when, as :class:`Turn`) and
  :func:`attribute_speakers` (speakers onto a Document's words and segments).
"""

__version__ = "0.1.0"

from onespeech.speech.document import Document, Finish, ModelInfo, Segment, Speaker, TimingMethod, Word  # noqa: E402
from onespeech.speech.errors import (  # noqa: E402
    CheckpointFormatError,
    CheckpointRefusedError,
    ChunkLimitError,
    DocumentFormatError,
    EncoderWeightsError,
    ManifestError,
    ReplayMismatchError,
    SpeakerModelNotFoundError,
    TorchCheckpointError,
    TranscriptionCancelled,
    TranscriptionCancelledError,
)
from onespeech.speech.options import TranscribeOptions  # noqa: E402
from onespeech.speech.speakers import Turn, attribute_speakers, diarize  # noqa: E402
from onespeech.speech.transcribe import DEFAULT_ALIGNER, DEFAULT_MODEL, Transcriber, transcribe  # noqa: E402

__all__ = [
    "DEFAULT_ALIGNER",
    "DEFAULT_MODEL",
    "CheckpointFormatError",
    "CheckpointRefusedError",
    "ChunkLimitError",
    "Document",
    "DocumentFormatError",
    "EncoderWeightsError",
    "Finish",
    "ManifestError",
    "ModelInfo",
    "ReplayMismatchError",
    "Segment",
    "SpeakerModelNotFoundError",
    "Speaker",
    "TimingMethod",
    "TorchCheckpointError",
    "TranscribeOptions",
    "Transcriber",
    "TranscriptionCancelled",
    "TranscriptionCancelledError",
    "Turn",
    "Word",
    "attribute_speakers",
    "diarize",
    "transcribe",
]
