"""``onespeech models list|fetch|verify|remove``: the model catalog and the local cache.

- ``list``: every catalog id with its kind, pinned revision, download size, runtime
  pins and where it was found: the OneSpeech cache (publisher files, runtime files per
  precision, and where the installed runtime's sources came from), the Hugging Face
  cache (files of the pinned revision there), and local model directories converted
  into the cache because they were read-only.
- ``fetch ID``: download (if missing), verify, convert and install, as the first
  ``transcribe`` with that model would.
- ``verify ID``: hash every cached file of the model again against its pins
  (publisher files) and its install record (runtime files).
- ``remove ID``: delete the model's cache directory (under its lock); ``--revision``
  removes another cached revision (one an older catalog pinned).

Every action is one call of the store's public API (``onespeech.kernels.resolve``,
``onespeech.kernels.modelstore``); this module only formats.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from onespeech.kernels.modelstore import ModelState

ORDER = 20


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("models", help="list, fetch, verify or remove catalogued models")
    parser.add_argument("--catalog-dir", default=None, help="catalog files to use instead of the shipped ones")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("list", help="catalog ids, sizes, pins and cached state")
    revision = "the revision expected (the catalog's pinned one; a prefix of 7 or more characters will do)"
    fetch = actions.add_parser("fetch", help="download, verify, convert and install a model")
    fetch.add_argument("model", help="catalog id, e.g. Qwen/Qwen3-ASR-0.6B")
    fetch.add_argument("--precision", choices=("fp32", "bf16", "int8"), default="fp32")
    fetch.add_argument("--revision", default=None, help=revision)
    verify = actions.add_parser("verify", help="hash every cached file of a model against its pins")
    verify.add_argument("model", help="catalog id or local model directory")
    verify.add_argument("--revision", default=None, help=revision)
    remove = actions.add_parser("remove", help="delete a model from the cache")
    remove.add_argument("model", help="catalog id, or a read-only local directory whose conversion to remove")
    remove.add_argument("--revision", default=None, help="the cached revision to remove (default: the pinned one)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from onespeech.kernels.errors import CatalogError, ModelIntegrityError, UnknownModelError

    try:
        return _ACTIONS[args.action](args)
    except (UnknownModelError, CatalogError, ModelIntegrityError, OSError, ValueError) as error:
        print(f"onespeech models {args.action}: {error}", file=sys.stderr)
        return 1


def _list(args: argparse.Namespace) -> int:
    from onespeech.kernels.modelstore import list_models, local_conversions

    for state in list_models(catalog_dir=args.catalog_dir):
        entry = state.entry
        sizes = [f.size for f in entry.files if f.required and f.size is not None]
        pins = ", ".join(f"{p} {r.status}" for p, r in sorted(entry.runtime.items()))
        print(f"{entry.id}  [{entry.kind}]  revision {entry.revision}  {_size(sum(sizes))}  runtime: {pins}")
        print(f"    OneSpeech cache: {_cached_state(state)}")
        if state.hf_files:
            print(f"    Hugging Face cache: {state.hf_files}/{state.required_files} files in {state.hf_snapshot}")
        if state.other_revisions:
            print(f"    other cached revisions: {', '.join(state.other_revisions)}")
    for conversion in local_conversions():
        print(f"local model directory {conversion.source}  converted into {conversion.runtime}")
    return 0


def _cached_state(state: ModelState) -> str:
    if not state.cached:
        return "no"
    states = [f"publisher files {state.publisher_files}/{state.required_files}"]
    for runtime in state.runtimes:
        hf = f" (from {runtime.hf_files} Hugging Face cache files)" if runtime.hf_files else ""
        old = "" if runtime.current else " by an earlier converter (converted again on next use)"
        states.append(f"{runtime.precision} runtime installed{old}{hf}")
    return ", ".join(states)


def _fetch(args: argparse.Namespace) -> int:
    from onespeech.kernels.resolve import resolve

    # a catalog id: its kind is known
    runtime = resolve(args.model, args.precision, revision=args.revision, catalog_dir=args.catalog_dir)
    print(f"{args.model} ({args.precision}): {runtime}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from onespeech.kernels.modelstore import verify

    report = verify(args.model, revision=args.revision, catalog_dir=args.catalog_dir)
    print(f"{args.model}: {report.files} files verified")
    return 0


def _remove(args: argparse.Namespace) -> int:
    from onespeech.kernels.errors import ModelNotInstalledError
    from onespeech.kernels.modelstore import remove

    try:
        directory = remove(args.model, revision=args.revision, catalog_dir=args.catalog_dir)
    except ModelNotInstalledError as error:  # nothing to do is not a failure of `remove`
        print(f"{args.model}: not cached ({error})")
        return 0
    print(f"{args.model}: removed {directory}")
    return 0


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


_ACTIONS = {"list": _list, "fetch": _fetch, "verify": _verify, "remove": _remove}
