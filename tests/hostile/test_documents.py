"""Documents from strangers, and documents whose texts and labels are hostile.

``Document.from_dict`` checks every value on the way in (finite, non-negative times
with ``start <= end``, strings where strings go) and raises ``DocumentFormatError``
naming the field path; every writer checks a Document built in code the same way
before writing. Texts and speaker labels are one line each in every format, so the
real parsers (``srt``, ``webvtt-py``, ``json`` with constants refused) read back
exactly the cues the writer meant. Inputs are small and in memory: these run in the
test process.
"""

from __future__ import annotations

import copy
import io
import json
import math
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onespeech.speech.document import Document, Finish, ModelInfo, Segment, Speaker, TimingMethod, Word
from onespeech.speech.errors import DocumentFormatError
from onespeech.speech.writers import FORMATS, get_writer, subtitle_cues

srt = pytest.importorskip("srt", reason="test dependency 'srt' (tox.ini py env)")
webvtt = pytest.importorskip("webvtt", reason="test dependency 'webvtt-py' (tox.ini py env)")

# what breaks a line-based format: every kind of line break, control characters,
# blank lines, timing lines, arrows (also the ones a one-pass replace rebuilds)
HOSTILE = ["-->", "--->", "---->", "-", ">", "\n", "\r\n", "\r", "\n\n", "\u2028", "\u2029", "\x85", "\x0b",
           "\x0c", "\x1c", "\x1e", "\x00", "\x1b", "\x7f", "\t", " ", "  ", "\n \n",
           "\n\n2\n00:00:01,000 --> 00:00:02,000\n", "00:00:01.000 --> 00:00:02.000", "1", "<b>", "&amp;", "NOTE",
           "WEBVTT", "[", "]", "\ufeff", "你", "é"]
hostile_text = st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=4)), max_size=6).map("".join)
labels = st.one_of(st.none(), hostile_text, st.sampled_from(["SPEAKER_00", "SPEAKER_01"]))
seconds = st.one_of(st.floats(0, 100, allow_nan=False), st.floats(0, 4e6, allow_nan=False))


def _document_from_dict_base() -> dict[str, Any]:
    words = [Word("hello", 0.5, 0.9, 0.8, TimingMethod.FORCED_ALIGNER, "SPEAKER_00"),
             Word("there", 1.0, 1.4, None, TimingMethod.FORCED_ALIGNER)]
    segment = Segment(0.25, 2.0, "hello there", "en", words, Finish.END_TOKEN, TimingMethod.FORCED_ALIGNER,
                      speaker="SPEAKER_00")
    document = Document.from_segments([segment], 2.5, ModelInfo("m", None, "fp32"), ModelInfo("a", "r" * 40, "fp32"))
    document.speakers = [Speaker("SPEAKER_00", 1.75)]
    return document.to_dict()


# -- from_dict: the field path ----------------------------------------------------------------

BAD_VALUES = [
    ("segments", 0, "words", 1, "end", math.nan, r"segments\[0\]\.words\[1\]\.end"),
    ("segments", 0, "words", 0, "start", -1.0, r"segments\[0\]\.words\[0\]\.start"),
    ("segments", 0, "words", 0, "start", 5.0, r"segments\[0\]\.words\[0\]\.end is 0\.9, before"),
    ("segments", 0, "end", 0.1, r"segments\[0\]\.end is 0\.1, before segments\[0\]\.start"),
    ("segments", 0, "start", math.inf, r"segments\[0\]\.start is inf"),
    ("segments", 0, "start", "0.25", r"segments\[0\]\.start is '0\.25'; it must be a number"),
    ("segments", 0, "start", True, r"segments\[0\]\.start is True"),
    ("segments", 0, "text", 7, r"segments\[0\]\.text is 7; it must be a string"),
    ("segments", 0, "speaker", ["x"], r"segments\[0\]\.speaker is of type list"),
    ("segments", 0, "words", 1, "text", None, r"segments\[0\]\.words\[1\]\.text is None"),
    ("segments", 0, "words", 1, "text", "\ud800", r"segments\[0\]\.words\[1\]\.text holds '\\ud800'"),
    ("segments", 0, "words", 0, "end", None, r"segments\[0\]\.words\[0\] has start 0\.5 and end None"),
    ("segments", 0, "words", 0, "confidence", 1.5, r"segments\[0\]\.words\[0\]\.confidence is 1\.5"),
    ("segments", 0, "words", 0, "timing_method", "guess", r"segments\[0\]\.words\[0\]\.timing_method is 'guess'"),
    ("segments", 0, "finish", None, r"segments\[0\]\.finish is None; it must be one of 'end_token'"),
    ("segments", 0, "words", 0, 3, r"segments\[0\]\.words\[0\] is 3; it must be an object"),
    ("segments", 0, "words", "nope", r"segments\[0\]\.words is 'nope'; it must be an array"),
    ("segments", 0, "words", 1, "start", 10**400,
     r"segments\[0\]\.words\[1\]\.start is an integer of 1329 bits; it must be a number of seconds in 0\.\.1e\+09"),
    ("duration", -0.5, r"duration is -0\.5"),
    ("duration", 1e300, r"duration is 1e\+300"),
    ("languages", 0, 3, r"languages\[0\] is 3"),
    ("model", "id_or_path", None, r"model\.id_or_path is None"),
    ("aligner", [], r"aligner is of type list; it must be an object with the fields of a ModelInfo"),
    ("speakers", 0, "duration", math.nan, r"speakers\[0\]\.duration is nan"),
    ("speakers", 0, "label", {}, r"speakers\[0\]\.label is of type dict"),
]


