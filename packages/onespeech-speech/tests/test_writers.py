import io
import os
from pathlib import Path

import pytest

from onespeech.speech.document import Document, Finish, Segment, TimingMethod, Word
from onespeech.speech.errors import DocumentFormatError
from onespeech.speech.writers import (
    FORMATS,
    SubtitleOptions,
    get_writer,
    parse_formats,
    subtitle_cues,
    write_outputs,
)

srt = pytest.importorskip("srt", reason="test dependency 'srt' (tox.ini py env)")
webvtt = pytest.importorskip("webvtt", reason="test dependency 'webvtt-py' (tox.ini py env)")

WORDS = ("Ask not what your country can do for you, ask what you can do for your country. "
         "And so, my fellow Americans: the <torch> & the --> arrow").split()


def _timed_segment(start: float, per_word: float = 0.4) -> Segment:
    words = [Word(t, start + per_word * i, start + per_word * i + 0.3, 0.9, TimingMethod.FORCED_ALIGNER)
             for i, t in enumerate(WORDS)]
    words[3] = Word(words[3].text, None, None, None, TimingMethod.NONE)  # an untimed word rides with its neighbours
    return Segment(start, start + per_word * len(WORDS), " ".join(WORDS), "en", words, Finish.END_TOKEN,
                   TimingMethod.FORCED_ALIGNER)


def _document() -> Document:
    untimed = Segment(20.0, 29.5, "an untimed segment\nwith a newline", "en",
                      [Word(t, None, None, None, TimingMethod.NONE) for t in "an untimed segment with a newline".split()],
                      Finish.END_TOKEN, TimingMethod.NONE, "aligner disabled")
    cjk = Segment(30.0, 32.0, "你好世界", "zh",
                  [Word(c, 30.0 + 0.4 * i, 30.3 + 0.4 * i, None, TimingMethod.FORCED_ALIGNER) for i, c in enumerate("你好世界")],
                  Finish.END_TOKEN, TimingMethod.FORCED_ALIGNER)
    return Document.from_segments([_timed_segment(1.0), untimed, cjk], 33.0)


def _render(fmt: str, document: Document, options: SubtitleOptions | None = None) -> str:
    out = io.StringIO()
    get_writer(fmt, options).write(document, out)
    return out.getvalue()


@pytest.mark.parametrize("options", [SubtitleOptions(), SubtitleOptions(20, 1, 2.0), SubtitleOptions(80, 3, 30.0)])
def test_cues_respect_limits_and_break_at_word_boundaries(options: SubtitleOptions) -> None:
    doc = _document()
    cues = subtitle_cues(doc, options)
    timed = [c for c in cues if c.start < 20.0]
    assert len(timed) >= (1 if options.max_cue_seconds > 12 else 2)
    for cue in timed:
        assert len(cue.lines) <= options.max_lines
        assert all(len(line) <= options.max_line_chars for line in cue.lines)
        assert cue.end - cue.start <= options.max_cue_seconds
        assert cue.start <= cue.end
    # cut at word boundaries only: the cues' words are the segment's words, in order
    assert " ".join(" ".join(c.lines) for c in timed).split() == [w.replace("-->", "->") for w in WORDS]
    # a segment without word times is one cue spanning it
    (untimed,) = [c for c in cues if c.start == 20.0]
    assert untimed.end == 29.5 and " ".join(untimed.lines) == "an untimed segment with a newline"
    assert "".join("".join(c.lines) for c in cues if c.start >= 30.0) == "你好世界"


def test_srt_parses_with_the_srt_package() -> None:
    doc = _document()
    text = _render("srt", doc)
    subtitles = list(srt.parse(text))
    cues = subtitle_cues(doc)
    assert len(subtitles) == len(cues)
    for subtitle, cue in zip(subtitles, cues, strict=True):
        assert subtitle.start.total_seconds() == pytest.approx(cue.start, abs=5e-4)
        assert subtitle.end.total_seconds() == pytest.approx(cue.end, abs=5e-4)
        assert subtitle.content.split("\n") == [line.replace("-->", "->") for line in cue.lines]
    assert [s.index for s in subtitles] == list(range(1, len(cues) + 1))


def test_vtt_parses_with_webvtt(tmp_path: Path) -> None:
    doc = _document()
    path = tmp_path / "out.vtt"
    path.write_text(_render("vtt", doc), encoding="utf-8")
    captions = webvtt.read(str(path))
    cues = subtitle_cues(doc)
    assert len(captions) == len(cues)
    for caption, cue in zip(captions, cues, strict=True):
        assert caption.start_in_seconds == pytest.approx(cue.start, abs=1.0)  # webvtt-py truncates to seconds
        assert caption.raw_text.split("\n") == [
            line.replace("-->", "->").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            for line in cue.lines
        ]
    assert captions[0].start == "00:00:01.000"


def test_tsv_txt_and_json() -> None:
    doc = _document()
    rows = _render("tsv", doc).splitlines()
    assert rows[0] == "start\tend\ttext"
    assert rows[2] == "20000\t29500\tan untimed segment with a newline"
    assert len(rows) == 1 + len(doc.segments)
    assert _render("txt", doc).splitlines()[1] == "an untimed segment with a newline"
    assert Document.from_json(_render("json", doc)) == doc


def test_parse_formats() -> None:
    assert parse_formats("all") == list(FORMATS)
    assert parse_formats("srt,vtt,srt") == ["srt", "vtt"]
    with pytest.raises(ValueError, match="unknown output format 'docx'"):
        parse_formats("txt,docx")
    with pytest.raises(ValueError, match="positive integer"):
        SubtitleOptions(max_lines=0)


def test_write_outputs_names_and_atomic_replacement(tmp_path: Path) -> None:
    doc = _document()
    out = tmp_path / "out"
    paths = write_outputs(doc, "/somewhere/meeting.final.flac", out, "all")
    assert [p.name for p in paths] == [f"meeting.final.{f}" for f in FORMATS]
    assert sorted(os.listdir(out)) == sorted(p.name for p in paths)  # no temporary file left


def test_write_outputs_failure_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "a.json"
    target.write_text("old")
    broken = Document.from_segments([], 0.0)
    broken.duration = object()  # type: ignore[assignment]  # not a number of seconds
    with pytest.raises(DocumentFormatError, match="duration"):
        write_outputs(broken, "a.wav", tmp_path, "json")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["a.json"]
