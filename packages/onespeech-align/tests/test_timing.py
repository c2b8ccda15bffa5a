"""The timing dispatcher: stage choice per language, lazy loading, untimed outcomes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from onespeech.align import (
    ALIGNER_LANGUAGES,
    ForcedAlignerStage,
    Qwen3AlignerOptions,
    TimingDispatcher,
    default_dispatcher,
)
from onespeech.align import aligner as aligner_module
from onespeech.qwen3.transcript import Segment, TimingMethod, Transcript, Word


def _transcript(text: str, language: str, *words: Word) -> Transcript:
    """A one-segment transcript whose segment holds ``words``."""
    return Transcript(text, language, (Segment(0.0, 1.0, text, language, words),))


TRANSCRIPT = _transcript("hello world", "en", Word("hello", confidence=0.5), Word("world"))


class _FakeAligner:
    loads = 0
    closed = 0

    @classmethod
    def load(cls, directory, options=None, cancel=None):
        cls.loads += 1
        return cls()

    def align_transcript(self, audio, transcript, language, cancel=None):
        segments = tuple(replace(s, words=tuple(Word(w.text, 0.0, 0.08, w.confidence, TimingMethod.FORCED_ALIGNER)
                                                for w in s.words)) for s in transcript.segments)
        return Transcript(transcript.text, transcript.language, segments)

    def close(self):
        type(self).closed += 1


@pytest.fixture
def fake_aligner(monkeypatch):
    class Fake(_FakeAligner):
        loads = 0
        closed = 0

    monkeypatch.setattr(aligner_module, "Qwen3ForcedAligner", Fake)
    return Fake


@pytest.mark.parametrize("language", sorted(ALIGNER_LANGUAGES))
def test_forced_aligner_is_chosen_for_its_eleven_languages(language):
    assert default_dispatcher("/nowhere").select(language).name == "qwen3-forced-aligner"


@pytest.mark.parametrize("language", ["nl", "ar", "th", "hi", None, ""])
def test_other_languages_get_no_stage(language):
    assert default_dispatcher("/nowhere").select(language) is None


def test_untimed_outcome_says_why_and_keeps_transcript():
    transcript = _transcript("hallo wereld", "nl", Word("hallo"), Word("wereld"))
    outcome = default_dispatcher("/nowhere").time(np.zeros(16000, np.float32), transcript)
    assert outcome.transcript is transcript and outcome.stage is None
    assert "'nl'" in outcome.reason and "no CTC/DTW" in outcome.reason
    assert all(w.start is None for w in outcome.transcript.words)


def test_unknown_language_outcome_says_why():
    outcome = default_dispatcher("/nowhere").time(np.zeros(16000, np.float32), Transcript("x", None))
    assert outcome.stage is None and "no language" in outcome.reason


def test_stage_loads_only_when_called_and_once(fake_aligner):
    located = []

    def locate():
        located.append(1)
        return "/models/aligner"

    dispatcher = default_dispatcher(locate)
    stage = dispatcher.stages[0]
    assert not stage.loaded and fake_aligner.loads == 0 and located == []
    outcome = dispatcher.time(np.zeros(16000, np.float32), TRANSCRIPT)
    assert outcome.stage == "qwen3-forced-aligner" and outcome.reason is None
    assert [w.timing_method for w in outcome.transcript.words] == [TimingMethod.FORCED_ALIGNER] * 2
    assert outcome.transcript.words[0].confidence == 0.5
    dispatcher.time(np.zeros(16000, np.float32), TRANSCRIPT, "fr")
    assert fake_aligner.loads == 1 and located == [1] and stage.loaded
    dispatcher.close()
    assert fake_aligner.closed == 1 and not stage.loaded


def test_untimed_language_never_loads_the_aligner(fake_aligner):
    dispatcher = default_dispatcher("/models/aligner")
    dispatcher.time(np.zeros(16000, np.float32), TRANSCRIPT, "nl")
    assert fake_aligner.loads == 0


def test_load_loads_the_stage_for_a_language_now(fake_aligner):
    dispatcher = default_dispatcher("/models/aligner")
    dispatcher.load("nl")  # no stage times Dutch: nothing to load
    assert fake_aligner.loads == 0 and not dispatcher.stages[0].loaded
    dispatcher.load("de")
    assert fake_aligner.loads == 1 and dispatcher.stages[0].loaded
    dispatcher.load()  # every stage; already loaded ones stay as they are
    dispatcher.time(np.zeros(16000, np.float32), TRANSCRIPT)
    assert fake_aligner.loads == 1
    dispatcher.close()
    dispatcher.load()
    assert fake_aligner.loads == 2


def test_stages_are_tried_in_order():
    class Stage:
        def __init__(self, name, languages):
            self.name, self.languages = name, languages

        def supports(self, language):
            return language in self.languages

        def time(self, audio, transcript, language, cancel=None):
            return transcript

        def close(self):
            pass

    dispatcher = TimingDispatcher([ForcedAlignerStage("/x"), Stage("ctc", {"en", "nl"})])
    assert dispatcher.select("en").name == "qwen3-forced-aligner"
    assert dispatcher.select("nl").name == "ctc"


def test_forced_aligner_stage_on_the_tiny_checkpoint(tiny_aligner_dir, speech):
    stage = ForcedAlignerStage(tiny_aligner_dir, Qwen3AlignerOptions(threads=1))
    timed = TimingDispatcher([stage]).time(speech, _transcript("the apostle", "en", Word("the"), Word("apostle")))
    assert timed.stage == stage.name and [w.text for w in timed.transcript.words] == ["the", "apostle"]
    stage.close()