def _as_version_1(data: dict[str, Any]) -> dict[str, Any]:
    """Version 2 data in the version 1 layout: a top-level copy of the words, ``timing`` for a segment."""
    segments = []
    for segment in data["segments"]:
        segment = dict(segment)
        method, reason = segment.pop("timing_method"), segment.pop("untimed_reason")
        segment["timing"] = "qwen3-forced-aligner" if method == "forced_aligner" else reason
        segments.append(segment)
    words = [word for segment in segments for word in segment["words"]]
    return {**data, "version": 1, "segments": segments, "words": copy.deepcopy(words)}


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("case", BAD_VALUES, ids=lambda case: str(case[-1])[:40])
def test_from_dict_refuses_bad_values_naming_the_field(case: tuple[Any, ...], version: int) -> None:
    *path, value, message = case
    data = _document_from_dict_base()
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    if version == 1:
        data = _as_version_1(data)
    with pytest.raises(DocumentFormatError, match=message):
        Document.from_dict(data)


def test_version_1_loads_as_the_same_document() -> None:
    data = _document_from_dict_base()
    data["segments"].append({"start": 2.0, "end": 2.5, "text": "x", "language": None, "words": [],
                             "finish": "max_new_tokens", "timing_method": "none", "untimed_reason": "aligner disabled",
                             "speaker": None})
    assert Document.from_dict(_as_version_1(data)) == Document.from_dict(data)
    document = Document.from_dict(_as_version_1(data))
    assert document.segments[0].timing_method is TimingMethod.FORCED_ALIGNER
    assert document.segments[0].untimed_reason is None
    assert (document.segments[1].timing_method, document.segments[1].untimed_reason) == (TimingMethod.NONE,
                                                                                           "aligner disabled")
    assert document.segments[1].finish is Finish.MAX_NEW_TOKENS
    assert document.to_dict() == data  # written back as version 2: words only inside their segments


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["words"].pop(), r"words has 1 entries and the segments 2 words"),
    (lambda d: d["words"][1].update(text="other"), r"words\[1\] is not the segments' word 1"),
    (lambda d: d["segments"][0].update(timing=3), r"segments\[0\]\.timing is 3; it must be a string"),
    (lambda d: d["segments"][0].pop("timing"), r"segments\[0\] has no field 'timing'"),
    (lambda d: d.pop("words"), r"no field 'words'; a version 1 document needs it"),
    (lambda d: d["segments"][0].update(timing_method="none"), r"segments\[0\] has the unknown field 'timing_method'"),
])
def test_version_1_refuses_words_that_are_not_the_segments_words(change: Any, message: str) -> None:
    data = _as_version_1(_document_from_dict_base())
    change(data)
    with pytest.raises(DocumentFormatError, match=message):
        Document.from_dict(data)


def test_version_2_has_no_top_level_words_and_enum_strings() -> None:
    data = _document_from_dict_base()
    assert data["version"] == 2 and "words" not in data
    assert data["segments"][0]["finish"] == "end_token" and data["segments"][0]["timing_method"] == "forced_aligner"
    assert data["segments"][0]["words"][0]["timing_method"] == "forced_aligner"
    with pytest.raises(DocumentFormatError, match="the unknown field 'words'"):
        Document.from_dict({**data, "words": []})
    data["segments"][0]["untimed_reason"] = "why"
    with pytest.raises(DocumentFormatError, match=r"segments\[0\]\.untimed_reason is 'why' while"):
        Document.from_dict(data)


