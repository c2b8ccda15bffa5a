"""``probe``: what the model cache holds, what is verified, which pins are missing.

For every catalog entry: the publisher files present / verified / missing, each
runtime precision's install state, the entry's unknown or unreproducible pins and
the state of its lock. Then cache directories no catalog entry explains (local
models, other revisions). Read-only unless ``--verify`` is given, which hashes
every present file and records the result (as a load would).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def _file_states(
    directory: Path, pins: dict, verify: bool, what: str
) -> tuple[list[str], list[str], list[str], list[str]]:
    """(verified, unverified, missing, bad) names; ``verify`` hashes what is unverified."""
    from onespeech.kernels.errors import ModelIntegrityError
    from onespeech.kernels.store import is_verified, verify_files

    verified, unverified, missing, bad = [], [], [], []
    for name, pin in pins.items():
        path = directory / name
        if not path.is_file():
            missing.append(name)
        elif is_verified(directory, name, pin):
            verified.append(name)
        elif verify:
            try:
                verify_files(directory, {name: pin}, digests="always", what=what)
                verified.append(name)
            except ModelIntegrityError as e:
                bad.append(f"{name} ({e.reason})")
        elif path.stat().st_size != pin.size:
            bad.append(f"{name} (size {path.stat().st_size}, pinned {pin.size})")
        else:
            unverified.append(name)
    return verified, unverified, missing, bad


def _runtime_lines(runtime: Path, precision: str, verify: bool) -> list[str]:
    from onespeech.kernels.errors import ModelIntegrityError
    from onespeech.kernels.resolve import install_record_name
    from onespeech.kernels.store import read_manifest

    record = install_record_name(precision)
    if not (runtime / record).is_file():
        return [f"  runtime {precision}: not installed"]
    try:
        manifest = read_manifest(runtime, name=record)
    except ModelIntegrityError as e:
        return [f"  runtime {precision}: BROKEN record: {e}"]
    verified, unverified, missing, bad = _file_states(runtime, manifest.files, verify, "runtime file")
    total = sum(d.size for d in manifest.files.values())
    pinned = "matches catalog pins" if manifest.metadata.get("pinned") else "digests recorded at conversion"
    state = "verified" if len(verified) == len(manifest.files) else "NOT fully verified"
    lines = [
        f"  runtime {precision}: installed, {len(manifest.files)} files, {_size(total)}, {pinned}; {state} "
        f"({len(verified)} verified, {len(unverified)} unverified, {len(missing)} missing, {len(bad)} bad)"
    ]
    lines += [f"    missing: {n}" for n in missing] + [f"    BAD: {b}" for b in bad]
    return lines


def _entry_lines(entry, cache_dir: Path, verify: bool) -> list[str]:
    from onespeech.kernels.lock import lock_status
    from onespeech.kernels.resolve import PUBLISHER_DIR, RUNTIME_DIR, model_dir

    head = f"{entry.id} ({entry.kind}, {entry.license})"
    source = f"{entry.package} {entry.revision} ({entry.wheel.name})" if entry.wheel else f"@ {entry.revision}"
    directory = model_dir(entry, cache_dir)
    pins = {f.name: f.pin for f in entry.files if f.required and f.pin is not None}
    verified, unverified, missing, bad = _file_states(directory / PUBLISHER_DIR, pins, verify, "publisher file")
    total = sum(p.size for p in pins.values())
    have = sum(pins[n].size for n in verified + unverified)
    lines = [
        f"{head} {source}",
        f"  cache: {directory}{'' if directory.exists() else ' (absent)'}",
        f"  publisher: {len(verified) + len(unverified)}/{len(pins)} required files present "
        f"({_size(have)} of {_size(total)}); {len(verified)} verified, {len(unverified)} not yet verified, "
        f"{len(bad)} bad",
    ]
    if missing:
        lines.append(f"    missing: {', '.join(missing)}")
    lines += [f"    BAD: {b}" for b in bad]
    for precision in entry.runtime:
        lines += _runtime_lines(directory / RUNTIME_DIR, precision, verify)
    lines.append(f"  lock: {lock_status(directory)}")
    unknown = entry.unknown_pins()
    lines.append(f"  pins missing/unreproducible: {len(unknown)}" if unknown else "  pins: all known")
    lines += [f"    {u}" for u in unknown]
    return lines


def _other_lines(cache_dir: Path, entries: dict) -> list[str]:
    from onespeech.kernels.store import read_manifest

    known = {(e.repo or f"pypi/{e.package}", e.revision) for e in entries.values()}
    lines = []
    for rev_dir in sorted((cache_dir / "models").glob("*/*")):
        repo = rev_dir.parent.name.replace("--", "/", 1)
        if (repo, rev_dir.name) not in known:
            lines.append(f"  {rev_dir}: {repo} @ {rev_dir.name} (not in the catalog)")
    for local in sorted((cache_dir / "local").glob("*")):
        records = sorted(p.name for p in (local / "runtime").glob("install.*.json"))
        source = "?"
        if records:
            try:
                source = read_manifest(local / "runtime", name=records[0]).metadata.get("model", "?")
            except Exception as e:  # noqa: BLE001 - a report, not a load: show the problem
                source = f"unreadable record ({e})"
        lines.append(f"  {local}: local model {source}; installed: {', '.join(records) or 'nothing'}")
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cache-dir", type=Path, help="cache root (default: $ONESPEECH_HOME or the user cache)")
    parser.add_argument(
        "--catalog-dir", type=Path, help="a directory of extra catalog files, reported after the shipped ones"
    )
    parser.add_argument("--verify", action="store_true", help="hash every present file that is not yet verified")


def run(args: argparse.Namespace) -> int:
    from onespeech.kernels.catalog import load_catalog
    from onespeech.kernels.errors import CatalogError
    from onespeech.kernels.fetch import hub_endpoint, offline_mode
    from onespeech.kernels.store import cache_root

    cache_dir = args.cache_dir or cache_root()
    try:
        entries = load_catalog()
        if args.catalog_dir is not None:
            extra = load_catalog(args.catalog_dir)
            clash = sorted(set(entries) & set(extra))
            if clash:
                raise CatalogError(f"{args.catalog_dir} redefines shipped catalog ids {clash}")
            entries.update(extra)
    except CatalogError as e:
        print(f"probe: {e}", file=sys.stderr)
        return 1
    source = "--cache-dir" if args.cache_dir else ("ONESPEECH_HOME" if os.environ.get("ONESPEECH_HOME") else "default")
    out = [
        f"cache: {cache_dir} ({source}){'' if cache_dir.exists() else ' - empty, nothing fetched yet'}",
        f"endpoint: {hub_endpoint()}; offline: {'yes' if offline_mode() else 'no'}",
        "",
    ]
    for entry in entries.values():
        out += _entry_lines(entry, cache_dir, args.verify) + [""]
    other = _other_lines(cache_dir, entries)
    out += ["other cache contents:", *(other or ["  none"])]
    print("\n".join(out))
    return 0
