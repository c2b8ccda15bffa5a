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
        print(f"    OneSpeech cache: {_cached_state(entry)}")
        hf = _hf_cache_state(entry)
        if hf:
            print(f"    Hugging Face cache: {hf}")
    for source, runtime in _local_conversions():
        print(f"local model directory {source}  converted into {runtime}")
    return 0


def _cached_state(entry) -> str:
    from onespeech.kernels.resolve import PUBLISHER_DIR, RUNTIME_DIR, install_record_name, model_dir
    from onespeech.kernels.store import read_manifest

    directory = model_dir(entry)
    if not directory.exists():
        return "no"
    publisher = directory / PUBLISHER_DIR
    present = [f for f in entry.files if f.required and (publisher / f.name).is_file()]
    required = [f for f in entry.files if f.required]
    states = [f"publisher files {len(present)}/{len(required)}"]
    for precision in ("fp32", "bf16"):
        record = directory / RUNTIME_DIR / install_record_name(precision)
        if record.is_file():
            try:
                found = read_manifest(record.parent, name=record.name).metadata.get("found_in") or {}
            except (OSError, ValueError):
                found = {}
            hf = sum(1 for where in found.values() if where == "huggingface") if isinstance(found, dict) else 0
            states.append(f"{precision} runtime installed" + (f" (from {hf} Hugging Face cache files)" if hf else ""))
    return ", ".join(states)


def _hf_cache_state(entry) -> str:
    """Files of the entry's pinned revision in the Hugging Face cache (not verified here:
    the next load verifies them), or "" for none and for models not from the Hub."""
    from onespeech.kernels import hfcache

    if entry.source_type != "huggingface":
        return ""
    required = {f.name: f.pin for f in entry.files if f.required and f.pin is not None}
    found = hfcache.locate(entry.repo, entry.revision, required)
    if not found:
        return ""
    return f"{len(found)}/{len(required)} files in {hfcache.snapshot_dir(entry.repo, entry.revision)}"


def _local_conversions() -> list[tuple[str, str]]:
    """(source directory, runtime directory) of every read-only local directory converted into the cache."""
    from onespeech.kernels.resolve import RECORD_PREFIX, RUNTIME_DIR
    from onespeech.kernels.store import cache_root, read_manifest

    out = []
    for runtime in sorted((cache_root() / "local").glob(f"*/{RUNTIME_DIR}")):
        for record in sorted(runtime.glob(f"{RECORD_PREFIX}*.json")):
            try:
                source = read_manifest(runtime, name=record.name).metadata.get("source_dir")
            except (OSError, ValueError):
                continue
            if isinstance(source, str):
                out.append((source, str(runtime)))
                break
    return out


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
    if entry.source_type == "huggingface":  # the files a conversion may take from the Hugging Face cache
        from onespeech.kernels import hfcache

        rest = {f.name: f.pin for f in entry.files if f.required and f.pin is not None and f.name not in pins}
        found = hfcache.locate(entry.repo or "", entry.revision or "", rest)
        verify_files(hfcache.repo_cache_dir(entry.repo or ""), {n: rest[n] for n in found}, paths=found,
                     digests="always", what="Hugging Face cache file")  # fmt: skip
        checked += len(found)
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
    from onespeech.kernels.resolve import PUBLISHER_DIR, RUNTIME_DIR
    from onespeech.kernels.store import forget_stamps

    with DirectoryLock(directory):  # never delete under a running fetch or conversion
        for sub in (PUBLISHER_DIR, RUNTIME_DIR):
            forget_stamps(directory / sub)
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
