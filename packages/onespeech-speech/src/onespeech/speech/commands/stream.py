"""``onespeech stream -``: live finals from a pipe (or a file) as they come.

``arecord -f S16_LE -r 16000 -c 1 | onespeech stream -`` reads raw 16-bit
little-endian mono PCM (``--rate`` for another rate) or a WAV stream (detected by its
RIFF header) from stdin; a path instead of ``-`` is decoded as a file and streamed.
Each final is printed as soon as its VAD chunk closes: ``[start --> end] text`` or,
with ``--format jsonl``, one JSON object per line (the segment as the Document JSON
writes it, words included). ``--aligner MODEL`` times each final's words as
``transcribe`` does (the aligner is then held with the recognizer for the session);
the default is ``none``. Exit status 0, 1 on bad audio or model errors, 2 for usage
errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

ORDER = 30
_BLOCK_BYTES = 6400  # 200 ms of 16 kHz 16-bit mono: a final waits at most this long for its block


def register(subparsers: argparse._SubParsersAction) -> None:
    from onespeech.speech.cli import _positive_int, add_model_options

    parser = subparsers.add_parser("stream", help="print finals of live audio from stdin (raw PCM or WAV)")
    parser.add_argument("source", metavar="SOURCE", help="'-' for stdin (raw S16_LE mono or a WAV stream), or a file")
    parser.add_argument("--rate", type=_positive_int, default=16000,
                        help="sample rate of raw PCM on stdin (default 16000; a WAV header gives its own)")
    parser.add_argument("--format", dest="stream_format", choices=("text", "jsonl"), default="text",
                        help="text: '[start --> end] text' lines (default); jsonl: one JSON object per final")
    add_model_options(parser, outputs=False, aligner="none")  # as LiveSession: word times only when asked
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from onespeech.kernels import ModelIntegrityError
    from onespeech.speech.cli import transcriber_options
    from onespeech.speech.streaming import LiveSession

    options = transcriber_options(args)
    options.pop("progress", None)
    try:
        session = LiveSession(**options)
    except (TypeError, ValueError, OSError, ModelIntegrityError) as error:
        print(f"onespeech stream: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    emit = _print_jsonl if args.stream_format == "jsonl" else _print_text
    try:
        with session:
            for block, rate in _input_blocks(args):
                for final in session.push(block, rate):
                    emit(final)
            for final in session.finish():
                emit(final)
    except KeyboardInterrupt:
        return 130
    except (ValueError, OSError, RuntimeError, ModelIntegrityError) as error:
        print(f"onespeech stream: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0


def _input_blocks(args: argparse.Namespace) -> Any:
    if args.source == "-":
        from onespeech.speech.wavstream import read_blocks

        fmt, blocks = read_blocks(sys.stdin.buffer, raw_rate=args.rate, block_bytes=_BLOCK_BYTES)
        for block in blocks:
            yield block, fmt.sample_rate
        return
    from onespeech.features import AudioFileSource

    with AudioFileSource(args.source, block_frames=_BLOCK_BYTES // 2) as audio:
        for block in audio.blocks():
            yield block, 16000


def text_line(final: Any) -> str:
    """One line per final: line breaks inside the text become spaces."""
    return f"[{final.start:8.2f} --> {final.end:8.2f}] {' '.join(final.text.splitlines())}"


def _print_text(final: Any) -> None:
    print(text_line(final), flush=True)


def _print_jsonl(final: Any) -> None:
    print(json.dumps(asdict(final), ensure_ascii=False), flush=True)
