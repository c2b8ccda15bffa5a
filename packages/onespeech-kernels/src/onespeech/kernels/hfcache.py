"""The Hugging Face cache a user already has: find a pinned revision's files there, read only.

``huggingface_hub`` keeps a repository under ``<hub cache>/models--<owner>--<name>/``::

    refs/<branch or tag>        the commit id the name points at
    snapshots/<commit>/<file>   a link to ../../blobs/<etag> (a copy where links are unavailable)
    blobs/<etag>                the bytes: etag = SHA-256 for LFS files (weights), git SHA-1 otherwise

The hub cache is ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``.
Nothing here writes there (no lock, no stamp, no link); the store verifies what it
finds against the catalog's pins before anything reads it, since it is another
program's cache and may hold anything.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from onespeech.kernels.store import FileDigest, check_relative_name, check_repo_id

__all__ = ["hub_cache_dir", "locate", "repo_cache_dir", "snapshot_dir"]

_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


def hub_cache_dir() -> Path:
    """``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub`` (as huggingface_hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"


def repo_cache_dir(repo_id: str, root: str | os.PathLike[str] | None = None) -> Path:
    """``<hub cache>/models--<owner>--<name>``."""
    owner, name = check_repo_id(repo_id).split("/")
    return (Path(root) if root is not None else hub_cache_dir()) / f"models--{owner}--{name}"


def snapshot_dir(repo_id: str, revision: str, root: str | os.PathLike[str] | None = None) -> Path:
    """The snapshot folder of ``revision`` (a commit id, or a branch/tag through ``refs/``)."""
    repo = repo_cache_dir(repo_id, root)
    commit = revision
    if not _COMMIT_RE.match(revision):
        try:
            commit = (repo / "refs" / check_relative_name(revision)).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            commit = revision
    return repo / "snapshots" / commit


def _inside(path: Path, repo: Path) -> Path | None:
    """``path`` resolved, if it is a regular file inside ``repo`` (a link may point anywhere)."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, dangling or a link loop
        return None
    if not real.is_relative_to(repo.resolve()) or not real.is_file():
        return None
    return real


def locate(
    repo_id: str, revision: str, pins: Mapping[str, FileDigest], root: str | os.PathLike[str] | None = None
) -> dict[str, Path]:
    """The files of ``pins`` (name -> pin) present in the hub cache, name -> resolved path.

    A name is looked for in the pinned revision's snapshot, then (for a file stored
    in LFS, whose blob is named by its SHA-256) as ``blobs/<pin's SHA-256>``: the same
    bytes fetched under another revision. Only regular files inside the repository's
    cache folder count. Nothing is verified here: see :func:`onespeech.kernels.resolve`.
    """
    repo = repo_cache_dir(repo_id, root)
    if not repo.is_dir():
        return {}
    snapshot = snapshot_dir(repo_id, revision, root)
    found: dict[str, Path] = {}
    for name, pin in pins.items():
        for candidate in (snapshot.joinpath(*check_relative_name(name).split("/")), repo / "blobs" / pin.sha256):
            real = _inside(candidate, repo)
            if real is not None:
                found[name] = real
                break
    return found
