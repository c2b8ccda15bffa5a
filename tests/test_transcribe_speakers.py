"""transcribe(speakers=...) end to end: every word and segment gets a speaker after both models are released."""

from __future__ import annotations

import pytest

from onespeech.speech import Transcriber

BUDGET = 256


@pytest.fixture(scope="module")
def documents(runtime_dirs, vad_path, clips):  # type: ignore[no-untyped-def]
    out = {}
    for speakers, max_pause in (("auto", 2.0), (2, 2.0), (False, 2.0), ("auto", 0.0)):
        with Transcriber(
            runtime_dirs.asr,
            aligner=runtime_dirs.aligner,
            max_new_tokens=BUDGET,
            threads=1,
            progress=False,
            vad=vad_path,
            language="en",
            speakers=speakers,
            max_pause=max_pause,
        ) as t:
            out[speakers if max_pause == 2.0 else (speakers, max_pause)] = t.transcribe(clips["joined"])
    return out


def test_every_word_and_segment_has_a_speaker(documents) -> None:  # type: ignore[no-untyped-def]
    doc = documents["auto"]
    assert doc.segments and doc.words
    labels = [s.label for s in doc.speakers]
    assert labels == [f"SPEAKER_{k:02d}" for k in range(len(labels))] and len(labels) >= 2
    assert all(s.duration > 0 for s in doc.speakers)
    assert all(w.speaker in labels for w in doc.words) and all(s.speaker in labels for s in doc.segments)
    first = []
    for w in doc.words:
        if w.speaker not in first:
            first.append(w.speaker)
    assert first == labels[: len(first)]  # numbered in order of first appearance


def test_speaker_count_and_off(documents) -> None:  # type: ignore[no-untyped-def]
    assert len(documents[2].speakers) == 2
    off = documents[False]
    assert off.speakers == [] and all(w.speaker is None for w in off.words)
    # the stage only adds speakers: text, segments and times are those of the run without it
    stripped = [
        (s.start, s.end, s.text, [(w.text, w.start, w.end) for w in s.words])
        for s in documents["auto"].segments
    ]
    assert stripped == [
        (s.start, s.end, s.text, [(w.text, w.start, w.end) for w in s.words]) for s in off.segments
    ]


def test_the_encoder_loads_only_after_the_recognizer_and_aligner_close(
    runtime_dirs, vad_path, clips, monkeypatch
):  # type: ignore[no-untyped-def]
    from onespeech.align import timing
    from onespeech.features import speaker_model
    from onespeech.qwen3 import Qwen3Recognizer

    events: list[str] = []
    close_recognizer = Qwen3Recognizer.close
    monkeypatch.setattr(
        Qwen3Recognizer, "close", lambda self: (events.append("recognizer closed"), close_recognizer(self))[1]
    )
    close_dispatcher = timing.TimingDispatcher.close
    monkeypatch.setattr(
        timing.TimingDispatcher,
        "close",
        lambda self: (events.append("aligner closed"), close_dispatcher(self))[1],
    )
    load = speaker_model.load_speaker_encoder
    monkeypatch.setattr(
        speaker_model, "load_speaker_encoder", lambda **kw: (events.append("encoder loaded"), load(**kw))[1]
    )
    with Transcriber(
        runtime_dirs.asr,
        aligner=runtime_dirs.aligner,
        max_new_tokens=BUDGET,
        threads=1,
        progress=False,
        vad=vad_path,
        language="en",
    ) as t:
        t.transcribe(clips["flac"])
    assert events.index("encoder loaded") > events.index("recognizer closed")
    assert events.index("encoder loaded") > events.index("aligner closed")


def test_the_streamed_speaker_pass_gives_the_stage_of_the_whole_file(documents, vad_path, clips) -> None:  # type: ignore[no-untyped-def]
    """transcribe replays the file in blocks through the stage; the document is the one the
    stage gives over the whole decoded file (packages/onespeech-speech/tests/test_diarize_real.py
    shows that equals the stage as it ran on one array before it streamed)."""
    from onespeech.features import SileroVad, load_audio
    from onespeech.features.speaker_model import load_speaker_encoder
    from onespeech.speech.speakers import Diarizer, attribute_speakers

    diarizer = Diarizer(load_speaker_encoder(threads=1), SileroVad.load(vad_path))
    turns = diarizer(load_audio(clips["joined"]), "auto")
    assert len({t.speaker for t in turns}) >= 2
    assert attribute_speakers(documents[False], turns) == documents["auto"]


def test_max_pause_reaches_the_speaker_pass(documents, vad_path, clips) -> None:  # type: ignore[no-untyped-def]
    from onespeech.features import SileroVad, load_audio
    from onespeech.features.speaker_model import load_speaker_encoder
    from onespeech.speech.speakers import DiarizationOptions, Diarizer, attribute_speakers

    diarizer = Diarizer(load_speaker_encoder(threads=1), SileroVad.load(vad_path), DiarizationOptions(max_pause=0.0))
    turns = diarizer(load_audio(clips["joined"]), "auto")
    assert attribute_speakers(documents[False], turns) == documents[("auto", 0.0)]
    # a speaker's pauses count in their turns by default: more speaker time than without them
    total = {key: sum(s.duration for s in documents[key].speakers) for key in ("auto", ("auto", 0.0))}
    assert total["auto"] > total[("auto", 0.0)]
