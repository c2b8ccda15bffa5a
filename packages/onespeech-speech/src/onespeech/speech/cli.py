"""The ``onespeech`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from onespeech.speech import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onespeech", description="OneSpeech: speech to text on the CPU.")
    parser.add_argument("--version", action="version", version=f"onespeech {__version__}")
    sub = parser.add_subparsers(dest="command")
    tok = sub.add_parser("tokenize", help="print the Qwen3 token ids of a text (needs a tokenizer directory)")
    tok.add_argument("tokenizer_dir", help="directory holding vocab.json, merges.txt, tokenizer_config.json")
    tok.add_argument("text")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "tokenize":
        from onespeech.tokenizer import Qwen3Tokenizer

        try:
            tokenizer = Qwen3Tokenizer.load(args.tokenizer_dir)
            ids = tokenizer.encode(args.text)
        except (OSError, ValueError) as e:
            print(f"onespeech tokenize: {e}", file=sys.stderr)
            return 1
        print(" ".join(str(i) for i in ids))
        return 0
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
