"""Qwen3-ASR recognizer on the OneSpeech runtime.

>>> from onespeech.qwen3 import Qwen3Recognizer, Qwen3Options
>>> with Qwen3Recognizer.load(model_dir, Qwen3Options(context="Vocabulary: log-mel.")) as rec:
...     transcript = rec.transcribe(pcm_16k_mono, "en")

Models built on the same network (the forced aligner in ``onespeech.align``) use
only the names exported here: :class:`Qwen3Backbone` (audio encoder, prompt
embeddings, one causal decoder pass), the unit rules (:func:`written_units`,
:func:`spoken_units`), :class:`Languages`, :func:`load_config` and :func:`options_from`.
"""

from onespeech.kernels.precision import Precision
from onespeech.qwen3 import models as _models  # noqa: F401 - registers the asr and aligner kinds
from onespeech.qwen3.backbone import Qwen3Backbone
from onespeech.qwen3.batch_decode import BatchDecoder, BatchLimits, DecodeSequence
from onespeech.qwen3.config import Qwen3Config, load_config
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
from onespeech.qwen3.languages import Languages
from onespeech.qwen3.load_options import options_from
from onespeech.qwen3.recognizer import Qwen3Options, Qwen3Recognizer, RecognizedChunk
from onespeech.qwen3.transcript import Finish, Segment, TimingMethod, Transcript, Word, languages_by_time
from onespeech.qwen3.units import WrittenUnit, spoken_units, written_units

__version__ = "0.1.0"

__all__ = [
    "BatchDecoder",
    "BatchLimits",
    "ConfigError",
    "ContextError",
    "ConversionError",
    "DecodeSequence",
    "Finish",
    "Languages",
    "MaxNewTokensError",
    "ModelKindError",
    "Precision",
    "Qwen3Backbone",
    "Qwen3Config",
    "Qwen3Options",
    "Qwen3Recognizer",
    "RecognitionCancelled",
    "RecognitionCancelledError",
    "RecognizedChunk",
    "SafetensorsError",
    "Segment",
    "TimingMethod",
    "Transcript",
    "UnsupportedLanguageError",
    "Word",
    "WrittenUnit",
    "languages_by_time",
    "load_config",
    "options_from",
    "spoken_units",
    "written_units",
]
