"""A Document in the OpenAI transcription shapes: json, text, srt, vtt, verbose_json.

``verbose_json`` follows OpenAI's ``TranscriptionVerbose``: ``task``, ``language``
(the lowercase English name, as OpenAI writes it), ``duration``, ``text``, then
``segments`` and/or ``words`` as ``timestamp_granularities[]`` asks (segments when
none is given). Segment fields this model family does not compute are ``null``:
``avg_logprob`` and ``no_speech_prob`` (no sampling statistics are kept), ``tokens``
(the document keeps text, not token ids). ``temperature`` is 0.0 (decoding is greedy),
``seek`` is the segment start in 10 ms frames, ``compression_ratio`` is computed from
the text as Whisper computes it (UTF-8 length over zlib-compressed length).

Speakers are added as the Document JSON writer (``onespeech transcribe -f json``)
writes them: ``speaker`` on each segment and word (the same ``SPEAKER_00`` labels,
null when speakers are off) and ``speakers``, each ``{"label", "duration"}``.
OpenAI's clients keep fields they do not know.
"""

from __future__ import annotations

import io
import zlib
from typing import Any

from onespeech.qwen3.languages import TAG_BY_NAME

# "document" (ours): the Document's JSON exactly as ``onespeech transcribe -f json`` writes it
RESPONSE_FORMATS = ("json", "text", "srt", "vtt", "verbose_json", "document")
GRANULARITIES = ("word", "segment")
_NAME_BY_TAG = {tag: name.lower() for name, tag in TAG_BY_NAME.items()}


def language_name(tag: str | None) -> str:
    """OpenAI names languages in lowercase English ("english"); unknown stays as given."""
    if not tag:
        return ""
    return _NAME_BY_TAG.get(tag, tag.lower())


def compression_ratio(text: str) -> float | None:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else None


def verbose_json(document: Any, granularities: tuple[str, ...]) -> dict[str, Any]:
    """``TranscriptionVerbose`` of a Document."""
    body: dict[str, Any] = {
        "task": "transcribe",
        "language": language_name(document.language),
        "duration": float(document.duration),
        "text": document.text,
        "speakers": [{"label": speaker.label, "duration": speaker.duration} for speaker in document.speakers],
    }
    if "segment" in granularities or not granularities:
        body["segments"] = [
            {
                "id": index,
                "seek": round(segment.start * 100),
                "start": segment.start,
                "end": segment.end,
                "text": segment.text,
                "tokens": None,
                "temperature": 0.0,
                "avg_logprob": None,
                "compression_ratio": compression_ratio(segment.text),
                "no_speech_prob": None,
                "speaker": segment.speaker,
            }
            for index, segment in enumerate(document.segments)
        ]
    if "word" in granularities:
        body["words"] = [{"word": word.text, "start": word.start, "end": word.end, "speaker": word.speaker}
                         for word in document.words]
    return body


def written(document: Any, fmt: str) -> str:
    """The file ``onespeech transcribe -f FMT`` writes for ``document`` (a format of the CLI's writers)."""
    from onespeech.speech.writers import get_writer

    buffer = io.StringIO()
    get_writer(fmt).write(document, buffer)
    return buffer.getvalue()
