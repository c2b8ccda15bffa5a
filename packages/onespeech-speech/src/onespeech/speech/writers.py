"""Writers: a Document as txt, srt, vtt, tsv or json.

- ``txt``: one line per segment.
- ``json``: ``Document.to_json()`` (read back with ``Document.from_json``).
- ``tsv``: ``start``, ``end`` (integer milliseconds) and ``text`` per segment, with a header.
- ``srt`` / ``vtt``: subtitle cues. A segment whose words have times is cut into cues at
  word boundaries: at most ``max_line_chars`` characters a line (a longer single word
  gets a line of its own), ``max_lines`` lines and ``max_cue_seconds`` a cue. A segment
  without word times is one cue spanning the segment, its text wrapped into lines.

Every writer first checks the document (``Document.check``): a NaN or infinite time,
``end < start`` or a lone surrogate in a Document built in code raises
``DocumentFormatError`` naming the field before anything is written. Texts and
speaker labels are put on one line each in every format: each run of whitespace
(line breaks of any kind, tabs) and control characters becomes one space. A word
whose text is blank makes no cue and no empty line; in srt and vtt no line holds "-->".

``write_outputs`` writes each file under a temporary name in the output directory and
renames it into place (``onespeech.speech.atomic``), so an interrupted run never leaves a
half-written file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TextIO

from onespeech.qwen3.units import CHARACTER_LANGUAGES, written_units
from onespeech.speech.atomic import write_atomic
from onespeech.speech.document import Document, Segment, Word
from onespeech.speech.output_paths import output_stem

#: The output formats, as accepted by :func:`get_writer`.
FORMATS = ("txt", "srt", "vtt", "tsv", "json")

__all__ = ["FORMATS", "Cue", "ResultWriter", "SubtitleOptions", "get_writer", "parse_formats", "subtitle_cues",
           "write_outputs"]


@dataclass(frozen=True)
class SubtitleOptions:
    """How subtitle cues are cut (the defaults are common broadcast limits)."""

    max_line_chars: int = 42
    max_lines: int = 2
    max_cue_seconds: float = 7.0

    def __post_init__(self) -> None:
        for name in ("max_line_chars", "max_lines"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer")
        if not self.max_cue_seconds > 0:
            raise ValueError(f"max_cue_seconds={self.max_cue_seconds!r} must be positive")


@dataclass(frozen=True)
class Cue:
    """One subtitle: seconds on the file's clock and its lines."""

    start: float
    end: float
    lines: tuple[str, ...]
    speaker: str | None = None  # shown as a "[SPEAKER_00] " prefix of the first line


class ResultWriter:
    """Writes a document in one format; ``extension`` names the format."""

    extension = ""

    def write(self, document: Document, file: TextIO) -> None:
        """Check the document (``DocumentFormatError`` before any output), then write it."""
        document.check()
        self._write(document, file)

    def _write(self, document: Document, file: TextIO) -> None:
        raise NotImplementedError


class TxtWriter(ResultWriter):
    extension = "txt"

    def _write(self, document: Document, file: TextIO) -> None:
        for segment in document.segments:
            file.write(_speaker_prefix(segment.speaker) + _one_line(segment.text) + "\n")


class JsonWriter(ResultWriter):
    extension = "json"

    def _write(self, document: Document, file: TextIO) -> None:
        file.write(document.to_json() + "\n")  # strict JSON: to_json refuses NaN and infinities


class TsvWriter(ResultWriter):
    extension = "tsv"

    def _write(self, document: Document, file: TextIO) -> None:
        speakers = any(segment.speaker is not None for segment in document.segments)
        file.write("start\tend\ttext\tspeaker\n" if speakers else "start\tend\ttext\n")
        for segment in document.segments:
            text = _one_line(segment.text)  # tabs are whitespace: no column can split
            speaker = f"\t{_one_line(segment.speaker or '')}" if speakers else ""
            file.write(f"{round(1000 * segment.start)}\t{round(1000 * segment.end)}\t{text}{speaker}\n")


