"""The files of a corpus: paths, folders and manifests expanded into work items.

An input is a file, a folder (searched recursively for audio extensions,
following symlinked subfolders, each folder once) or a
manifest (``.txt``/``.lst``: one path per line; ``.jsonl``: one object per line
with ``path`` and optional ``language`` and ``context``). Relative paths in a
manifest are relative to the manifest's folder. Each item keeps the path it
will be written under (``rel``): the file's stem for a file given directly or
in a manifest, its path inside the folder for a folder, and inputs whose names would collide get
their paths relative to the folder they share, so inputs with the same stem in
different folders keep their relative folders under the output directory.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from onespeech.kernels.jsonfile import loads_json
from onespeech.speech.errors import ManifestError
from onespeech.speech.output_paths import output_names, output_stem

AUDIO_EXTENSIONS = frozenset(
    {".wav", ".flac", ".mp3", ".ogg", ".oga", ".opus", ".aiff", ".aif", ".au", ".caf", ".w64", ".m4a"}
)
MANIFEST_EXTENSIONS = frozenset({".txt", ".lst", ".jsonl"})
_MANIFEST_KEYS = frozenset({"path", "language", "context"})


@dataclass(frozen=True)
class CorpusItem:
    """One audio file to transcribe.

    Attributes
    ----------
    path : Path
        The audio file.
    rel : PurePosixPath
        Its output name without the format suffix, relative to the output folder.
    language, context : str or None
        Per-file options from a JSONL manifest (None: the batch's options).
    """

    path: Path
    rel: PurePosixPath
    language: str | None = None
    context: str | None = None


@dataclass(frozen=True)
class Expansion:
    """What the inputs expanded to: the items, and the manifest lines that were refused."""

    items: list[CorpusItem]
    errors: list[ManifestError]


def expand_inputs(inputs: list[str | os.PathLike[str]]) -> Expansion:
    """Expand files, folders and manifests into corpus items, in a stable order.

    A path that does not exist raises ``FileNotFoundError`` at once (a typo should
    not cost a night's run); a bad manifest line is collected in ``errors`` and the
    rest of the manifest goes on. An audio file reached twice is kept once.
    Two files in one folder with the same stem (``a.wav``, ``a.flac``) raise
    `OutputPathError` (a ``ValueError``): their outputs would overwrite each other.
    A folder that cannot be listed raises ``ValueError`` naming it.
    """
    if not inputs:
        raise ValueError("no inputs; give audio files, folders or manifests (.txt, .lst, .jsonl)")
    items: list[CorpusItem] = []
    errors: list[ManifestError] = []
    for raw in inputs:
        path = Path(raw)
        if path.is_dir():
            items.extend(_folder_items(path))
        elif path.is_file() and path.suffix.lower() in MANIFEST_EXTENSIONS:
            found, bad = _manifest_items(path)
            items.extend(found)
            errors.extend(bad)
        elif path.is_file():
            items.append(CorpusItem(path, PurePosixPath(output_stem(path.name))))
        else:
            raise FileNotFoundError(f"input {path} does not exist")
    return Expansion(_unique(items), errors)


def _folder_items(folder: Path) -> list[CorpusItem]:
    """Every audio file below ``folder``, through symlinked subfolders too, each folder once."""
    found: list[Path] = []
    seen: set[tuple[int, int]] = set()
    for root, dirs, files in os.walk(folder, followlinks=True, onerror=_unlistable):
        stat = os.stat(root)
        if (stat.st_dev, stat.st_ino) in seen:  # a link back up the tree, or a second link to one folder
            dirs.clear()
            continue
        seen.add((stat.st_dev, stat.st_ino))
        dirs.sort()
        found += [Path(root, name) for name in files if Path(name).suffix.lower() in AUDIO_EXTENSIONS]
    items = []
    for path in sorted(p for p in found if p.is_file()):
        rel = PurePosixPath(path.relative_to(folder).as_posix())
        items.append(CorpusItem(path, rel.with_name(output_stem(rel.name))))
    return items


def _unlistable(error: OSError) -> None:
    raise ValueError(f"cannot list the folder {error.filename}: {error.strerror}; every file below an input "
                     "folder is transcribed, so fix its permissions or leave it out") from None


def _manifest_items(manifest: Path) -> tuple[list[CorpusItem], list[ManifestError]]:
    items: list[CorpusItem] = []
    errors: list[ManifestError] = []
    jsonl = manifest.suffix.lower() == ".jsonl"
    with open(manifest, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                entry: dict[str, object] = _parse_jsonl(text) if jsonl else {"path": text}
                items.append(_manifest_item(manifest, entry))
            except ValueError as e:
                errors.append(ManifestError(manifest, number, str(e)))
    return items, errors


def _parse_jsonl(text: str) -> dict[str, object]:
    try:
        entry = loads_json(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not a JSON object ({e.__class__.__name__})") from None
    if not isinstance(entry, dict):
        raise ValueError(f"expected a JSON object with 'path', got {type(entry).__name__}")
    unknown = set(entry) - _MANIFEST_KEYS
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}; allowed: {sorted(_MANIFEST_KEYS)}")
    for key in _MANIFEST_KEYS:
        if key in entry and not (entry[key] is None or isinstance(entry[key], str)):
            raise ValueError(f"'{key}' must be a string")
    return entry


def _manifest_item(manifest: Path, entry: dict[str, object]) -> CorpusItem:
    raw = entry.get("path")
    if not isinstance(raw, str) or not raw:
        raise ValueError("no 'path'")
    path = Path(raw) if Path(raw).is_absolute() else manifest.parent / raw
    if not path.is_file():
        raise ValueError(f"{path} is not a file")
    language, context = entry.get("language"), entry.get("context")
    return CorpusItem(
        path,
        PurePosixPath(output_stem(path.name)),
        language if isinstance(language, str) else None,
        context if isinstance(context, str) else None,
    )


def _unique(items: list[CorpusItem]) -> list[CorpusItem]:
    """Drop repeats of one file; give colliding output names their relative folders."""
    seen: dict[Path, CorpusItem] = {}
    for item in items:
        seen.setdefault(item.path.resolve(), item)
    kept = list(seen.values())
    names = output_names([item.path for item in kept], [item.rel for item in kept])
    return [CorpusItem(item.path, name, item.language, item.context) for item, name in zip(kept, names, strict=True)]
