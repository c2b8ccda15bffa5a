"""``onespeech diarize FILE... [-f rttm,json] [-o DIR]``: who speaks when, without transcribing.

For each file, ``<stem>.rttm`` (the format diarization scorers read) and/or
``<stem>.turns.json`` (not ``<stem>.json``, so a transcript's JSON beside it is kept)
in the output directory, written atomically. Output paths are settled before any model
loads, by the rules of ``onespeech transcribe`` (``-o`` created and writable, no output
over an input, inputs sharing a stem keep their folders). The speaker encoder and the
VAD are loaded once. A failing file is reported and the others go on. Exit status 0
when every file succeeded, 1 when some failed or the models could not load, 2 for
usage errors, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ORDER = 15
# the file name ending of each turn format
EXTENSIONS = {"rttm": "rttm", "json": "turns.json"}


def register(subparsers: argparse._SubParsersAction) -> None:
    from onespeech.speech.arguments import add_speaker_options
    from onespeech.speech.flags import threads_option
    from onespeech.speech.speakers.formats import TURN_FORMATS

    parser = subparsers.add_parser("diarize", help="who speaks when: speaker turns as RTTM and JSON")
    parser.add_argument("files", nargs="+", metavar="FILE", help="audio files (wav, flac, mp3, ogg, ...)")
    parser.add_argument("-f", "--format", default="rttm",
                        help=f"output formats, comma-separated: {','.join(TURN_FORMATS)} or all (default rttm)")
    parser.add_argument("-o", "--output-dir", default=".", help="where outputs go (default: current directory)")
    add_speaker_options(parser, off=False)
    parser.add_argument("--threads", type=threads_option, default=None, help="CPU threads (default: all available)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no per-file lines")
    parser.set_defaults(func=run)


def parse_turn_formats(spec: str) -> list[str]:
    """``rttm``, ``json``, both comma-separated, or ``all``; ValueError names the allowed ones."""
    from onespeech.speech.speakers.formats import TURN_FORMATS

    names = [n.strip().lower() for n in spec.split(",") if n.strip()]
    if names == ["all"]:
        return list(TURN_FORMATS)
    bad = [n for n in names if n not in TURN_FORMATS]
    if bad or not names:
        raise ValueError(f"-f {spec!r}: use {', '.join(TURN_FORMATS)} (comma-separated) or all")
    return list(dict.fromkeys(names))


def run(args: argparse.Namespace) -> int:
    from onespeech.kernels import ModelIntegrityError
    from onespeech.speech.atomic import write_atomic
    from onespeech.speech.errors import OutputPathError
    from onespeech.speech.output_paths import output_stem, plan_outputs
    from onespeech.speech.speakers.diarize import DiarizationOptions, Diarizer
    from onespeech.speech.speakers.formats import turns_json, turns_rttm

    try:
        formats = parse_turn_formats(args.format)
        plan = plan_outputs([Path(f) for f in args.files], Path(args.output_dir), [EXTENSIONS[f] for f in formats])
    except (ValueError, OutputPathError) as error:
        print(f"onespeech diarize: {error}", file=sys.stderr)
        return 2
    try:
        diarizer = Diarizer.load(DiarizationOptions(max_pause=args.max_pause), threads=args.threads)
    except (OSError, ValueError, ModelIntegrityError) as error:
        print(f"onespeech diarize: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("onespeech diarize: interrupted", file=sys.stderr)
        return 130
    failed = 0
    for path, folder in plan:
        try:
            turns = diarizer.source(path, args.speakers)
            stem = output_stem(path.name)
            written = []
            for fmt in formats:
                target = folder / f"{stem}.{EXTENSIONS[fmt]}"
                write_atomic(target, turns_rttm(turns, stem) if fmt == "rttm" else turns_json(turns, os.fspath(path)))
                written.append(str(target))
        except KeyboardInterrupt:
            print("onespeech diarize: interrupted", file=sys.stderr)
            return 130
        except Exception as error:  # noqa: BLE001 - one failing file must not stop the others
            failed += 1
            print(f"onespeech diarize: {path}: {type(error).__name__}: {error}", file=sys.stderr)
            continue
        if not args.quiet:
            found = len({t.speaker for t in turns})
            print(f"{path}: {len(turns)} turns, {found} speakers -> {', '.join(written)}", file=sys.stderr)
    return 1 if failed else 0