class SubtitleWriter(ResultWriter):
    def __init__(self, options: SubtitleOptions | None = None) -> None:
        self.options = options or SubtitleOptions()

    def _write(self, document: Document, file: TextIO) -> None:
        self._header(file)
        for index, cue in enumerate(subtitle_cues(document, self.options), start=1):
            self._cue(file, index, cue)

    def _header(self, file: TextIO) -> None:
        pass

    def _cue(self, file: TextIO, index: int, cue: Cue) -> None:
        raise NotImplementedError


class SrtWriter(SubtitleWriter):
    extension = "srt"

    def _cue(self, file: TextIO, index: int, cue: Cue) -> None:
        file.write(f"{index}\n{_timestamp(cue.start, ',')} --> {_timestamp(cue.end, ',')}\n")
        file.write("\n".join(_cue_lines(cue)) + "\n\n")


class VttWriter(SubtitleWriter):
    extension = "vtt"

    def _header(self, file: TextIO) -> None:
        file.write("WEBVTT\n\n")

    def _cue(self, file: TextIO, index: int, cue: Cue) -> None:
        file.write(f"{_timestamp(cue.start, '.')} --> {_timestamp(cue.end, '.')}\n")
        file.write("\n".join(_vtt_escape(line) for line in _cue_lines(cue)) + "\n\n")


_WRITERS: dict[str, type[ResultWriter]] = {
    "txt": TxtWriter, "srt": SrtWriter, "vtt": VttWriter, "tsv": TsvWriter, "json": JsonWriter,
}


def get_writer(fmt: str, subtitles: SubtitleOptions | None = None) -> ResultWriter:
    """The writer of format ``fmt`` (one of :data:`FORMATS`)."""
    if fmt not in _WRITERS:
        raise ValueError(f"unknown output format {fmt!r}; use one of {', '.join(FORMATS)} or 'all'")
    cls = _WRITERS[fmt]
    return cls(subtitles) if issubclass(cls, SubtitleWriter) else cls()


def parse_formats(spec: str | Sequence[str]) -> list[str]:
    """``"srt,vtt"``, ``"all"`` or a list -> formats in order, each once."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for item in (i.strip() for i in items):
        for fmt in FORMATS if item == "all" else (item,):
            if fmt not in _WRITERS:
                raise ValueError(f"unknown output format {fmt!r}; use one of {', '.join(FORMATS)} or 'all'")
            if fmt not in out:
                out.append(fmt)
    if not out:
        raise ValueError(f"no output format given; use one of {', '.join(FORMATS)} or 'all'")
    return out


def write_outputs(
    document: Document,
    input_path: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    formats: str | Sequence[str],
    subtitles: SubtitleOptions | None = None,
) -> list[Path]:
    """Write ``<input stem>.<format>`` files into ``output_dir`` (created if missing).

    Each file is written under a temporary name and renamed into place, with the
    mode any new file gets (0o666 less the umask). A stem of ``.`` or ``..`` (a file
    ``..wav``) is never a name: such an input's outputs are named by its whole name.
    """
    out_dir = Path(output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = output_stem(Path(input_path).name)
    written = []
    for fmt in parse_formats(formats):
        target = out_dir / f"{stem}.{fmt}"
        write_atomic(target, partial(get_writer(fmt, subtitles).write, document))
        written.append(target)
    return written


# -- subtitle cues ----------------------------------------------------------------------


def subtitle_cues(document: Document, options: SubtitleOptions | None = None) -> list[Cue]:
    """The document's cues: word-timed segments cut at word boundaries, others one cue each.

    Every cue has at least one line, and no line is empty or holds a line break or "-->".
    """
    document.check()
    options = options or SubtitleOptions()
    cues: list[Cue] = []
    for segment in document.segments:
        if not _one_line(segment.text):
            continue
        if any(w.start is not None for w in segment.words):
            cues.extend(_timed_cues(segment, options))
        else:
            lines = _wrap([p for p in _pieces(segment) if p], options.max_line_chars, _joiner(segment))
            if lines:
                cues.append(Cue(segment.start, segment.end, tuple(lines), segment.speaker))
    return cues


def _timed_cues(segment: Segment, options: SubtitleOptions) -> list[Cue]:
    """Group a segment's words into cues within the line, line-count and duration limits."""
    pieces = _pieces(segment)
    joiner = _joiner(segment)
    groups: list[list[int]] = []  # word indices per cue
    cue_start: float | None = None
    for i, word in enumerate(segment.words):
        if not pieces[i]:
            continue  # a blank word shows nothing: no cue of its own, no time
        if groups:
            candidate = [pieces[j] for j in groups[-1]] + [pieces[i]]
            too_long = len(_wrap(candidate, options.max_line_chars, joiner)) > options.max_lines
            too_late = (word.end is not None and cue_start is not None
                        and word.end - cue_start > options.max_cue_seconds)
            new_speaker = word.speaker != segment.words[groups[-1][0]].speaker  # a cue is one speaker's
            if not too_long and not too_late and not new_speaker:
                groups[-1].append(i)
                if cue_start is None:
                    cue_start = word.start
                continue
        groups.append([i])
        cue_start = word.start
    cues: list[Cue] = []
    for group in groups:
        words = [segment.words[j] for j in group]
        lines = tuple(_wrap([pieces[j] for j in group], options.max_line_chars, joiner))
        start, end = _span(words)
        if start is None or end is None:
            if cues:  # untimed words only (punctuation): they belong to the previous cue's text
                last = cues[-1]
                cues[-1] = Cue(last.start, last.end, tuple(_wrap([*last.lines, *lines], options.max_line_chars,
                                                                 joiner)), last.speaker)
                continue
            start, end = segment.start, _span(segment.words)[0] or segment.start
        cues.append(Cue(start, max(end, start), lines, words[0].speaker or segment.speaker))
    return cues


