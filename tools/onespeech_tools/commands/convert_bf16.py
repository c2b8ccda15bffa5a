"""``qwen-convert-bf16``: publisher files -> verified BF16 runtime files (manifest.bf16.json).

Same steps as ``qwen-convert``; the bfloat16 tensors are kept as stored (uint16
bit patterns) under their own file names, so FP32 and BF16 files can share one
runtime directory.
"""

from __future__ import annotations

import argparse

from onespeech_tools.commands import convert as _convert

PRECISION = "bf16"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _convert.add_arguments(parser, PRECISION)


def run(args: argparse.Namespace) -> int:
    return _convert.run(args, PRECISION)
