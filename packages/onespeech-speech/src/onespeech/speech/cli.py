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
import math
import pkgutil
import sys
from collections.abc import Sequence
from types import ModuleType

from onespeech.speech import __version__

__all__ = [
    "COMMANDS",
    "NumberOption",
    "add_model_options",
    "add_speaker_options",
    "build_parser",
    "main",
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
    aligner: str | None = None,
    speakers: bool | None = None,
) -> None:
    """The model options shared by every command that transcribes.

    -m/--model, -l/--language, --aligner, --threads, --precision, --context,
    --max-new-tokens, -f/--format, -o/--output-dir, -q/--quiet, and --speakers and
    --max-pause (:func:`add_speaker_options`). Turn the parsed values into
    ``Transcriber`` keywords with :func:`transcriber_options`. ``outputs=False``
    leaves out -f and -o (commands that write no files, such as ``stream`` and
    ``serve``); ``speakers`` adds the speaker options (default: as ``outputs``, the
    commands that transcribe files); ``aligner`` is the default of --aligner (None:
    the default aligner; "none" for commands that time no words unless asked).
    """
    from onespeech.speech.transcribe import DEFAULT_ALIGNER, DEFAULT_MODEL
    from onespeech.speech.writers import FORMATS

    parser.add_argument("-m", "--model", default=DEFAULT_MODEL,
                        help=f"catalog id or local model directory (default {DEFAULT_MODEL}; downloaded on first use)")
    parser.add_argument("-l", "--language", default=None,
                        help="force a language (tag such as en, de, zh); default: identified per chunk")
    aligner = aligner or DEFAULT_ALIGNER
    parser.add_argument("--aligner", default=aligner,
                        help=f"forced aligner id or directory for word times, or 'none' (default {aligner})")
    parser.add_argument("--threads", type=threads_option, default=None, help="CPU threads (default: all available)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="weights (default fp32)")
    parser.add_argument("--context", default=None, help="biasing context text for the recognizer")
    parser.add_argument("--max-new-tokens", type=max_new_tokens_option, default=512,
                        help="token budget per chunk, 1..4096 (default 512)")
    if outputs:
        parser.add_argument("-f", "--format", default="txt",
                            help=f"output formats, comma-separated: {','.join(FORMATS)} or all (default txt)")
        parser.add_argument("-o", "--output-dir", default=".", help="where outputs go (default: current directory)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars or per-file lines")
    if outputs if speakers is None else speakers:
        add_speaker_options(parser)


def add_speaker_options(parser: argparse.ArgumentParser, *, off: bool = True) -> None:
    """--speakers auto|N|off and --max-pause SECONDS (``off=False``: no "off", as for ``diarize``)."""
    from onespeech.speech.speakers.diarize import MAX_SPEAKERS
    from onespeech.speech.speakers.turns import DEFAULT_MAX_PAUSE

    choices = f"auto, a count 1..{MAX_SPEAKERS}{' or off' if off else ''}"
    parser.add_argument("--speakers", type=_speakers_type(off), default="auto", metavar="auto|N" + ("|off" if off else ""),
                        help=f"who speaks: {choices} (default auto: the count is found)")
    parser.add_argument("--max-pause", type=max_pause_option, default=DEFAULT_MAX_PAUSE, metavar="SECONDS",
                        help="a speaker's pauses up to this long stay in their turn; longer ones end it "
                             f"(default {DEFAULT_MAX_PAUSE:g})")


def transcriber_options(args: argparse.Namespace) -> dict:
    """``Transcriber`` keywords from options added by :func:`add_model_options`."""
    aligner = None if str(args.aligner).lower() == "none" else args.aligner
    options = {
        "model": args.model, "language": args.language, "aligner": aligner, "context": args.context,
        "precision": args.precision, "threads": args.threads, "max_new_tokens": args.max_new_tokens,
        "progress": False if args.quiet else None,
    }
    if hasattr(args, "speakers"):
        options.update(speakers=args.speakers, max_pause=args.max_pause)
    return options


def _speakers_type(off: bool):  # noqa: ANN202 - an argparse type
    from onespeech.speech.speakers.diarize import MAX_SPEAKERS

    allowed = f"'auto', a number of speakers from 1 to {MAX_SPEAKERS}" + (" or 'off'" if off else "")

    def parse(text: str) -> str | int | bool:
        word = text.strip().lower()
        if word == "auto":
            return "auto"
        if off and word == "off":
            return False
        try:
            count = int(word)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: use {allowed}") from None
        if not 1 <= count <= MAX_SPEAKERS:
            raise argparse.ArgumentTypeError(f"{count}: use {allowed}")
        return count

    return parse


class NumberOption:
    """An argparse ``type`` for a numeric option: a finite number from ``low`` to ``high``.

    Every numeric option of every verb uses one of these, so ``inf``, ``nan``, ``-5``,
    ``0`` or ``1e-9`` meet the same one-line usage error naming what is allowed
    (``argument --max-upload-mb: 'inf' is not allowed; give a number from 0.01 to 2048 (MiB)``)
    instead of a traceback or a nonsense limit.
    """

    def __init__(self, low: float, high: float, *, whole: bool = False, unit: str = "") -> None:
        self.low, self.high, self.whole, self.unit = low, high, whole, unit
        self.__name__ = "whole number" if whole else "number"  # argparse names the type in its messages

    def allowed(self) -> str:
        unit = f" ({self.unit})" if self.unit else ""
        if self.whole:
            return f"a whole number from {int(self.low)} to {int(self.high)}{unit}"
        return f"a number from {self.low:g} to {self.high:g}{unit}"

    def __call__(self, text: str) -> float:
        value = self._parse(text.strip())
        if value is None or not self.low <= value <= self.high:
            raise argparse.ArgumentTypeError(f"{text!r} is not allowed; give {self.allowed()}")
        return value

    def _parse(self, text: str) -> float | None:
        if not text.isascii() or "_" in text or len(text) > 40:  # Python also reads other digits and 1_000
            return None
        if self.whole:
            return int(text) if text.lstrip("+-").isdigit() else None
        try:
            value = float(text)
        except ValueError:
            return None
        return value if math.isfinite(value) else None


MAX_WHOLE = 2**31 - 1
_positive_int = NumberOption(1, MAX_WHOLE, whole=True)  # any count with no tighter bound of its own
threads_option = NumberOption(1, 1024, whole=True, unit="threads")
max_new_tokens_option = NumberOption(1, 4096, whole=True, unit="tokens per chunk")
workers_option = NumberOption(1, 1024, whole=True, unit="workers")
max_pause_option = NumberOption(0, 3600, unit="seconds")


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
