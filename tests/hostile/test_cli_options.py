"""Every numeric option of every ``onespeech`` verb refuses what it cannot mean with one usage error.

``serve --max-upload-mb`` took ``inf`` and ``nan`` (a traceback later), ``-5``, ``0`` and
``1e-9`` (a limit of one byte). The options are found by walking the parser, so a
verb added later is held to the same rule: a numeric option's ``type`` is a
:class:`onespeech.speech.cli.NumberOption`, never bare ``int`` or ``float``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onespeech.speech.cli import NumberOption, build_parser
from onespeech.speech.flags import AutoOr


@dataclass(frozen=True)
class Numeric:
    verb: tuple[str, ...]
    positionals: tuple[str, ...]  # placeholders for the verb's positional arguments
    flag: str
    kind: NumberOption
    auto: bool = False  # "auto" is taken too (an AutoOr: None, the option's automatic value)

    def __str__(self) -> str:
        return f"{' '.join(self.verb)} {self.flag}"


def _walk(parser: argparse.ArgumentParser, verb: tuple[str, ...]) -> list[tuple[tuple[str, ...], argparse.Action]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _walk(sub, (*verb, name))
        else:
            found.append((verb, action))
    return found


def _numeric_options() -> list[Numeric]:
    parser = build_parser()
    actions = _walk(parser, ())
    by_verb: dict[tuple[str, ...], list[argparse.Action]] = {}
    for verb, action in actions:
        by_verb.setdefault(verb, []).append(action)
    out = []
    for verb, verb_actions in by_verb.items():
        positionals = tuple("x" for a in verb_actions if not a.option_strings and a.nargs != 0)
        for action in verb_actions:
            if isinstance(action.type, NumberOption):
                out.append(Numeric(verb, positionals, action.option_strings[-1], action.type))
            elif isinstance(action.type, AutoOr):
                out.append(Numeric(verb, positionals, action.option_strings[-1], action.type.number, auto=True))
    return out


NUMERIC = _numeric_options()


def _parse(option: Numeric, value: str) -> tuple[int | None, str, object]:
    """(exit code or None, stderr, parsed value) of ``onespeech VERB --flag=VALUE``."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            args = build_parser().parse_args([*option.verb, *option.positionals, f"{option.flag}={value}"])
        except SystemExit as stop:
            return int(stop.code or 0), stderr.getvalue(), None
    dest = next(a.dest for _, a in _walk(build_parser(), ()) if option.flag in a.option_strings)
    return None, stderr.getvalue(), getattr(args, dest)


def test_every_numeric_option_is_validated() -> None:
    verbs = {option.verb[0] for option in NUMERIC}
    assert {"transcribe", "batch", "stream", "serve"} <= verbs
    flags = {str(option) for option in NUMERIC}
    assert {"serve --max-upload-mb", "serve --port", "serve --read-timeout", "serve --idle-timeout",
            "serve --max-audio-seconds", "batch --workers", "transcribe --threads",
            "transcribe --max-new-tokens", "transcribe --decode-batch", "transcribe --decode-memory-mb",
            "batch --decode-batch", "serve --decode-batch"} <= flags
    for verb, action in _walk(build_parser(), ()):
        assert action.type not in (int, float), f"{' '.join(verb)} {action.option_strings}: bare {action.type}"


def _bad_values(kind: NumberOption) -> st.SearchStrategy[str]:
    words = st.sampled_from(["nan", "NaN", "inf", "-inf", "+inf", "infinity", "1e400", "-1e400", "abc", "", " ",
                             "0x10", "1,5", "½", "١"])
    below = st.floats(max_value=kind.low, exclude_max=True, allow_nan=False, allow_infinity=False)
    above = st.floats(min_value=kind.high, exclude_min=True, allow_nan=False, allow_infinity=False)
    strategies = [words, below.map(repr), above.map(repr)]
    if kind.whole:
        inside = st.floats(min_value=kind.low, max_value=kind.high).filter(lambda v: v != int(v))
        strategies += [inside.map(repr), st.integers(max_value=int(kind.low) - 1).map(str),
                       st.integers(min_value=int(kind.high) + 1).map(str)]
    return st.one_of(strategies)


@pytest.mark.parametrize("option", NUMERIC, ids=str)
def test_bad_values_are_one_usage_error_naming_the_flag(option: Numeric) -> None:
    @settings(max_examples=40, deadline=None)
    @given(value=_bad_values(option.kind))
    def check(value: str) -> None:
        code, stderr, _ = _parse(option, value)
        assert code == 2, (value, stderr)
        assert "Traceback" not in stderr
        last = stderr.strip().splitlines()[-1]
        assert last.startswith(f"onespeech {' '.join(option.verb)}: error: argument {option.flag}"), last
        assert option.kind.allowed() in last, last

    check()


@pytest.mark.parametrize("option", [o for o in NUMERIC if o.auto], ids=str)
@pytest.mark.parametrize("value", ["auto", "AUTO", " Auto "])
def test_auto_options_take_auto_as_none(option: Numeric, value: str) -> None:
    code, stderr, parsed = _parse(option, value)
    assert code is None and parsed is None, stderr


@pytest.mark.parametrize("value", ["inf", "nan", "-5", "0", "1e-9"])
def test_the_reported_upload_limits_are_refused(value: str) -> None:
    (option,) = [o for o in NUMERIC if str(o) == "serve --max-upload-mb"]
    code, stderr, _ = _parse(option, value)
    assert code == 2 and "give a number from 0.01 to 2048 (MiB)" in stderr


@pytest.mark.parametrize("option", NUMERIC, ids=str)
def test_values_in_range_are_taken_as_given(option: Numeric) -> None:
    kind = option.kind
    values = st.integers(int(kind.low), int(kind.high)) if kind.whole else st.floats(kind.low, kind.high)

    @settings(max_examples=20, deadline=None)
    @given(value=values)
    def check(value: float) -> None:
        code, stderr, parsed = _parse(option, str(value))
        assert code is None, stderr
        assert parsed == value and (isinstance(parsed, int) if kind.whole else math.isfinite(parsed))

    check()
