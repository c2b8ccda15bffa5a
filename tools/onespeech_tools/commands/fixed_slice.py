"""``fixed-slice``: the first N sorted utterance ids of a LibriSpeech-layout directory.

Evaluation slices must be reproducible: the spec fixes them as the first 200 ids
of each LibriSpeech test split in sorted order. Ids sort as strings, as the
corpus's own file listings do (so speaker 1089 comes before 121).

Layout: ``<split>/<speaker>/<chapter>/<speaker>-<chapter>-<utt>.flac`` with
transcripts in ``<speaker>-<chapter>.trans.txt`` beside them.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

_ID_RE = re.compile(r"^(\d+)-(\d+)-(\d+)$")
AUDIO_SUFFIXES = (".flac", ".wav")


class SliceError(ValueError):
    """The directory does not hold a usable LibriSpeech split."""


@dataclass(frozen=True)
class Utterance:
    id: str
    audio: Path  # relative to the split directory
    transcript: str | None


def _transcripts(chapter: Path) -> dict[str, str]:
    out = {}
    for trans in chapter.glob("*.trans.txt"):
        for n, line in enumerate(trans.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            utt_id, _, text = line.partition(" ")
            if not _ID_RE.match(utt_id):
                raise SliceError(f"{trans}:{n}: {utt_id!r} is not a speaker-chapter-utterance id")
            out[utt_id] = text.strip()
    return out


def utterances(split_dir: Path) -> list[Utterance]:
    """Every utterance with audio under ``split_dir``, sorted by id (string order)."""
    if not split_dir.is_dir():
        raise SliceError(f"{split_dir} is not a directory")
    found: dict[str, Utterance] = {}
    for chapter in sorted(p for p in split_dir.glob("*/*") if p.is_dir()):
        speaker = chapter.parent.name
        texts = _transcripts(chapter)
        for audio in chapter.iterdir():
            if audio.suffix.lower() not in AUDIO_SUFFIXES:
                continue
            m = _ID_RE.match(audio.stem)
            if not m or (m.group(1), m.group(2)) != (speaker, chapter.name):
                raise SliceError(
                    f"{audio} does not follow <speaker>/<chapter>/<speaker>-<chapter>-<utt>{audio.suffix}"
                )
            if audio.stem in found:
                raise SliceError(f"utterance {audio.stem} has two audio files: {found[audio.stem].audio}, {audio}")
            found[audio.stem] = Utterance(audio.stem, audio.relative_to(split_dir), texts.get(audio.stem))
    if not found:
        raise SliceError(
            f"no utterances under {split_dir}; pass one split directory such as LibriSpeech/test-clean"
        )
    return [found[k] for k in sorted(found)]


def fixed_slice(split_dir: Path, n: int = 200) -> list[Utterance]:
    """The first ``n`` utterances by sorted id; refuses if the split has fewer."""
    if n < 1:
        raise SliceError(f"n={n} must be at least 1")
    items = utterances(split_dir)
    if len(items) < n:
        raise SliceError(f"{split_dir} has only {len(items)} utterances, {n} requested")
    return items[:n]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("split_dir", type=Path, help="a LibriSpeech split directory, e.g. LibriSpeech/test-clean")
    parser.add_argument("-n", "--count", type=int, default=200, help="how many ids (default 200, the spec's slice)")
    parser.add_argument(
        "--tsv", action="store_true", help="print id<TAB>audio path<TAB>transcript instead of ids only"
    )
    parser.add_argument("-o", "--output", type=Path, help="write to this file instead of stdout")


def run(args: argparse.Namespace) -> int:
    try:
        items = fixed_slice(args.split_dir, args.count)
        if args.tsv:
            missing = [u.id for u in items if u.transcript is None]
            if missing:
                raise SliceError(f"no transcript line for {', '.join(missing[:5])} (*.trans.txt)")
            lines = [f"{u.id}\t{u.audio.as_posix()}\t{u.transcript}" for u in items]
        else:
            lines = [u.id for u in items]
    except (SliceError, OSError) as e:
        print(f"fixed-slice: {e}", file=sys.stderr)
        return 2
    text = "\n".join(lines) + "\n"
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0
