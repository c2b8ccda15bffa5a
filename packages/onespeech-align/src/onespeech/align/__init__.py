"""Qwen3-ForcedAligner and the timing dispatcher.

- :class:`Qwen3ForcedAligner` with :class:`Qwen3AlignerOptions`: word times from one
  forward pass (``aligner.py``).
- unit rules: ``onespeech.qwen3.written_units`` (a written unit is the same for the
  recognizer's words and the aligner's units).
- :class:`TimingDispatcher` (``timing.py``): picks the timing stage for a language;
  stages load their models only when first used. ``time`` times a transcript's
  words; ``time_text`` takes text, language and samples and returns the timed words
  (:class:`WordTiming`).

The aligner is built on ``onespeech.qwen3``'s exported names only (its
:class:`~onespeech.qwen3.Qwen3Backbone`), never on that package's internals.

The aligner shares the input checks, and their errors, of the layers below: see
:mod:`onespeech.align.errors`.
"""

from onespeech.align.aligner import Qwen3AlignerOptions, Qwen3ForcedAligner
from onespeech.align.errors import (
    AlignmentCancelledError,
    AlignmentInputError,
    LanguageRequiredError,
    TooManyTokensError,
    TooManyUnitsError,
)
from onespeech.align.languages import ALIGNER_LANGUAGES
from onespeech.align.timing import (
    ForcedAlignerStage,
    TimingDispatcher,
    TimingOutcome,
    TimingStage,
    WordTiming,
    default_dispatcher,
)

__version__ = "0.1.0"

__all__ = [
    "ALIGNER_LANGUAGES",
    "AlignmentCancelledError",
    "AlignmentInputError",
    "ForcedAlignerStage",
    "LanguageRequiredError",
    "Qwen3AlignerOptions",
    "Qwen3ForcedAligner",
    "TimingDispatcher",
    "TimingOutcome",
    "TimingStage",
    "TooManyTokensError",
    "TooManyUnitsError",
    "WordTiming",
    "default_dispatcher",
]
