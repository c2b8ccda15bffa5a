"""The command-line arguments every command that transcribes shares, and back to options.

The flags are generated from the fields of
:class:`onespeech.speech.options.TranscribeOptions` (each field's ``metadata["flag"]``),
so a new option is a new flag of every such command; :func:`options_from_args` turns
the parsed values back into the options. The commands (``onespeech.speech.commands``)
import this module, and ``cli`` imports the commands: nothing here imports ``cli``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from onespeech.speech.flags import speakers_type

if TYPE_CHECKING:
    from onespeech.speech.options import TranscribeOptions

__all__ = [
    "add_model_options",
    "add_option_flags",
    "add_speaker_options",
    "options_from_args",
    "progress_from_args",
    "transcriber_options",
]

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
