"""--speakers and --max-pause on every verb that transcribes files, and on diarize."""

from __future__ import annotations

import pytest

from onespeech.speech.cli import build_parser, transcriber_options

VERBS = ["transcribe", "batch"]


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize(
    ("given", "speakers"), [(None, "auto"), ("auto", "auto"), ("AUTO", "auto"), ("off", False), ("3", 3), ("64", 64)]
)
def test_speakers_reaches_the_transcriber(verb: str, given: str | None, speakers: object) -> None:
    argv = [verb, "a.wav"] + ([] if given is None else ["--speakers", given])
    options = transcriber_options(build_parser().parse_args(argv))
    assert options["speakers"] == speakers and options["max_pause"] == 2.0


@pytest.mark.parametrize("verb", VERBS)
def test_max_pause_reaches_the_transcriber(verb: str) -> None:
    args = build_parser().parse_args([verb, "a.wav", "--max-pause", "0.5", "--speakers", "2"])
    options = transcriber_options(args)
    assert (options["speakers"], options["max_pause"]) == (2, 0.5)


@pytest.mark.parametrize("verb", [*VERBS, "diarize"])
@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--speakers", "0", "number of speakers from 1 to 64"),
        ("--speakers", "65", "number of speakers from 1 to 64"),
        ("--speakers", "two", "number of speakers from 1 to 64"),
        ("--speakers", "2.5", "number of speakers from 1 to 64"),
        ("--max-pause", "-1", "a number from 0 to 3600 (seconds)"),
        ("--max-pause", "nan", "a number from 0 to 3600 (seconds)"),
        ("--max-pause", "inf", "a number from 0 to 3600 (seconds)"),
        ("--max-pause", "soon", "a number from 0 to 3600 (seconds)"),
        ("--max-pause", "3601", "a number from 0 to 3600 (seconds)"),
    ],
)
def test_bad_values_are_usage_errors(
    verb: str, option: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([verb, "a.wav", option, value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}" in err and message in err


def test_diarize_has_no_off(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["diarize", "a.wav", "--speakers", "off"])
    assert "'auto', a number of speakers from 1 to 64" in capsys.readouterr().err
    args = build_parser().parse_args(["diarize", "a.wav", "--speakers", "4", "--max-pause", "1"])
    assert (args.speakers, args.max_pause, args.format) == (4, 1.0, "rttm")


@pytest.mark.parametrize("verb", ["stream", "serve"])
def test_verbs_that_attribute_no_speakers_have_no_speaker_options(verb: str) -> None:
    args = build_parser().parse_args([verb] + (["-"] if verb == "stream" else []))
    assert not hasattr(args, "speakers")
    assert "speakers" not in transcriber_options(args)


def test_diarize_refuses_an_unknown_format(capsys: pytest.CaptureFixture[str]) -> None:
    from onespeech.speech.cli import main

    assert main(["diarize", "a.wav", "-f", "rttm,srt"]) == 2
    assert "use rttm, json (comma-separated) or all" in capsys.readouterr().err
