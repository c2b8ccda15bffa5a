"""``onespeech tokenize DIR TEXT``: the Qwen3 token ids of a text."""

from __future__ import annotations

import argparse
import sys

ORDER = 90


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tokenize", help="print the Qwen3 token ids of a text (needs a tokenizer directory)")
    parser.add_argument("tokenizer_dir", help="directory holding vocab.json, merges.txt, tokenizer_config.json")
    parser.add_argument("text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from onespeech.tokenizer import Qwen3Tokenizer

    try:
        tokenizer = Qwen3Tokenizer.load(args.tokenizer_dir)
        ids = tokenizer.encode(args.text)
    except (OSError, ValueError) as e:
        print(f"onespeech tokenize: {e}", file=sys.stderr)
        return 1
    print(" ".join(str(i) for i in ids))
    return 0
