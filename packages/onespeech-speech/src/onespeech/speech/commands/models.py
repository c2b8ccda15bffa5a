"""``onespeech models list|fetch|verify|remove``: the model catalog and the local cache.

- ``list``: every catalog id with its kind, pinned revision, download size, runtime
  pins and what is cached (publisher files, runtime files per precision).
- ``fetch ID``: download (if missing), verify, convert and install, as the first
  ``transcribe`` with that model would.
- ``verify ID``: hash every cached file of the model again against its pins
  (publisher files) and its install record (runtime files).
- ``remove ID``: delete the model's cache directory (under its lock).
"""

from __future__ import annotations

import argparse
import shutil
import sys

ORDER = 20


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("models", help="list, fetch, verify or remove catalogued models")
    parser.add_argument("--catalog-dir", default=None, help="catalog files to use instead of the shipped ones")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("list", help="catalog ids, sizes, pins and cached state")
    fetch = actions.add_parser("fetch", help="download, verify, convert and install a model")
    fetch.add_argument("model", help="catalog id, e.g. Qwen/Qwen3-ASR-0.6B")
    fetch.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    verify = actions.add_parser("verify", help="hash every cached file of a model against its pins")
    verify.add_argument("model")
    remove = actions.add_parser("remove", help="delete a model from the cache")
    remove.add_argument("model")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from onespeech.kernels.errors import CatalogError, ModelIntegrityError, UnknownModelError

    try:
        return _ACTIONS[args.action](args)
    except (UnknownModelError, CatalogError, ModelIntegrityError, OSError, ValueError) as error:
        print(f"onespeech models {args.action}: {error}", file=sys.stderr)
        return 1


def _list(args: argparse.Namespace) -> int:
    from onespeech.kernels.catalog import load_catalog

    for entry in load_catalog(args.catalog_dir).values():
        sizes = [f.size for f in entry.files if f.required and f.size is not None]
        pins = ", ".join(f"{p} {r.status}" for p, r in sorted(entry.runtime.items()))
        print(f"{entry.id}  [{entry.kind}]  revision {entry.revision}  {_size(sum(sizes))}  runtime: {pins}")
        print(f"    cached: {_cached_state(entry)}")
    return 0


def _cached_state(entry) -> str:
    from onespeech.kernels.resolve import PUBLISHER_DIR, RUNTIME_DIR, install_record_name, model_dir

    directory = model_dir(entry)
    if not directory.exists():
        return "no"
    publisher = directory / PUBLISHER_DIR
    present = [f for f in entry.files if f.required and (publisher / f.name).is_file()]
    required = [f for f in entry.files if f.required]
    states = [f"publisher files {len(present)}/{len(required)}"]
    for precision in ("fp32", "bf16"):
        if (directory / RUNTIME_DIR / install_record_name(precision)).is_file():
            states.append(f"{precision} runtime installed")
    return ", ".join(states)


def _fetch(args: argparse.Namespace) -> int:
    from onespeech.kernels.resolve import resolve

    runtime = resolve(args.model, args.precision, catalog_dir=args.catalog_dir)  # a catalog id: its kind is known
    print(f"{args.model} ({args.precision}): {runtime}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from onespeech.kernels.catalog import get_entry
    from onespeech.kernels.resolve import PUBLISHER_DIR, RUNTIME_DIR, install_record_name, model_dir
    from onespeech.kernels.store import read_manifest, verify_files

    entry = get_entry(args.model, args.catalog_dir)
    directory = model_dir(entry)
    checked = 0
    publisher = directory / PUBLISHER_DIR
    pins = {f.name: f.pin for f in entry.files if f.pin is not None and (publisher / f.name).is_file()}
    if pins:
        verify_files(publisher, pins, digests="always", what="publisher file")
        checked += len(pins)
    for precision in ("fp32", "bf16"):
        record = install_record_name(precision)
        runtime = directory / RUNTIME_DIR
        if (runtime / record).is_file():
            files = read_manifest(runtime, name=record).files
            verify_files(runtime, files, digests="always", what="runtime file")
            checked += len(files)
    if not checked:
        print(f"{args.model}: nothing cached", file=sys.stderr)
        return 1
    print(f"{args.model}: {checked} files verified")
    return 0


def _remove(args: argparse.Namespace) -> int:
    from onespeech.kernels.catalog import get_entry
    from onespeech.kernels.lock import LOCK_NAME, DirectoryLock
    from onespeech.kernels.resolve import model_dir

    directory = model_dir(get_entry(args.model, args.catalog_dir))
    if not directory.exists():
        print(f"{args.model}: not cached")
        return 0
    with DirectoryLock(directory):  # never delete under a running fetch or conversion
        for child in directory.iterdir():
            if child.name != LOCK_NAME:
                shutil.rmtree(child) if child.is_dir() else child.unlink()
    shutil.rmtree(directory, ignore_errors=True)
    print(f"{args.model}: removed {directory}")
    return 0


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


_ACTIONS = {"list": _list, "fetch": _fetch, "verify": _verify, "remove": _remove}