def test_from_dict_refuses_unknown_and_missing_fields() -> None:
    data = _document_from_dict_base()
    data["segments"][0]["words"][0]["colour"] = "red"
    with pytest.raises(DocumentFormatError, match=r"segments\[0\]\.words\[0\] has the unknown field 'colour'"):
        Document.from_dict(data)
    data = _document_from_dict_base()
    del data["segments"][0]["finish"]
    with pytest.raises(DocumentFormatError, match=r"segments\[0\] has no field 'finish'"):
        Document.from_dict(data)
    with pytest.raises(DocumentFormatError, match="version True is not supported"):
        Document.from_dict({**_document_from_dict_base(), "version": True})


def test_from_json_refuses_nan_and_integer_times_become_floats() -> None:
    text = json.dumps(_document_from_dict_base()).replace('"duration": 2.5', '"duration": NaN')
    with pytest.raises(DocumentFormatError, match="duration is nan"):
        Document.from_json(text)
    with pytest.raises(DocumentFormatError, match="not JSON: Exceeds the limit"):  # json.loads' own ValueError
        Document.from_json(text.replace("NaN", "9" * 5000))
    data = {**_document_from_dict_base(), "duration": 10**5000}
    with pytest.raises(DocumentFormatError, match="duration is an integer of 16610 bits"):
        Document.from_dict(data)
    data = _document_from_dict_base()
    data["duration"] = 3
    assert Document.from_dict(data).duration == 3.0 and isinstance(Document.from_dict(data).duration, float)


