"""The small records a Document holds besides its segments, and its JSON layout version.

They live apart from ``document`` so that ``document_check``, which builds them from
JSON, needs nothing of the Document module (which calls the checker).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DOCUMENT_VERSION", "ModelInfo", "Speaker"]

#: The JSON layout ``Document.to_dict`` writes. Version 2: words only inside their
#: segments, enums as their string values, ``untimed_reason`` beside ``timing_method``.
#: ``Document.from_dict`` also reads version 1 (see ``document_check``).
DOCUMENT_VERSION = 2


@dataclass
class Speaker:
    """A speaker found in the file: its label and total speaking time in seconds."""

    label: str
    duration: float


@dataclass
class ModelInfo:
    """Which model made a document: catalog id or path, revision when known, precision."""

    id_or_path: str
    revision: str | None
    precision: str