def _speaker_prefix(speaker: str | None) -> str:
    label = _no_arrow(_one_line(speaker or ""))
    return f"[{label}] " if label else ""


def _cue_lines(cue: Cue) -> tuple[str, ...]:
    if not cue.lines or not cue.speaker:
        return cue.lines
    return (_speaker_prefix(cue.speaker) + cue.lines[0], *cue.lines[1:])


def _span(words: Iterable[Word]) -> tuple[float | None, float | None]:
    timed = [w for w in words if w.start is not None and w.end is not None]
    if not timed:
        return None, None
    return timed[0].start, max(w.end for w in timed)  # type: ignore[type-var]


def _pieces(segment: Segment) -> list[str]:
    """The text of each word (without words: the written units of the text) on one line; "" if blank."""
    texts = [w.text for w in segment.words] if segment.words else [
        u.text for u in written_units(segment.text, segment.language)
    ]
    return [_one_line(t) for t in texts]


def _joiner(segment: Segment) -> str:
    return "" if segment.language in CHARACTER_LANGUAGES else " "


def _wrap(pieces: Sequence[str], width: int, joiner: str) -> list[str]:
    """Greedy line filling at piece boundaries; a piece longer than ``width`` gets its own line.

    Each line is made arrow-free after joining: "a-" and "->" joined without a space
    would make one.
    """
    lines: list[str] = []
    for piece in pieces:
        if lines and len(lines[-1]) + len(joiner) + len(piece) <= width:
            lines[-1] = lines[-1] + joiner + piece
        else:
            lines.append(piece)
    return [_no_arrow(line) for line in lines]


# whitespace of any kind (str.isspace: line and paragraph separators, vertical tab, form
# feed, U+0085, ...) and the C0/C1 control characters; parsers split lines at several of them
_BREAKS = re.compile(r"[\s\x00-\x1f\x7f-\x9f]+")
# a run of two or more hyphens before ">": replaced whole, so no "-->" can remain (one
# pass, by construction; replacing "-->" alone turns "--->" into "-->")
_ARROWS = re.compile(r"-{2,}>")


def _one_line(text: str) -> str:
    """Text on one line: each run of whitespace or control characters becomes one space."""
    return _BREAKS.sub(" ", text).strip(" ")


def _no_arrow(text: str) -> str:
    """Without "-->", which subtitle parsers read as a cue's timing line."""
    return _ARROWS.sub("->", text)


def _vtt_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _timestamp(seconds: float, separator: str) -> str:
    ms = max(0, round(seconds * 1000))
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{ms:03d}"
