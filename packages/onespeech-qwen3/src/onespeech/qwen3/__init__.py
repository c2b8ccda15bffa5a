"""Qwen3-ASR recognizer on the OneSpeech runtime.

>>> from onespeech.qwen3 import Qwen3Recognizer, Qwen3Options
>>> with Qwen3Recognizer.load(model_dir, Qwen3Options(context="Vocabulary: log-mel.")) as rec:
...     transcript = rec.transcribe(pcm_16k_mono, "en")
"""

from onespeech.kernels.precision import Precision
from onespeech.qwen3 import models as _models  # noqa: F401 - registers the asr and aligner kinds
from onespeech.qwen3.errors import (
    ConfigError,
    ContextError,
    ConversionError,
    MaxNewTokensError,
    ModelKindError,
    RecognitionCancelled,
    RecognitionCancelledError,
    SafetensorsError,
    UnsupportedLanguageError,
)
from onespeech.qwen3.recognizer import Qwen3Options, Qwen3Recognizer
from onespeech.qwen3.transcript import Segment, TimingMethod, Transcript, Word

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "ContextError",
    "ConversionError",
    "MaxNewTokensError",
    "ModelKindError",
    "Precision",
    "Qwen3Options",
    "Qwen3Recognizer",
    "RecognitionCancelled",
    "RecognitionCancelledError",
    "SafetensorsError",
    "Segment",
    "TimingMethod",
    "Transcript",
    "UnsupportedLanguageError",
    "Word",
]
