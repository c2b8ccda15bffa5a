"""``onespeech transcribe FILE...``: documents and subtitles for audio files.

One line per file on stderr with its audio time and real-time factor; outputs are
``<input stem>.<format>`` in the output directory, each written under a temporary
name and renamed. Inputs that share a stem keep their folders relative to the
folder they share, as ``batch`` does. Every output path is settled before any model
loads: ``-o`` must be (or become) a writable folder, and no output may overwrite an
input or another input's output. A failing file is reported and the others go on.
Exit status 0 when every file succeeded, 1 when some failed, 2 for usage errors,
130 when interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ORDER = 10


def register(subparsers: argparse._SubParsersAction) -> None:
    from onespeech.speech.arguments import add_model_options

    parser = subparsers.add_parser("transcribe", help="transcribe audio files (txt, srt, vtt, tsv, json)")
    parser.add_argument("files", nargs="+", metavar="FILE", help="audio files (wav, flac, mp3, ogg, ...)")
    add_model_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except KeyboardInterrupt:
        # every output is written under a temporary name and renamed, so nothing is half-written
        print("onespeech transcribe: interrupted; the files finished before it are written", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace) -> int:
    from onespeech.speech.arguments import options_from_args, progress_from_args
    from onespeech.speech.output_paths import plan_outputs
    from onespeech.speech.transcribe import Transcriber
    from onespeech.speech.writers import parse_formats, write_outputs

    try:
        formats = parse_formats(args.format)
        plan = plan_outputs([Path(f) for f in args.files], Path(args.output_dir), formats)
        transcriber = Transcriber(options=options_from_args(args), progress=progress_from_args(args))
    except (TypeError, ValueError) as error:
        print(f"onespeech transcribe: {error}", file=sys.stderr)
        return 2
    failed = 0
    with transcriber:
        for path, folder in plan:
            started = time.perf_counter()
            try:
                document = transcriber.transcribe(path)
                outputs = write_outputs(document, path, folder, formats)
            except KeyboardInterrupt:
                raise
            except Exception as error:  # noqa: BLE001 - one failing file must not stop the others
                failed += 1
                print(f"onespeech transcribe: {path}: {type(error).__name__}: {error}", file=sys.stderr)
                continue
            elapsed = time.perf_counter() - started
            if not args.quiet:
                rtf = elapsed / document.duration if document.duration else 0.0
                names = ", ".join(str(p) for p in outputs)
                print(f"{path}: {document.duration:.1f} s of audio in {elapsed:.1f} s (RTF {rtf:.2f}) -> {names}",
                      file=sys.stderr)
    return 1 if failed else 0

