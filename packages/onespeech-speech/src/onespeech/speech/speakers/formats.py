"""Turns as text: RTTM (what diarization scorers read) and JSON.

RTTM: one line per turn, ``SPEAKER <file-id> 1 <start> <duration> <NA> <NA> <speaker>
<NA> <NA>``, seconds with three decimals. Fields are separated by spaces, so a file id
with whitespace has it replaced by ``_``.

JSON: ``{"file": ..., "speakers": [labels in order of first appearance], "turns":
[{"start": s, "end": s, "speaker": label}, ...]}``, seconds with three decimals.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from onespeech.speech.speakers.turns import Turn

__all__ = ["TURN_FORMATS", "rttm_file_id", "turns_json", "turns_rttm"]

#: The formats speaker turns can be written in.
TURN_FORMATS = ("rttm", "json")


def rttm_file_id(name: str) -> str:
    """``name`` usable as an RTTM field: whitespace becomes ``_``; an empty name becomes ``audio``."""
    return re.sub(r"\s+", "_", name) or "audio"


def turns_rttm(turns: Sequence[Turn], file_id: str) -> str:
    """The RTTM lines of ``turns`` (empty text without turns)."""
    uri = rttm_file_id(file_id)
    return "".join(
        f"SPEAKER {uri} 1 {t.start:.3f} {t.end - t.start:.3f} <NA> <NA> {rttm_file_id(t.speaker)} <NA> <NA>\n"
        for t in turns
    )


def turns_json(turns: Sequence[Turn], file: str) -> str:
    """The JSON document of ``turns`` (see the module docstring)."""
    speakers = list(dict.fromkeys(t.speaker for t in turns))
    body = {
        "file": file,
        "speakers": speakers,
        "turns": [{"start": round(t.start, 3), "end": round(t.end, 3), "speaker": t.speaker} for t in turns],
    }
    return json.dumps(body, ensure_ascii=False, indent=1) + "\n"
