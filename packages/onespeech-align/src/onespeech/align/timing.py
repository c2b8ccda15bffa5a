"""The timing dispatcher: which stage supplies word times for a transcript.

Stages are tried in order; the first that supports the language times the
transcript. Today there is one stage, Qwen3-ForcedAligner, for its eleven
languages. CTC/DTW timing would come next; until such a stage exists, transcripts in
other languages keep ``None`` times and the outcome says why. A stage holds no model
until it is first asked to time something, so building a dispatcher (or a
recognizer that carries one) never downloads or loads a timing model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from onespeech.qwen3 import TimingMethod

from .languages import ALIGNER_LANGUAGES, is_aligner_language

if TYPE_CHECKING:
    import numpy as np

    from onespeech.kernels.cancel import Cancel
    from onespeech.qwen3 import Transcript, Word

    from .aligner import Qwen3AlignerOptions, Qwen3ForcedAligner


class TimingStage(Protocol):
    """A source of word times for some languages."""

    name: str
    method: TimingMethod  # what the stage's timed words (and segments) say timed them

    def supports(self, language: str) -> bool:
        """True if this stage can time ``language``."""
        ...

    def time(
        self, audio: np.ndarray, transcript: Transcript, language: str, cancel: Cancel = None
    ) -> Transcript:
        """Return ``transcript`` with word times filled in where the stage could."""
        ...

    def time_text(self, audio: np.ndarray, text: str, language: str, cancel: Cancel = None) -> tuple[Word, ...]:
        """The written units of ``text`` as words, timed in ``audio`` where the stage could."""
        ...

    def load(self, cancel: Cancel = None) -> None:
        """Load the stage's model now (otherwise it is loaded at its first use)."""
        ...

    def close(self) -> None:
        """Release any model the stage loaded."""
        ...


@dataclass(frozen=True)
class TimingOutcome:
    """What the dispatcher did.

    Attributes
    ----------
    transcript : Transcript
        The timed transcript, or the input unchanged when no stage applied.
    stage : str | None
        Name of the stage that ran, or None.
    reason : str | None
        Why the times stay None when no stage ran.
    """

    transcript: Transcript
    stage: str | None
    reason: str | None = None


@dataclass(frozen=True)
class WordTiming:
    """What :meth:`TimingDispatcher.time_text` did.

    Attributes
    ----------
    words : tuple of Word
        The text's written units with times (seconds from the audio's first
        sample); empty when no stage ran.
    stage : str | None
        Name of the stage that ran, or None.
    reason : str | None
        Why no stage ran.
    """

    words: tuple[Word, ...]
    stage: str | None
    reason: str | None = None


class TimingDispatcher:
    """Picks the first stage that supports a language and runs it."""

    def __init__(self, stages: Sequence[TimingStage]) -> None:
        self.stages = tuple(stages)

    def select(self, language: str | None) -> TimingStage | None:
        """The stage that would time ``language``, or None."""
        if not language:
            return None
        return next((stage for stage in self.stages if stage.supports(language)), None)

    def time(
        self, audio: np.ndarray, transcript: Transcript, language: str | None = None, cancel: Cancel = None
    ) -> TimingOutcome:
        """Time ``transcript`` (its own language unless ``language`` is given).

        Parameters
        ----------
        audio : ndarray[float32], shape (n_samples,)
            16 kHz mono PCM that the transcript covers.
        transcript : Transcript
            Words to time; only timing fields change.
        language : str | None
            Language tag; defaults to ``transcript.language``.
        cancel : threading.Event | callable | None
            Cancellation token, checked between stages of work.
        """
        language = language or transcript.language
        stage = self.select(language)
        if stage is None or language is None:
            return TimingOutcome(transcript, None, self._why_untimed(language))
        return TimingOutcome(stage.time(audio, transcript, language, cancel), stage.name)

    def time_text(self, audio: np.ndarray, text: str, language: str | None, cancel: Cancel = None) -> WordTiming:
        """Time the written units of ``text`` in ``audio``: words without building a transcript.

        The same words and times as :meth:`time` gives for a transcript of ``text``
        without words. With no stage for ``language`` (or none given) no model is
        loaded and ``reason`` says why.
        """
        stage = self.select(language)
        if stage is None or language is None:
            return WordTiming((), None, self._why_untimed(language))
        return WordTiming(stage.time_text(audio, text, language, cancel), stage.name)

    def load(self, language: str | None = None, cancel: Cancel = None) -> None:
        """Load now the model of the stage that would time ``language`` (every stage's when None).

        For one-pass sessions that keep their timing stage loaded from the start, so the
        first timed result does not wait for a model load. A language no stage supports
        loads nothing.
        """
        stages = self.stages if language is None else [s for s in (self.select(language),) if s is not None]
        for stage in stages:
            stage.load(cancel)

    def close(self) -> None:
        """Release every stage's model."""
        for stage in self.stages:
            stage.close()

    def _why_untimed(self, language: str | None) -> str:
        if not language:
            return "no language is known for this transcript, so no timing stage can be chosen"
        names = ", ".join(stage.name for stage in self.stages) or "none"
        return (
            f"no timing stage supports language {language!r} (stages: {names}); "
            f"Qwen3-ForcedAligner covers {', '.join(ALIGNER_LANGUAGES)} and no CTC/DTW "
            "stage exists yet, so word times stay None"
        )


class ForcedAlignerStage:
    """Qwen3-ForcedAligner as a timing stage, loaded on first use.

    Parameters
    ----------
    directory : path or callable returning a path
        The aligner's model directory (publisher files or runtime files). A callable
        is called only when the model is first needed (it may fetch the model).
    options : Qwen3AlignerOptions, optional
        Precision and threads of the aligner.
    """

    name = "qwen3-forced-aligner"
    method = TimingMethod.FORCED_ALIGNER

    def __init__(
        self, directory: str | Path | Callable[[], str | Path], options: Qwen3AlignerOptions | None = None
    ) -> None:
        self._directory = directory
        self._options = options
        self._aligner: Qwen3ForcedAligner | None = None

    @property
    def loaded(self) -> bool:
        """True while the aligner model is in memory."""
        return self._aligner is not None

    def supports(self, language: str) -> bool:
        return is_aligner_language(language)

    def time(
        self, audio: np.ndarray, transcript: Transcript, language: str, cancel: Cancel = None
    ) -> Transcript:
        return self._load(cancel).align_transcript(audio, transcript, language, cancel=cancel)

    def time_text(self, audio: np.ndarray, text: str, language: str, cancel: Cancel = None) -> tuple[Word, ...]:
        return self._load(cancel).align_words(audio, text, language, cancel=cancel)

    def load(self, cancel: Cancel = None) -> None:
        self._load(cancel)

    def close(self) -> None:
        if self._aligner is not None:
            self._aligner.close()
            self._aligner = None

    def _load(self, cancel: Cancel) -> Qwen3ForcedAligner:
        if self._aligner is None:
            from .aligner import Qwen3ForcedAligner

            directory = self._directory() if callable(self._directory) else self._directory
            self._aligner = Qwen3ForcedAligner.load(directory, self._options, cancel=cancel)
        return self._aligner


def default_dispatcher(
    alignment_directory: str | Path | Callable[[], str | Path], options: Qwen3AlignerOptions | None = None
) -> TimingDispatcher:
    """The shared dispatcher: Qwen3-ForcedAligner first (CTC/DTW would follow)."""
    return TimingDispatcher([ForcedAlignerStage(alignment_directory, options)])
