"""``onespeech diarize FILE... [-f rttm,json] [-o DIR]``: who speaks when, without transcribing.

For each file, ``<stem>.rttm`` (the format diarization scorers read) and/or
``<stem>.turns.json`` (not ``<stem>.json``, so a transcript's JSON beside it is kept)
in the output directory, each written under a temporary name and renamed. The speaker
encoder and the VAD are loaded once. A failing file is reported and the others go on.
Exit status 0 when every file succeeded, 1 when some failed or the models could not
load, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path

ORDER = 15


def register(subparsers: argparse._SubParsersAction) -> None:
    from onespeech.speech.cli import _positive_int, add_speaker_options
    from onespeech.speech.speakers.formats import TURN_FORMATS

    parser = subparsers.add_parser("diarize", help="who speaks when: speaker turns as RTTM and JSON")
    parser.add_argument("files", nargs="+", metavar="FILE", help="audio files (wav, flac, mp3, ogg, ...)")
    parser.add_argument("-f", "--format", default="rttm",
                        help=f"output formats, comma-separated: {','.join(TURN_FORMATS)} or all (default rttm)")
    parser.add_argument("-o", "--output-dir", default=".", help="where outputs go (default: current directory)")
    add_speaker_options(parser, off=False)
    parser.add_argument("--threads", type=_positive_int, default=None, help="CPU threads (default: all available)")
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
    from onespeech.speech.speakers.diarize import DiarizationOptions, Diarizer
    from onespeech.speech.speakers.formats import turns_json, turns_rttm

    try:
        formats = parse_turn_formats(args.format)
    except ValueError as error:
        print(f"onespeech diarize: {error}", file=sys.stderr)
        return 2
    out_dir = Path(args.output_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        diarizer = Diarizer.load(DiarizationOptions(max_pause=args.max_pause), threads=args.threads)
    except (OSError, ValueError, ModelIntegrityError) as error:
        print(f"onespeech diarize: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    failed = 0
    for path in args.files:
        try:
            turns = diarizer.source(path, args.speakers)
            stem = Path(path).stem
            written = []
            for fmt in formats:
                if fmt == "rttm":
                    target, text = out_dir / f"{stem}.rttm", turns_rttm(turns, stem)
                else:
                    target, text = out_dir / f"{stem}.turns.json", turns_json(turns, os.fspath(path))
                _write_text(target, text)
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


def _write_text(target: Path, text: str) -> None:
    # a temporary name beside the target, renamed into place; created with 0o666 so the umask
    # decides the mode as for any new file (tempfile's files are -rw-------)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as file:
            file.write(text)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
