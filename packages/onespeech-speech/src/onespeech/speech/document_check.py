"""The rules every Document meets, checked on the way in and before it is written.

``parse_document`` reads the current JSON layout (version 2) and converts version 1
on the way in (see ``_upgrade_v1``); both name the field path of a bad value.

A Document read from JSON (``Document.from_dict``) or built in code is checked
against the same rules; a value that breaks one raises ``DocumentFormatError``
naming the field path (``segments[3].words[2].end``) and what is allowed. The
rules are what the writers rely on: times are finite numbers of seconds in
``0..MAX_SECONDS`` with ``start <= end`` (a word's times are both given or both
None), texts and labels are strings that UTF-8 can encode, confidences are in
0..1. Texts may hold any characters otherwise: the writers put them on one line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar

from onespeech.qwen3 import Finish, Segment, TimingMethod, Word
from onespeech.speech.document_parts import DOCUMENT_VERSION, ModelInfo, Speaker
from onespeech.speech.errors import DocumentFormatError

if TYPE_CHECKING:
    from onespeech.speech.document import Document

__all__ = ["MAX_SECONDS", "check_document", "parse_document"]

#: The largest time a document may hold, in seconds: far beyond any recording (about
#: 31 years), and small enough that every time becomes an exact millisecond count and
#: a printable subtitle timestamp.
MAX_SECONDS = 1e9

T = TypeVar("T")
E = TypeVar("E", bound=Enum)
D = TypeVar("D", bound="Document")

# Version 1 wrote a segment's ``timing`` as the name of the stage that timed it or as
# the reason none did; the one stage that existed then was the forced aligner.
_V1_STAGES = {"qwen3-forced-aligner": TimingMethod.FORCED_ALIGNER}
_V1_SEGMENT_FIELDS = ("start", "end", "text", "language", "words", "finish", "timing", "speaker")
_V1_WORD_FIELDS = ("text", "start", "end", "confidence", "timing_method", "speaker")


# -- values ---------------------------------------------------------------------------------


def _shown(value: object) -> str:
    """``value`` for a message: short, and never an exception of its own."""
    if isinstance(value, int) and value.bit_length() > 64:  # repr of over 4300 digits raises ValueError
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, (int, float, str, type(None))):
        shown = repr(value)
        return shown if len(shown) <= 60 else shown[:57] + "..."
    return f"of type {type(value).__name__}"


def _fail(path: str, value: object, allowed: str) -> DocumentFormatError:
    return DocumentFormatError(f"{path} is {_shown(value)}; it must be {allowed}")


def _number(value: object, path: str, low: float, high: float, allowed: str) -> float:
    # ints are compared without a float conversion: a huge JSON integer would overflow it
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(path, value, allowed)
    if isinstance(value, float) and not math.isfinite(value) or not low <= value <= high:
        raise _fail(path, value, allowed)
    return float(value)


def _seconds(value: object, path: str) -> float:
    return _number(value, path, 0, MAX_SECONDS, f"a number of seconds in 0..{MAX_SECONDS:g}")


def _instance(value: object, cls: type, path: str) -> None:
    if not isinstance(value, cls):
        raise _fail(path, value, f"a {cls.__name__}")


def _text(value: object, path: str, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise _fail(path, value, "a string or null" if optional else "a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:  # a lone surrogate, e.g. from JSON "\ud800"
        raise DocumentFormatError(f"{path} holds {value[error.start]!r} at {error.start}, which is not a Unicode "
                                  "character (a lone surrogate); it must be text UTF-8 can encode") from None


def _member(value: object, path: str, cls: type[Enum]) -> None:
    if not isinstance(value, cls):
        raise _fail(path, value, f"a {cls.__name__} (" + ", ".join(f"{cls.__name__}.{m.name}" for m in cls) + ")")


def _enum(value: object, path: str, cls: type[E]) -> E:
    """The member of ``cls`` whose value is the JSON string ``value``."""
    for member in cls:
        if isinstance(value, str) and member.value == value:
            return member
    raise _fail(path, value, "one of " + ", ".join(repr(m.value) for m in cls))


def _span(start: object, end: object, path: str) -> None:
    if _seconds(start, f"{path}.start") > _seconds(end, f"{path}.end"):
        raise DocumentFormatError(f"{path}.end is {end!r}, before {path}.start {start!r}; it must not be")


# -- the dataclasses --------------------------------------------------------------------------


def check_word(word: Word, path: str) -> None:
    _instance(word, Word, path)
    _text(word.text, f"{path}.text")
    if word.start is None or word.end is None:
        if word.start is not None or word.end is not None:
            raise DocumentFormatError(f"{path} has start {_shown(word.start)} and end {_shown(word.end)}; a word's times "
                                      "must be both numbers or both null")
    else:
        _span(word.start, word.end, path)
    if word.confidence is not None:
        _number(word.confidence, f"{path}.confidence", 0, 1, "a number in 0..1 or null")
    _member(word.timing_method, f"{path}.timing_method", TimingMethod)
    _text(word.speaker, f"{path}.speaker", optional=True)


def check_segment(segment: Segment, path: str) -> None:
    _instance(segment, Segment, path)
    _span(segment.start, segment.end, path)
    _text(segment.text, f"{path}.text")
    _text(segment.language, f"{path}.language", optional=True)
    if not isinstance(segment.words, tuple):
        raise _fail(f"{path}.words", segment.words, "a tuple")
    for i, word in enumerate(segment.words):
        check_word(word, f"{path}.words[{i}]")
    _member(segment.finish, f"{path}.finish", Finish)
    _member(segment.timing_method, f"{path}.timing_method", TimingMethod)
    _text(segment.untimed_reason, f"{path}.untimed_reason", optional=True)
    if segment.timing_method is not TimingMethod.NONE and segment.untimed_reason is not None:
        raise DocumentFormatError(f"{path}.untimed_reason is {_shown(segment.untimed_reason)} while "
                                  f"{path}.timing_method is {segment.timing_method.value!r}; a timed segment "
                                  "has no untimed_reason (null)")
    _text(segment.speaker, f"{path}.speaker", optional=True)


def check_document(document: Document) -> None:
    """Raise ``DocumentFormatError`` naming the first field that breaks the rules of this module."""
    _text(document.text, "text")
    _seconds(document.duration, "duration")
    _text(document.language, "language", optional=True)
    _list(document.languages, "languages")
    for i, tag in enumerate(document.languages):
        _text(tag, f"languages[{i}]")
    _list(document.segments, "segments")
    for i, segment in enumerate(document.segments):
        check_segment(segment, f"segments[{i}]")
    for name in ("model", "aligner"):
        info = getattr(document, name)
        if info is not None:
            _instance(info, ModelInfo, name)
            _text(info.id_or_path, f"{name}.id_or_path")
            _text(info.revision, f"{name}.revision", optional=True)
            _text(info.precision, f"{name}.precision")
    if document.options is not None:
        _instance(document.options, dict, "options")
        for key in document.options:
            _text(key, "options (a key)")
    _list(document.speakers, "speakers")
    for i, speaker in enumerate(document.speakers):
        _instance(speaker, Speaker, f"speakers[{i}]")
        _text(speaker.label, f"speakers[{i}].label")
        _seconds(speaker.duration, f"speakers[{i}].duration")


def _list(value: object, path: str) -> None:
    if not isinstance(value, list):
        raise _fail(path, value, "a list")


# -- from JSON data ----------------------------------------------------------------------------


def parse_document(data: object, document_type: type[D]) -> D:
    """A checked ``document_type`` (the Document class) from ``Document.to_dict`` output or parsed JSON of it.

    Version 1 data is converted first (:func:`_upgrade_v1`). Structure next
    (objects with exactly their fields, arrays where lists go), then
    :func:`check_document`. Integer times become floats, enum strings their members.
    """
    if not isinstance(data, Mapping):
        raise DocumentFormatError(f"a document must be a JSON object, not {type(data).__name__}")
    version = data.get("version")
    if isinstance(version, bool) or version not in (1, DOCUMENT_VERSION):
        raise DocumentFormatError(f"document version {_shown(version)} is not supported; this library reads "
                                  f"versions 1 and {DOCUMENT_VERSION}")
    body = {key: value for key, value in data.items() if key != "version"}
    if version == 1:
        body = _upgrade_v1(body)
    kwargs = _fields(document_type, body, "")
    kwargs["languages"] = _items(kwargs["languages"], "languages", lambda item, path: item)
    kwargs["segments"] = _items(kwargs["segments"], "segments", _segment)
    for name in ("model", "aligner"):
        if kwargs[name] is not None:
            kwargs[name] = ModelInfo(**_fields(ModelInfo, kwargs[name], name))
    kwargs["speakers"] = _items(kwargs.get("speakers", []), "speakers",
                                lambda item, path: Speaker(**_fields(Speaker, item, path)))
    _floats(kwargs, ("duration",))
    document = document_type(**kwargs)
    check_document(document)
    return document


def _segment(data: object, path: str) -> Segment:
    kwargs = _fields(Segment, data, path)
    kwargs["words"] = tuple(_items(kwargs["words"], f"{path}.words", _word))
    kwargs["finish"] = _enum(kwargs["finish"], f"{path}.finish", Finish)
    kwargs["timing_method"] = _enum(kwargs["timing_method"], f"{path}.timing_method", TimingMethod)
    _floats(kwargs, ("start", "end"))
    return Segment(**kwargs)


def _word(data: object, path: str) -> Word:
    kwargs = _fields(Word, data, path)
    kwargs["timing_method"] = _enum(kwargs["timing_method"], f"{path}.timing_method", TimingMethod)
    _floats(kwargs, ("start", "end", "confidence"))
    return Word(**kwargs)


# -- version 1 ----------------------------------------------------------------------------------


def _upgrade_v1(body: dict[str, Any]) -> dict[str, Any]:
    """A version 1 document body in the version 2 layout.

    Version 1 stored every word twice (in its segment and in a top-level ``words``)
    and a segment's ``timing`` as a stage name or a reason. The top-level copy must
    equal the segments' words (a file where they differ says two things; it is
    refused, naming the first word that differs) and is dropped; ``timing`` becomes
    ``timing_method`` (the stage's method, or "none") and ``untimed_reason``.
    """
    if "words" not in body:
        raise DocumentFormatError("the document has no field 'words'; a version 1 document needs it")
    segments = _items(body.get("segments", []), "segments", _upgrade_v1_segment)
    words = _items(body.pop("words"), "words", lambda item, path: item)
    in_segments = [word for segment in segments for word in segment["words"]]
    for i, word in enumerate(words):
        if i >= len(in_segments) or word != in_segments[i]:
            raise DocumentFormatError(f"words[{i}] is not the segments' word {i}; in a version 1 document the "
                                      "top-level words must be the segments' words in order")
    if len(words) != len(in_segments):
        raise DocumentFormatError(f"words has {len(words)} entries and the segments {len(in_segments)} words; in a "
                                  "version 1 document the top-level words must be the segments' words in order")
    return {**body, "segments": segments}


def _upgrade_v1_segment(data: object, path: str) -> dict[str, Any]:
    segment = _named_fields("Segment", _V1_SEGMENT_FIELDS, _V1_SEGMENT_FIELDS[:-1], data, path)
    timing = segment.pop("timing")
    _text(timing, f"{path}.timing")
    method = _V1_STAGES.get(timing)
    segment["timing_method"] = (method or TimingMethod.NONE).value
    segment["untimed_reason"] = None if method else timing
    segment["words"] = _items(segment["words"], f"{path}.words",
                              lambda item, where: _named_fields("Word", _V1_WORD_FIELDS, _V1_WORD_FIELDS[:-1],
                                                                item, where))
    return segment


def _fields(cls: type, data: object, path: str) -> dict[str, Any]:
    """``data``'s entries, which must be exactly ``cls``'s fields.

    A Word or Segment needs every field but ``speaker`` (the writer gives them all;
    their defaults are for building in code); elsewhere fields with defaults may be missing.
    """
    names = tuple(f.name for f in fields(cls))
    if cls in (Word, Segment):
        required = tuple(name for name in names if name != "speaker")
    else:
        required = tuple(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING)
    return _named_fields(cls.__name__, names, required, data, path)


def _named_fields(kind: str, names: tuple[str, ...], required: tuple[str, ...], data: object,
                  path: str) -> dict[str, Any]:
    """``data``'s entries, which must be among ``names`` and include ``required``."""
    where = path or "the document"
    if not isinstance(data, Mapping):
        raise _fail(where, data, f"an object with the fields of a {kind}")
    unknown = [key for key in data if key not in names]
    if unknown:
        raise DocumentFormatError(f"{where} has the unknown field {_shown(unknown[0])}; a {kind} has "
                                  f"{', '.join(names)}")
    missing = [name for name in required if name not in data]
    if missing:
        raise DocumentFormatError(f"{where} has no field {missing[0]!r}; a {kind} needs "
                                  f"{', '.join(required)}")
    return dict(data)


def _items(value: object, path: str, parse: Callable[[Any, str], T]) -> list[T]:
    if not isinstance(value, (list, tuple)):
        raise _fail(path, value, "an array")
    return [parse(item, f"{path}[{i}]") for i, item in enumerate(value)]


def _floats(kwargs: dict[str, Any], names: tuple[str, ...]) -> None:
    """Integer times (JSON ``3``) as floats; other types are left for the checks to name."""
    for name in names:
        value = kwargs.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_SECONDS:
            kwargs[name] = float(value)