# -- from_dict over fuzzed dicts ------------------------------------------------------------------

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=10**300, max_value=10**310),
    st.integers(0, 3).map(lambda k: -(10 ** (5000 + k))),  # repr() of it raises ValueError
    st.floats(), st.text(max_size=8), st.sampled_from(["\ud800", "\udfff x"]),
)
json_value = st.recursive(json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a nested dict/list: (key, key, ...)."""
    out = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, value in data.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out += _paths(value, (*prefix, i))
    return out


@st.composite
def mutated_documents(draw: st.DrawFn) -> Any:
    data = _document_from_dict_base()
    for _ in range(draw(st.integers(0, 3))):
        paths = _paths(data)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(json_value)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=6))] = draw(json_value)
        else:
            parent.append(draw(json_value))
    return data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(mutated_documents(), json_value))
def test_from_dict_returns_a_valid_document_or_raises_document_format_error(data: Any) -> None:
    original = copy.deepcopy(data)
    try:
        document = Document.from_dict(data)
    except DocumentFormatError:
        return
    assert data == original  # not modified (deepcopy keeps the float objects, so a NaN equals itself)
    document.check()
    for fmt in FORMATS:  # every writer takes what from_dict accepted
        _render(fmt, document)
    assert Document.from_json(_render("json", document)) == document


# -- writers: hostile texts and labels, NaN built in code ----------------------------------------


def _render(fmt: str, document: Document) -> str:
    out = io.StringIO()
    get_writer(fmt).write(document, out)
    return out.getvalue()


@st.composite
def words_of(draw: st.DrawFn, start: float, end: float) -> list[Word]:
    out = []
    for _ in range(draw(st.integers(0, 6))):
        text = draw(hostile_text)
        if draw(st.booleans()):
            a, b = sorted((draw(st.floats(start, end)), draw(st.floats(start, end))))
            out.append(Word(text, a, b, draw(st.one_of(st.none(), st.floats(0, 1))), TimingMethod.FORCED_ALIGNER, draw(labels)))
        else:
            out.append(Word(text, None, None, None, TimingMethod.NONE, draw(labels)))
    return out


@st.composite
def documents(draw: st.DrawFn) -> Document:
    segments = []
    for _ in range(draw(st.integers(0, 4))):
        start = draw(seconds)
        end = start + draw(st.floats(0, 40))
        language = draw(st.sampled_from(["en", "zh", "ja", None, "xx"]))
        timed = draw(st.booleans())
        words = draw(words_of(start, end)) if timed else []
        text = " ".join(w.text for w in words) if words else draw(hostile_text)
        segments.append(Segment(start, end, text, language, words, Finish.END_TOKEN, TimingMethod.FORCED_ALIGNER,
                                speaker=draw(labels)))
    duration = max([s.end for s in segments], default=0.0)
    document = Document.from_segments(segments, duration, ModelInfo(draw(hostile_text), None, "fp32"))
    document.speakers = [Speaker(draw(hostile_text), draw(st.floats(0, 10))) for _ in range(draw(st.integers(0, 2)))]
    return document


def _first_segment(document: Document, **changes: Any) -> None:
    """Replace the first segment with a copy that has ``changes`` (segments are frozen)."""
    document.segments[0] = replace(document.segments[0], **changes)


def _word_added(document: Document, word: Word) -> None:
    _first_segment(document, words=(*document.segments[0].words, word))


# ways a Document built in code breaks the rules; each must stop every writer
CORRUPTIONS = {
    "nan segment start": lambda d: _first_segment(d, start=math.nan),
    "inf segment end": lambda d: _first_segment(d, end=math.inf),
    "segment end before start": lambda d: _first_segment(d, end=d.segments[0].start - 1.0),
    "negative duration": lambda d: setattr(d, "duration", -1.0),
    "nan duration": lambda d: setattr(d, "duration", math.nan),
    "nan speaker time": lambda d: d.speakers.append(Speaker("S", math.nan)),
    "nan word end": lambda d: _word_added(d, Word("w", 0.0, math.nan, None, TimingMethod.FORCED_ALIGNER)),
    "word end before start": lambda d: _word_added(d, Word("w", 2.0, 1.0, None, TimingMethod.FORCED_ALIGNER)),
    "text not a string": lambda d: _first_segment(d, text=None),
    "label not a string": lambda d: _first_segment(d, speaker=3),
    "lone surrogate": lambda d: _first_segment(d, text="a\udc80b"),
    "words not a tuple": lambda d: object.__setattr__(d.segments[0], "words", {}),
    "finish a string": lambda d: _first_segment(d, finish="end_token"),
    "timing method a string": lambda d: _first_segment(d, timing_method="none"),
}


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def _vtt_ms(stamp: str) -> int:
    hours, minutes, rest = stamp.split(":")
    secs, millis = rest.split(".")
    return ((int(hours) * 60 + int(minutes)) * 60 + int(secs)) * 1000 + int(millis)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents(), st.one_of(st.none(), st.sampled_from(sorted(CORRUPTIONS))))
def test_every_writer_output_parses_back_exactly(document: Document, corruption: str | None) -> None:
    if corruption is not None:
        if not document.segments:
            document.segments.append(Segment(0.0, 1.0, "x", "en", [], Finish.END_TOKEN, TimingMethod.NONE, "t"))
        CORRUPTIONS[corruption](document)
        for fmt in FORMATS:
            with pytest.raises(DocumentFormatError):
                _render(fmt, document)
        return

    cues = subtitle_cues(document)
    for cue in cues:  # one line each, nothing empty, no arrow a parser would read as timing
        assert cue.lines and all(cue.lines) and cue.start <= cue.end
        for line in cue.lines:
            assert line == line.strip() and "-->" not in line and len(line.splitlines()) == 1
            assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in line)

    parsed = list(srt.parse(_render("srt", document)))
    assert len(parsed) == len(cues)
    srt_text = _render("srt", document)
    for subtitle, cue in zip(parsed, cues, strict=True):
        assert subtitle.start // timedelta(milliseconds=1) == _ms(cue.start)
        assert subtitle.end // timedelta(milliseconds=1) == _ms(cue.end)
        assert "-->" not in subtitle.content
        assert len(subtitle.content.split("\n")) == len(cue.lines)
    assert srt_text.count("-->") == len(cues)

    captions = webvtt.from_string(_render("vtt", document)).captions
    assert len(captions) == len(cues)
    for caption, cue in zip(captions, cues, strict=True):
        assert (_vtt_ms(caption.start), _vtt_ms(caption.end)) == (_ms(cue.start), _ms(cue.end))
        assert len(caption.lines) == len(cue.lines)

    text = _render("json", document)
    assert Document.from_json(text) == document
    json.loads(text, parse_constant=_refuse_constant)

    rows = _render("tsv", document).split("\n")
    assert rows[-1] == "" and len(rows) == len(document.segments) + 2
    width = len(rows[0].split("\t"))
    for row, segment in zip(rows[1:-1], document.segments, strict=True):
        columns = row.split("\t")
        assert len(columns) == width and len(row.splitlines()) == 1
        assert (int(columns[0]), int(columns[1])) == (round(1000 * segment.start), round(1000 * segment.end))

    lines = _render("txt", document).split("\n")
    assert lines[-1] == "" and len(lines) == len(document.segments) + 1
    assert all(len(line.splitlines()) <= 1 for line in lines)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(hostile_text, labels, st.floats(0, 1000), st.floats(0, 30)), max_size=5))
def test_untimed_segments_are_one_cue_each_unless_blank(items: list[tuple[str, str | None, float, float]]) -> None:
    """A count that does not come from ``subtitle_cues``: one cue per segment with visible text."""
    segments = [Segment(start, start + length, text, "en", [], Finish.END_TOKEN, TimingMethod.NONE, "aligner disabled",
                        label) for text, label, start, length in items]
    document = Document.from_segments(segments, 2000.0)
    visible = [s for s in segments if s.text.translate(_INVISIBLE).strip()]
    subtitles = list(srt.parse(_render("srt", document)))
    captions = webvtt.from_string(_render("vtt", document)).captions
    assert len(subtitles) == len(captions) == len(visible)
    for subtitle, caption, segment in zip(subtitles, captions, visible, strict=True):
        assert subtitle.start // timedelta(milliseconds=1) == _ms(segment.start) == _vtt_ms(caption.start)
        assert subtitle.end // timedelta(milliseconds=1) == _ms(segment.end) == _vtt_ms(caption.end)
        # the words survive, in order, one line break-free line at a time
        shown = subtitle.content.replace("\n", " ")
        if segment.speaker and segment.speaker.translate(_INVISIBLE).strip():
            assert shown.startswith("[")
        assert all(ord(c) >= 32 and not 0x7F <= ord(c) <= 0x9F for c in shown)


_INVISIBLE = {c: " " for c in [*range(32), *range(0x7F, 0xA0)]}


def _refuse_constant(name: str) -> None:
    raise AssertionError(f"the JSON holds {name}")


# -- the reported cases ---------------------------------------------------------------------------


def test_a_label_with_a_blank_line_and_a_timing_line_does_not_make_a_cue() -> None:
    label = "A\n\n3\n00:00:09,000 --> 00:00:10,000\nforged"
    segments = [Segment(0.0, 1.0, "one", "en", [], Finish.END_TOKEN, TimingMethod.NONE, "t", label),
                Segment(2.0, 3.0, "two", "en", [], Finish.END_TOKEN, TimingMethod.NONE, "t", "B\r\nC\u2028D")]
    document = Document.from_segments(segments, 3.0)
    assert len(list(srt.parse(_render("srt", document)))) == 2
    assert len(webvtt.from_string(_render("vtt", document)).captions) == 2
    assert _render("txt", document).count("\n") == 2
    assert len(_render("tsv", document).splitlines()) == 3


@pytest.mark.parametrize("text", ["--->", "---->", "a--->b", "-->-->", "-- >--->"])
def test_no_arrow_survives_in_srt(text: str) -> None:
    words = [Word(text, 0.0, 1.0, None, TimingMethod.FORCED_ALIGNER), Word("x", 1.0, 2.0, None, TimingMethod.FORCED_ALIGNER)]
    document = Document.from_segments([Segment(0.0, 2.0, f"{text} x", "en", words, Finish.END_TOKEN)], 2.0)
    output = _render("srt", document)
    assert output.count("-->") == 1 and len(list(srt.parse(output))) == 1


def test_character_words_joined_without_space_make_no_arrow() -> None:
    # "a-" then "->" joined without a space (zh) would spell "-->"
    words = [Word("a-", 0.0, 0.5, None, TimingMethod.FORCED_ALIGNER), Word("->", 0.5, 1.0, None, TimingMethod.FORCED_ALIGNER)]
    document = Document.from_segments([Segment(0.0, 1.0, "a-->", "zh", words, Finish.END_TOKEN)], 1.0)
    assert _render("srt", document).count("-->") == 1


def test_blank_words_make_no_empty_cue() -> None:
    words = [Word(t, float(i), i + 0.5, None, TimingMethod.FORCED_ALIGNER)
             for i, t in enumerate(["hi", " ", "\x00", "\n\n"])]
    document = Document.from_segments([Segment(0.0, 9.0, "hi \x00", "en", words, Finish.END_TOKEN)], 9.0)
    (cue,) = subtitle_cues(document, None)
    assert cue.lines == ("hi",) and (cue.start, cue.end) == (0.0, 0.5)
    blank = Document.from_segments([Segment(0.0, 1.0, "\x00\x1b", "en", [], Finish.END_TOKEN)], 1.0)
    assert subtitle_cues(blank) == [] and _render("srt", blank) == ""


def test_a_nan_time_built_in_code_raises_before_anything_is_written() -> None:
    document = Document.from_segments([Segment(0.0, 1.0, "x", "en", [], Finish.END_TOKEN)], 1.0)
    document.segments[0] = replace(document.segments[0], end=math.nan)
    for fmt in FORMATS:
        out = io.StringIO()
        with pytest.raises(DocumentFormatError, match=r"segments\[0\]\.end is nan"):
            get_writer(fmt).write(document, out)
        assert out.getvalue() == ""
    with pytest.raises(DocumentFormatError):
        document.to_json()
