"""The ``onespeech`` command line.

Each subcommand is a module of :mod:`onespeech.speech.commands` with
``register(subparsers)`` (adds its parser and sets ``func=run``) and
``run(args) -> int``. Modules are found by listing the package, so adding a
command means adding a file; ``ORDER`` (default 100) sorts them in the help.
Exit status: 0 success, 1 failure, 2 usage error.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from onespeech.speech import __version__, flags
from onespeech.speech.flags import NumberOption, speakers_type

if TYPE_CHECKING:
    from onespeech.speech.options import TranscribeOptions

__all__ = [
    "COMMANDS",
    "NumberOption",
    "add_model_options",
    "add_option_flags",
    "add_speaker_options",
    "build_parser",
    "main",
    "options_from_args",
    "progress_from_args",
    "transcriber_options",
]


def _command_modules() -> list[ModuleType]:
    from onespeech.speech import commands

    modules = [
        importlib.import_module(f"{commands.__name__}.{info.name}")
        for info in pkgutil.iter_modules(commands.__path__)
        if not info.name.startswith("_")
    ]
    return sorted(modules, key=lambda m: (getattr(m, "ORDER", 100), m.__name__))


#: The subcommand modules, in help order; filled by :func:`build_parser`.
COMMANDS: list[ModuleType] = []


def build_parser() -> argparse.ArgumentParser:
    """The ``onespeech`` argument parser, with one subcommand per module in :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(prog="onespeech", description="OneSpeech: speech to text on the CPU.")
    parser.add_argument("--version", action="version", version=f"onespeech {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    COMMANDS[:] = _command_modules()
    for module in COMMANDS:
        module.register(sub)
    return parser


def add_model_options(
    parser: argparse.ArgumentParser,
    *,
    outputs: bool = True,
    speakers: bool | None = None,
) -> None:
    """The options shared by every command that transcribes.

    One flag per field of :class:`onespeech.speech.options.TranscribeOptions` that
    declares one (-m/--model, -l/--language, --aligner, --threads, --precision,
    --context, --max-new-tokens, --vad; and --speakers and --max-pause, see
    :func:`add_speaker_options`), then -f/--format, -o/--output-dir and -q/--quiet.
    Turn the parsed values into options with :func:`options_from_args`.
    ``outputs=False`` leaves out -f and -o (commands that write no files, such as
    ``stream`` and ``serve``); ``speakers`` adds the speaker options (default: as
    ``outputs``, the commands that transcribe files). Every default is the field's
    own, so each command starts from ``TranscribeOptions()``.
    """
    from onespeech.speech.writers import FORMATS

    add_option_flags(parser, "model")
    if outputs:
        parser.add_argument("-f", "--format", default="txt",
                            help=f"output formats, comma-separated: {','.join(FORMATS)} or all (default txt)")
        parser.add_argument("-o", "--output-dir", default=".", help="where outputs go (default: current directory)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars or per-file lines")
    if outputs if speakers is None else speakers:
        add_speaker_options(parser)


def add_speaker_options(parser: argparse.ArgumentParser, *, off: bool = True) -> None:
    """--speakers auto|N|off and --max-pause SECONDS (``off=False``: no "off", as for ``diarize``)."""
    from onespeech.speech.flags import Flag
    from onespeech.speech.speakers.diarize import MAX_SPEAKERS

    if off:
        add_option_flags(parser, "speakers")
        return
    add_option_flags(parser, "speakers", flags={"speakers": Flag(
        ("--speakers",), f"who speaks: auto or a count 1..{MAX_SPEAKERS} (default auto: the count is found)",
        type=speakers_type(off=False), metavar="auto|N", group="speakers")})


def add_option_flags(
    parser: argparse.ArgumentParser, group: str, *, flags: dict | None = None, **defaults: object
) -> None:
    """A flag for each TranscribeOptions field of ``group`` ("model" or "speakers").

    ``flags`` replaces a field's :class:`~onespeech.speech.flags.Flag`; ``defaults``
    replaces a field's default (None: the field's own).
    """
    from dataclasses import MISSING, fields

    from onespeech.speech.options import TranscribeOptions

    for spec in fields(TranscribeOptions):
        flag = (flags or {}).get(spec.name) or spec.metadata.get("flag")
        if flag is None or flag.group != group:
            continue
        default = defaults.get(spec.name)
        if default is None:
            default = spec.default if spec.default is not MISSING else None
        extra = {k: v for k, v in (("type", flag.type), ("metavar", flag.metavar), ("choices", flag.choices))
                 if v is not None}
        parser.add_argument(*flag.names, dest=spec.name, default=default, help=flag.help.format(default=default),
                            **extra)


def transcriber_options(args: argparse.Namespace) -> dict:
    """The TranscribeOptions fields that the parsed ``args`` carry (from :func:`add_option_flags`)."""
    from dataclasses import fields

    from onespeech.speech.options import TranscribeOptions

    return {spec.name: getattr(args, spec.name) for spec in fields(TranscribeOptions)
            if "flag" in spec.metadata and hasattr(args, spec.name)}


def options_from_args(args: argparse.Namespace) -> TranscribeOptions:
    """The TranscribeOptions of a parsed command line (ValueError/TypeError: a value it refuses)."""
    from onespeech.speech.options import TranscribeOptions

    return TranscribeOptions(**transcriber_options(args))


def progress_from_args(args: argparse.Namespace) -> bool | None:
    """-q/--quiet: no progress (False); otherwise bars when stderr is a terminal (None)."""
    return False if args.quiet else None


# re-exported: the flag types every command uses (defined below the options type, in flags.py)
MAX_WHOLE = flags.MAX_WHOLE
_positive_int = flags.positive_int
threads_option = flags.threads_option
max_new_tokens_option = flags.max_new_tokens_option
workers_option = flags.workers_option
max_pause_option = flags.max_pause_option


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``onespeech`` command on ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    return int(func(args))


if __name__ == "__main__":
    raise SystemExit(main())
