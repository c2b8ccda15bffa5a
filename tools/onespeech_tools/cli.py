"""``onespeech-convert``: the converter front end (qwen-fetch, qwen-convert, ...).

Each command lives in ``onespeech_tools.commands.<module>`` and exposes
``add_arguments(parser)`` and ``run(args) -> int``; modules are imported only when
their command runs so one broken command never hides the others.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

# command name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "qwen-fetch": ("fetch", "download and verify a catalogued model's publisher files"),
    "qwen-convert": ("convert", "convert publisher files into FP32 runtime files"),
    "qwen-convert-bf16": ("convert_bf16", "convert publisher files into BF16 runtime files"),
    "qwen-reproduce": ("reproduce", "compare ours with the reference toolkit on a checkpoint"),
    "probe": ("probe", "show what the cache holds, what is verified, which pins are missing"),
    "fixed-slice": ("fixed_slice", "first N sorted utterance ids of a LibriSpeech-layout directory"),
}


def _available() -> dict[str, tuple[str, str]]:
    return {
        name: spec
        for name, spec in COMMANDS.items()
        if importlib.util.find_spec(f"onespeech_tools.commands.{spec[0]}") is not None
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="onespeech-convert", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    modules = {}
    for name, (module_name, help_text) in _available().items():
        module = importlib.import_module(f"onespeech_tools.commands.{module_name}")
        command = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(command)
        modules[name] = module
    args = parser.parse_args(argv)
    return int(modules[args.command].run(args))


if __name__ == "__main__":
    sys.exit(main())
