"""The result of file transcription: plain dataclasses with a JSON round trip.

Times are seconds on the file's clock (exact 16 kHz sample positions divided by
16000); ``None`` where no timing stage supplied them. ``Document.to_dict`` gives
plain JSON types and carries a ``version``; ``Document.from_dict`` refuses other
versions, malformed data and values that break the document rules (see
``document_check``) with a ``DocumentFormatError`` naming the field path.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from onespeech.kernels.jsonfile import loads_json
from onespeech.qwen3 import Finish, Segment, TimingMethod, Transcript, Word, languages_by_time
from onespeech.speech.document_check import check_document, parse_document
from onespeech.speech.document_parts import DOCUMENT_VERSION, ModelInfo, Speaker
from onespeech.speech.errors import DocumentFormatError

# the result model is qwen3's, one family for every layer; speech re-exports it
__all__ = ["DOCUMENT_VERSION", "Document", "Finish", "ModelInfo", "Segment", "Speaker", "TimingMethod", "Word",
           "segment_dict"]


def _plain(value: Any) -> Any:
    """``asdict`` output as JSON types: enums become their string values."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def segment_dict(segment: Segment) -> dict[str, Any]:
    """``segment`` as plain JSON data (the v2 document layout of one segment)."""
    data: dict[str, Any] = _plain(asdict(segment))
    return data


@dataclass
class Document:
    """A transcribed file.

    Attributes
    ----------
    text : str
        Segment texts joined by one space (none between two character-written segments).
    duration : float
        Length of the decoded audio in seconds.
    language : str | None
        The language with the most recognized speech time (None without speech).
    languages : list of str
        Every recognized language, most speech time first.
    segments : list of Segment
        ``onespeech.qwen3.Segment`` with its words, finish, timing fields and speaker.
    words : list of Word
        All segments' words in order: a view made from ``segments`` (not stored).
    model, aligner : ModelInfo | None
        The recognizer and the aligner used (``aligner`` None when timing was off).
    speakers : list of Speaker
    options : dict or None
        The :class:`~onespeech.speech.options.TranscribeOptions` the document was made
        with, as plain JSON (``TranscribeOptions.record``: every option but threads,
        with this call's language, context and speakers; ``aligner`` None when timing
        was off); None in documents written before it was kept or assembled by hand.
        ``TranscribeOptions.from_dict(document.options)`` rebuilds them. Not compared
        by ``==``: it says how a document was made, not what it holds.
    """

    text: str
    duration: float
    language: str | None
    languages: list[str]
    segments: list[Segment]
    model: ModelInfo | None
    aligner: ModelInfo | None
    speakers: list[Speaker] = field(default_factory=list)
    # provenance, not content: documents with the same content are equal however they were made
    options: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def words(self) -> list[Word]:
        """All segments' words in order (the segments hold them; this is not a second copy)."""
        return [word for segment in self.segments for word in segment.words]

    @classmethod
    def from_segments(
        cls,
        segments: list[Segment],
        duration: float,
        model: ModelInfo | None = None,
        aligner: ModelInfo | None = None,
    ) -> Document:
        """Assemble the document-level fields (text, languages, words) from segments."""
        # the recognizer's Transcript is assembled by the same rules (one place: qwen3.transcript)
        transcript = Transcript.from_segments(segments)
        return cls(
            text=transcript.text,
            duration=duration,
            language=transcript.language,
            languages=languages_by_time(segments),
            segments=segments,
            model=model,
            aligner=aligner,
        )

    def check(self) -> None:
        """Raise ``DocumentFormatError`` naming the first field that breaks the document rules.

        The rules (``onespeech.speech.document_check``): finite times in seconds with
        ``start <= end``, strings where strings go, confidences in 0..1. ``to_dict``,
        ``to_json``, ``from_dict`` and every writer apply them.
        """
        check_document(self)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data with a ``version`` field (the document is checked first)."""
        self.check()
        return {"version": DOCUMENT_VERSION, **_plain(asdict(self))}

    def to_json(self, indent: int | None = 2) -> str:
        """The document as strict JSON text (UTF-8 characters kept as they are; never NaN or Infinity)."""
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=indent, allow_nan=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Document:
        """Rebuild a document from :meth:`to_dict` output (or parsed JSON of it).

        Version 1 data (a top-level ``words`` copy, ``timing`` holding a stage name or
        a reason) is converted on the way in: its top-level words must equal the
        segments' words, and ``timing`` becomes ``timing_method`` plus ``untimed_reason``.

        Raises
        ------
        DocumentFormatError
            Another version, a missing or unknown field, or a value that breaks the
            document rules; the message names the field path (``segments[3].words[2].end``).
        """
        return parse_document(data, cls)

    @classmethod
    def from_json(cls, text: str) -> Document:
        """Parse :meth:`to_json` output."""
        try:
            data = loads_json(text)
        except ValueError as error:  # JSONDecodeError, undecodable bytes, an integer over 4300 digits
            raise DocumentFormatError(f"not JSON: {error}") from error
        return cls.from_dict(data)
