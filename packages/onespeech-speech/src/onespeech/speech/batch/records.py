"""The resume record kept next to each input's outputs.

A record says which input produced the outputs (its resolved path, size,
modification time and SHA-256), with which options, and whether it succeeded. It is written last and
atomically, after every output, so it is the commit mark of one file: a run
killed at any moment leaves each input either recorded with complete outputs
or not recorded (its outputs are then redone).

Whether an input is unchanged is decided the way rsync does: a different size
means changed; the same size and modification time means unchanged; the same
size with another time is settled by the SHA-256 in the record.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from onespeech.kernels.jsonfile import loads_json
from onespeech.speech.atomic import write_atomic

__all__ = ["InputStamp", "Record", "claimed_by_other", "file_sha256", "is_current", "read_record", "record_path",
           "write_atomic"]

RECORD_VERSION = 1
_HASH_BLOCK = 1 << 20


@dataclass(frozen=True)
class InputStamp:
    """An input file's identity: size, modification time (ns) and SHA-256."""

    size: int
    mtime_ns: int
    sha256: str

    @classmethod
    def of(cls, path: Path) -> InputStamp:
        stat = path.stat()
        return cls(stat.st_size, stat.st_mtime_ns, file_sha256(path))


@dataclass(frozen=True)
class Record:
    """What one run did with one input.

    Attributes
    ----------
    status : str
        "done" (every output written) or "failed".
    options : dict
        The options that decide the outputs (model, formats, language, ...).
    outputs : list of str
        Output file names, relative to the record's folder.
    error : dict or None
        ``{"type": ..., "message": ...}`` when failed.
    audio_seconds : float
        The input's duration (0 when it could not be read).
    source : str or None
        The input's resolved path, so that another input with the same output name
        cannot take the outputs over unnoticed (None in records written before it was kept).
    """

    input: InputStamp
    options: dict[str, Any]
    status: str
    outputs: list[str] = field(default_factory=list)
    error: dict[str, str] | None = None
    audio_seconds: float = 0.0
    source: str | None = None

    def to_json(self) -> str:
        return json.dumps({"version": RECORD_VERSION, **asdict(self)}, ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Record:
        data = loads_json(text)
        if not isinstance(data, dict) or data.get("version") != RECORD_VERSION:
            raise ValueError(f"not a version-{RECORD_VERSION} batch record")
        return cls(
            input=InputStamp(**data["input"]),
            options=data["options"],
            status=data["status"],
            outputs=list(data["outputs"]),
            error=data["error"],
            audio_seconds=float(data["audio_seconds"]),
            source=data.get("source"),
        )


def record_path(output_stem: Path) -> Path:
    """The record of the outputs ``<stem>.<format>``: a hidden file beside them."""
    return output_stem.with_name(f".{output_stem.name}.onespeech-record.json")


def read_record(path: Path) -> Record | None:
    """The record at ``path``, or None when absent or unreadable (then the input is redone)."""
    try:
        return Record.from_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def is_current(record: Record | None, source: Path, options: dict[str, Any], folder: Path) -> bool:
    """True when ``record`` finished ``source`` with ``options`` and its outputs are all there."""
    if record is None or record.status != "done" or record.options != options:
        return False
    if not all((folder / name).is_file() for name in record.outputs):
        return False
    stat = source.stat()
    if stat.st_size != record.input.size:
        return False
    return stat.st_mtime_ns == record.input.mtime_ns or file_sha256(source) == record.input.sha256


def claimed_by_other(record: Record | None, source: Path) -> bool:
    """True when ``record`` finished outputs for another input than ``source``.

    The same content at another path (a corpus that was moved) is not another input.
    """
    if record is None or record.status != "done" or record.source is None:
        return False
    if Path(record.source) == source.resolve():
        return False
    return source.stat().st_size != record.input.size or file_sha256(source) != record.input.sha256


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of the file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()
