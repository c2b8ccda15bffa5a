"""``onespeech stream -``: live finals from a pipe (or a file) as they come.

``arecord -f S16_LE -r 16000 -c 1 | onespeech stream -`` reads a WAV stream (detected
by its RIFF header), ``--rate HZ`` raw 16-bit little-endian mono PCM at that rate, and
anything else must be an audio file libsndfile decodes (FLAC, OGG, MP3, ...: spooled,
then decoded) from stdin; text and unknown bytes are refused, naming the accepted
inputs. A path instead of ``-`` is decoded as a file and streamed. Every rate (a WAV
header, a file, ``--rate``) meets the rule of every input path: 1000 to 768000 Hz.
Each final is printed as soon as its VAD chunk closes: ``[start --> end] text`` or,
with ``--format jsonl``, one JSON object per line (the segment as the Document JSON
writes it, words included). Each final's words are timed as ``transcribe`` times
them, with ``transcribe``'s default aligner (held with the recognizer for the
session); ``--aligner none`` leaves them untimed. Exit status 0, 1 on bad audio or model errors, 2 for usage
errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Generator
from typing import Any

import numpy as np

ORDER = 30
_BLOCK_BYTES = 6400  # 200 ms of 16 kHz 16-bit mono: a final waits at most this long for its block


def register(subparsers: argparse._SubParsersAction) -> None:
    from onespeech.speech.arguments import add_model_options

    parser = subparsers.add_parser("stream", help="print finals of live audio from stdin (WAV, raw PCM, audio file)")
    parser.add_argument("source", metavar="SOURCE",
                        help="'-' for stdin (a WAV stream, raw S16LE mono with --rate, or an audio file), or a file")
    parser.add_argument("--rate", type=_sample_rate, default=None,
                        help="stdin is raw 16-bit little-endian mono PCM at this rate, 1000..768000 Hz "
                             "(a WAV header still gives its own)")
    parser.add_argument("--format", dest="stream_format", choices=("text", "jsonl"), default="text",
                        help="text: '[start --> end] text' lines (default); jsonl: one JSON object per final")
    add_model_options(parser, outputs=False)  # TranscribeOptions' defaults, as every entry point
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        blocks = _input_blocks(args)  # the input is told apart (and refused) before any model loads
    except KeyboardInterrupt:
        return 130
    except (ValueError, OSError) as error:
        print(f"onespeech stream: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    try:
        return _run_session(args, blocks)
    finally:
        blocks.close()  # a decoded stdin's spool goes with it (the source also deletes it when collected)


def _run_session(args: argparse.Namespace, blocks: Generator[tuple[np.ndarray, int], None, None]) -> int:
    from onespeech.kernels import ModelIntegrityError
    from onespeech.speech.arguments import options_from_args
    from onespeech.speech.streaming import LiveSession

    try:
        session = LiveSession(options=options_from_args(args), progress=False)  # the finals are the output
    except (TypeError, ValueError, OSError, ModelIntegrityError) as error:
        print(f"onespeech stream: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    emit = _print_jsonl if args.stream_format == "jsonl" else _print_text
    try:
        with session:
            for block, rate in blocks:
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


def _sample_rate(text: str) -> int:
    """``--rate``: a whole number of Hz within the rate rule of every input path."""
    from onespeech.features.errors import SampleRateError
    from onespeech.features.pcm import check_sample_rate

    try:
        return check_sample_rate(int(text) if text.isascii() and text.isdigit() else text, "--rate",
                                 subject="it gives")
    except SampleRateError as error:
        raise argparse.ArgumentTypeError(error.cause) from None


def _input_blocks(args: argparse.Namespace) -> Generator[tuple[np.ndarray, int], None, None]:
    """(block, rate) pairs of the input; the format is read (and checked) now, the samples as iterated."""
    if args.source == "-":
        from onespeech.speech.wavstream import read_blocks

        fmt, blocks = read_blocks(sys.stdin.buffer, raw_rate=args.rate, block_bytes=_BLOCK_BYTES)
        return ((block, fmt.sample_rate) for block in blocks)
    from onespeech.features import AudioFileSource

    audio = AudioFileSource(args.source, block_frames=_BLOCK_BYTES // 2)
    return _file_blocks(audio)


def _file_blocks(audio: Any) -> Generator[tuple[np.ndarray, int], None, None]:
    with audio:
        for block in audio.blocks():
            yield block, 16000


def text_line(final: Any) -> str:
    """One line per final: line breaks inside the text become spaces."""
    return f"[{final.start:8.2f} --> {final.end:8.2f}] {' '.join(final.text.splitlines())}"


def _print_text(final: Any) -> None:
    print(text_line(final), flush=True)


def _print_jsonl(final: Any) -> None:
    from onespeech.speech.document import segment_dict

    print(json.dumps(segment_dict(final), ensure_ascii=False), flush=True)
