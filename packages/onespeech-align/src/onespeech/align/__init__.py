"""Qwen3-ForcedAligner and the timing dispatcher.

- :class:`Qwen3ForcedAligner`: word times from one forward pass (``aligner.py``).
- unit rules (``units.py``): what a written and a spoken unit is, per language.
- :class:`TimingDispatcher` (``timing.py``): picks the timing stage for a language;
  stages load their models only when first used.
"""

from onespeech.align.aligner import Qwen3ForcedAligner
from onespeech.align.errors import (
    AlignmentCancelledError,
    AlignmentInputError,
    AudioLengthError,
    LanguageRequiredError,
    ModelKindError,
    TextEncodingError,
    TextTooLongError,
    TooManyUnitsError,
    UnsupportedLanguageError,
)
from onespeech.align.languages import ALIGNER_LANGUAGES
from onespeech.align.timing import (
    ForcedAlignerStage,
    TimingDispatcher,
    TimingOutcome,
    TimingStage,
    default_dispatcher,
)

__version__ = "0.1.0"

__all__ = [
    "ALIGNER_LANGUAGES",
    "AlignmentCancelledError",
    "AlignmentInputError",
    "AudioLengthError",
    "ForcedAlignerStage",
    "LanguageRequiredError",
    "ModelKindError",
    "Qwen3ForcedAligner",
    "TextEncodingError",
    "TextTooLongError",
    "TimingDispatcher",
    "TimingOutcome",
    "TimingStage",
    "TooManyUnitsError",
    "UnsupportedLanguageError",
    "default_dispatcher",
]
