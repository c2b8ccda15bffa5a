"""TranscribeOptions: one options type, checked once, whose fields are the CLI's flags."""

from __future__ import annotations

import argparse
from dataclasses import fields, replace

import pytest

from onespeech.speech.cli import build_parser, options_from_args
from onespeech.speech.options import DEFAULT_ALIGNER, DEFAULT_MODEL, TranscribeOptions

FLAGGED = [f for f in fields(TranscribeOptions) if "flag" in f.metadata]


def _flags(verb: str) -> dict[str, argparse.Action]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[verb]
    return {a.dest: a for a in sub._actions}


def test_defaults() -> None:
    options = TranscribeOptions()
    assert (options.model, options.aligner, options.speakers, options.max_pause) == (
        DEFAULT_MODEL, DEFAULT_ALIGNER, "auto", 2.0)


@pytest.mark.parametrize("verb", ["transcribe", "batch", "stream", "serve"])
def test_every_flagged_field_is_a_flag_of_every_verb_that_transcribes(verb: str) -> None:
    actions = _flags(verb)
    for spec in FLAGGED:
        if spec.metadata["flag"].group == "speakers" and verb in ("stream", "serve"):
            assert spec.name not in actions  # finals and server defaults come from elsewhere
            continue
        assert spec.name in actions, f"{verb} has no flag for {spec.name}"
        assert actions[spec.name].option_strings[-1] == spec.metadata["flag"].names[-1]


@pytest.mark.parametrize("verb", ["transcribe", "batch", "serve"])
def test_the_parsed_defaults_are_the_options_defaults(verb: str) -> None:
    args = build_parser().parse_args([verb] + (["a.wav"] if verb != "serve" else []))
    assert options_from_args(args) == TranscribeOptions()


def test_stream_times_words_as_transcribe_does_unless_told_none() -> None:
    args = build_parser().parse_args(["stream", "-"])
    assert options_from_args(args) == TranscribeOptions()
    args = build_parser().parse_args(["stream", "-", "--aligner", "none"])
    assert options_from_args(args) == TranscribeOptions(aligner=None)
    args = build_parser().parse_args(["stream", "-", "--aligner", "my-aligner"])
    assert options_from_args(args).aligner == "my-aligner"


def test_flags_reach_the_options() -> None:
    args = build_parser().parse_args(
        ["transcribe", "a.wav", "-m", "m", "-l", "de", "--aligner", "NONE", "--threads", "3", "--precision", "bf16",
         "--context", "names", "--max-new-tokens", "9", "--vad", "v.onnx", "--speakers", "off", "--max-pause", "1"])
    assert options_from_args(args) == TranscribeOptions(
        model="m", language="de", aligner=None, threads=3, precision="bf16", context="names", max_new_tokens=9,
        vad="v.onnx", speakers=False, max_pause=1.0)


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"max_new_tokens": 0}, ValueError, "max_new_tokens"),
        ({"precision": "fp8"}, ValueError, "precision"),
        ({"speakers": "many"}, ValueError, "speakers"),
        ({"max_pause": float("nan")}, ValueError, "max_pause"),
        ({"threads": 0}, ValueError, "thread"),
        ({"threads": True}, TypeError, "threads"),
        ({"language": 3}, TypeError, "language"),
        ({"context": b"x"}, TypeError, "context"),
        ({"model": 3}, TypeError, "model"),
        ({"vad": 3}, TypeError, "vad"),
        ({"vad_options": {}}, TypeError, "vad_options"),
        ({"speaker": 2}, TypeError, "unknown transcription option"),
    ],
)
def test_bad_values_are_refused_where_the_options_are_made(changes: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        TranscribeOptions.build(**changes)
    with pytest.raises(error, match=match):
        TranscribeOptions.build(TranscribeOptions(), **changes)


def test_build_is_replace_and_normalizes() -> None:
    base = TranscribeOptions(language="en")
    built = TranscribeOptions.build(base, threads=2)
    assert built == replace(base, threads=2) and built.language == "en"
    from pathlib import Path

    assert TranscribeOptions(model=Path("/m"), max_pause=1).model == "/m"
    assert TranscribeOptions(max_pause=1).max_pause == 1.0 and isinstance(TranscribeOptions(max_pause=1).max_pause,
                                                                          float)


def test_plain_json_round_trip() -> None:
    import json

    options = TranscribeOptions(model="m", language="en", aligner=None, threads=2, speakers=3, vad="v.onnx")
    data = json.loads(json.dumps(options.to_dict()))
    assert TranscribeOptions.from_dict(data) == options


def test_server_config_holds_the_options_and_refuses_unknown_keywords() -> None:
    pytest.importorskip("starlette", reason="needs onespeech-speech[server] (tox.ini py env)")
    from onespeech.speech.server import ServerConfig

    config = ServerConfig(model="m", aligner=None, threads=1, workers=2)
    assert config.options == TranscribeOptions(model="m", aligner=None, threads=1) and config.workers == 2
    assert replace(config, workers=3).options == config.options
    with pytest.raises(TypeError, match="unknown transcription option"):
        ServerConfig(worker=2)
    with pytest.raises(ValueError, match="speakers"):
        ServerConfig(speakers=0)


def test_the_server_backend_refuses_unknown_request_settings() -> None:
    pytest.importorskip("starlette", reason="needs onespeech-speech[server] (tox.ini py env)")
    import inspect

    from onespeech.speech.server import Backend

    kinds = {p.kind for p in inspect.signature(Backend.transcribe).parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds


@pytest.mark.parametrize("verb", ["transcribe", "batch", "stream", "serve"])
def test_decode_memory_flag_takes_auto_or_mib_and_its_help_says_auto(verb: str) -> None:
    args = [verb] + (["a.wav"] if verb != "serve" else [])
    parser = build_parser()
    assert parser.parse_args(args).decode_memory_mb is None  # the default: auto
    assert parser.parse_args([*args, "--decode-memory-mb", "AUTO"]).decode_memory_mb is None
    assert options_from_args(parser.parse_args([*args, "--decode-memory-mb", "64"])).decode_memory_mb == 64
    action = _flags(verb)["decode_memory_mb"]
    assert action.metavar == "MIB|auto" and "default auto" in (action.help or "")


@pytest.mark.parametrize("value", ["0", "x", "1.5", "", "2000000"])
def test_a_bad_decode_memory_flag_names_what_is_allowed(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["transcribe", "a.wav", "--decode-memory-mb", value])
    assert (f"argument --decode-memory-mb: {value!r} is not allowed; give auto or a whole number from 1 to 1048576 "
            "(MiB)") in capsys.readouterr().err
