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

from onespeech.speech import __version__, arguments
from onespeech.speech.flags import NumberOption

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


# the shared arguments (defined in arguments.py, which the commands import; re-exported here)
add_model_options = arguments.add_model_options
add_option_flags = arguments.add_option_flags
add_speaker_options = arguments.add_speaker_options
options_from_args = arguments.options_from_args
progress_from_args = arguments.progress_from_args
transcriber_options = arguments.transcriber_options


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
