"""Audio source, Whisper log-mel features and Silero VAD in numpy.

Public API:

- audio: ``load_audio``, ``AudioFileSource`` (16 kHz mono float32 blocks)
- PCM checks: ``validate_pcm`` and the ``PcmError`` family
- features: ``log_mel_spectrogram`` (at most 30 s); ``onespeech.features.mel.log_mel``
  is the alignment path (at most 300 s)
- VAD: ``SileroVad``, ``VadOptions``, ``SpeechRegion``, ``VadStream``
- chunks: ``plan_chunks``, ``Chunk``
"""

from onespeech.features.audio import AudioFileSource, load_audio
from onespeech.features.errors import (
    AudioError,
    CorruptAudioError,
    NoChannelsError,
    NonFiniteSampleError,
    PcmError,
    PcmPowerOverflowError,
    PcmShapeError,
    PcmTooLongError,
    PcmTooShortError,
    UnreadableAudioError,
    VadModelError,
)
from onespeech.features.mel import log_mel_spectrogram
from onespeech.features.pcm import SAMPLE_RATE, validate_pcm

__version__ = "0.1.0"

__all__ = [
    "SAMPLE_RATE",
    "AudioFileSource",
    "AudioError",
    "CorruptAudioError",
    "NoChannelsError",
    "NonFiniteSampleError",
    "PcmError",
    "PcmPowerOverflowError",
    "PcmShapeError",
    "PcmTooLongError",
    "PcmTooShortError",
    "UnreadableAudioError",
    "VadModelError",
    "load_audio",
    "log_mel_spectrogram",
    "validate_pcm",
]
