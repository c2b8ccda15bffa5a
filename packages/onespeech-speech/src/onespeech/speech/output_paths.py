"""Where outputs go: a writable folder, one name per input inside it, never over an input.

Both ``onespeech transcribe`` and ``batch`` settle every output path before any
model loads, so a bad ``-o`` or a clash costs nothing:

- `prepare_output_dir` creates the folder and proves it writable;
- `output_stem` names outputs after the input file, but never ``.`` or ``..``
  (a file ``..wav`` would otherwise write into the folder's parent);
- `output_names` gives inputs that share a stem their folders relative to the
  folder they share, and refuses two inputs that would still write one name;
- `check_targets` resolves every output path (symlinks too) and refuses one that
  lands outside the output folder or on an input file;
- `plan_outputs` does all of that for a list of input files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

from onespeech.speech.atomic import check_writable
from onespeech.speech.errors import OutputPathError

__all__ = ["check_targets", "output_names", "output_stem", "plan_outputs", "prepare_output_dir"]

_NOT_NAMES = frozenset({"", ".", ".."})


def output_stem(name: str) -> str:
    """The file name ``name`` without its last suffix, or whole when that would leave '', '.' or '..'."""
    stem = PurePosixPath(name).stem
    return name if stem in _NOT_NAMES else stem


def prepare_output_dir(path: str | os.PathLike[str]) -> Path:
    """Create the output folder (with its parents) and check that files can be written in it."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise OutputPathError(f"output folder {folder} is a file; give a folder (it is created if missing)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        check_writable(folder)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise OutputPathError(f"output folder {folder} is not a writable folder ({reason}); give another one") from None
    return folder


def output_names(paths: Sequence[Path], names: Sequence[PurePosixPath]) -> list[PurePosixPath]:
    """Output names (relative, no format suffix) of distinct input files.

    ``names`` are the proposed names (a stem, or a path inside an input folder).
    Inputs whose proposed names collide get their paths relative to the folder
    they share instead; names that still collide (``a.wav`` and ``a.flac`` in one
    folder) raise `OutputPathError` naming both inputs.
    """
    final = list(names)
    groups: dict[PurePosixPath, list[int]] = {}
    for index, name in enumerate(names):
        groups.setdefault(name, []).append(index)
    for indexes in groups.values():
        if len(indexes) > 1:
            resolved = [paths[i].resolve() for i in indexes]
            base = Path(os.path.commonpath(resolved))
            for i, path in zip(indexes, resolved, strict=True):
                rel = PurePosixPath(path.relative_to(base).as_posix())
                final[i] = rel.with_name(output_stem(rel.name))
    owners: dict[PurePosixPath, Path] = {}
    for path, name in zip(paths, final, strict=True):
        if name in owners:
            raise OutputPathError(
                f"{path} and {owners[name]} would both write '{name}.*' (same folder and stem); rename one of them"
            )
        owners[name] = path
    return final


def check_targets(output_dir: Path, targets: Iterable[Path], inputs: Iterable[Path]) -> None:
    """Refuse output paths that resolve outside ``output_dir`` or onto one of ``inputs``.

    Inputs are matched by resolved path and by file identity (device and inode), so a
    hard link or a symlink to an input is an input too.
    """
    root = output_dir.resolve()
    by_path: dict[Path, Path] = {}
    by_identity: dict[tuple[int, int], Path] = {}
    for path in inputs:
        by_path.setdefault(path.resolve(), path)
        identity = _identity(path)
        if identity is not None:
            by_identity.setdefault(identity, path)
    for target in targets:
        resolved = target.resolve()
        if not resolved.is_relative_to(root):
            raise OutputPathError(f"output {target} would be written outside the output folder {output_dir}")
        identity = _identity(target)
        source = by_path.get(resolved) or (by_identity.get(identity) if identity is not None else None)
        if source is not None:
            raise OutputPathError(
                f"output {target} would overwrite the input {source}; give another output folder or format"
            )


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def plan_outputs(files: Sequence[Path], output_dir: Path, formats: Sequence[str]) -> list[tuple[Path, Path]]:
    """(input, the folder its outputs go to) per distinct input, every output path checked.

    Creates ``output_dir``; raises `OutputPathError` when it is not a writable folder,
    when two inputs would write one output, or when an output would overwrite an input
    or land outside ``output_dir``.
    """
    output_dir = prepare_output_dir(output_dir)
    seen: dict[Path, Path] = {}
    for path in files:
        seen.setdefault(path.resolve(), path)  # a file given twice is transcribed once
    distinct = list(seen.values())
    names = output_names(distinct, [PurePosixPath(output_stem(path.name)) for path in distinct])
    plan = [(path, output_dir / name.parent) for path, name in zip(distinct, names, strict=True)]
    targets = [folder / f"{output_stem(path.name)}.{fmt}" for path, folder in plan for fmt in formats]
    check_targets(output_dir, targets, distinct)
    return plan
