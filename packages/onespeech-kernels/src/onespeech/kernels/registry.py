"""Model kinds: which package converts a kind of model and where its catalog files are.

The kernels hold the generic lifecycle (catalog, store, resolve) but know no model.
Each model package registers its kinds when it is imported (``onespeech.qwen3``:
``asr`` and ``aligner``; ``onespeech.features``: ``vad``), and names the module that
does so under the ``onespeech.models`` entry-point group, so that resolving a
catalog id finds every installed kind without the kernels importing a higher layer
by name.
"""

from __future__ import annotations

import importlib.metadata
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ENTRY_POINT_GROUP", "Converter", "ModelKind", "catalog_dirs", "model_kind", "register_kind"]

#: Entry-point group through which installed packages register their model kinds.
ENTRY_POINT_GROUP = "onespeech.models"

#: A model kind's converter: (publisher_dir, staging_dir, precision "fp32"|"bf16"|"int8",
#: revision or None) -> anything; writes the runtime files of one precision into staging_dir (never elsewhere)
Converter = Callable[[Path, Path, str, str | None], object]


@dataclass(frozen=True)
class ModelKind:
    """One kind of model (``"asr"``, ``"aligner"``, ``"vad"``, ...).

    Attributes
    ----------
    kind : str
    converter : Converter
        Publisher files -> runtime files of one precision.
    sources : callable
        ``sources(directory)``: the names of the publisher files in ``directory`` that
        a conversion reads (empty when it holds none); their digests are recorded
        and compared at every later load.
    describe_sources : str
        What a directory of publisher files of this kind holds (for error messages).
    catalog_dir : Path or None
        A directory of catalog files (``*.json``) shipped with the registering package.
    converter_version : str
        Names the converter's output layout; recorded in every install record, and a
        record of another version is converted again (empty: not tracked).
    """

    kind: str
    converter: Converter
    sources: Callable[[Path], list[str]]
    describe_sources: str
    catalog_dir: Path | None = None
    converter_version: str = ""


_KINDS: dict[str, ModelKind] = {}
_LOCK = threading.Lock()
_discovered = False


def register_kind(
    kind: str,
    converter: Converter,
    *,
    sources: Callable[[Path], list[str]],
    describe_sources: str,
    catalog_dir: str | os.PathLike[str] | None = None,
    converter_version: str = "",
) -> ModelKind:
    """Register (or replace) the converter, source files and catalog directory of ``kind``."""
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"kind {kind!r} must be a non-empty string")
    directory = Path(catalog_dir) if catalog_dir is not None else None
    entry = ModelKind(kind, converter, sources, describe_sources, directory, converter_version)
    with _LOCK:
        _KINDS[kind] = entry
    return entry


def _discover() -> None:
    """Import every module named under the ``onespeech.models`` entry points, once."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        point.load()  # the module registers its kinds when imported


def model_kind(kind: str) -> ModelKind:
    """The registration of ``kind``.

    Raises
    ------
    LookupError
        No installed package registers ``kind`` (the message lists the known kinds).
    """
    if kind not in _KINDS:
        _discover()
    try:
        return _KINDS[kind]
    except KeyError:
        known = ", ".join(sorted(_KINDS)) or "none"
        raise LookupError(
            f"no installed OneSpeech package handles models of kind {kind!r} (known kinds: {known})"
        ) from None


def catalog_dirs() -> list[Path]:
    """The catalog directories of every registered kind (each listed once)."""
    _discover()
    dirs: list[Path] = []
    for entry in _KINDS.values():
        if entry.catalog_dir is not None and entry.catalog_dir not in dirs:
            dirs.append(entry.catalog_dir)
    return dirs
