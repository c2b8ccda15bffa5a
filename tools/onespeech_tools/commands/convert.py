"""``qwen-convert``: publisher files -> verified FP32 runtime files (manifest.fp32.json).

Converts into a staging directory, checks every output against the converter's
manifest, then installs atomically into ``--out`` (default: in place, beside the
publisher files). Prints each runtime file with its size and SHA-256.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

PRECISION = "fp32"


def add_arguments(parser: argparse.ArgumentParser, precision: str = PRECISION) -> None:
    parser.add_argument("source", type=Path, help="directory with config.json and model.safetensors (or index + shards)")
    parser.add_argument("--out", type=Path, help="runtime directory to install into (default: SOURCE, in place)")
    parser.add_argument("--revision", help="publisher revision to record in the manifest")
    parser.add_argument("--quiet", action="store_true", help="print only the manifest path")


def run(args: argparse.Namespace, precision: str = PRECISION) -> int:
    from onespeech.kernels.errors import ConversionInProgressError, ModelIntegrityError
    from onespeech.kernels.store import read_manifest
    from onespeech.qwen3.config import ConfigError
    from onespeech.qwen3.convert import manifest_name
    from onespeech.qwen3.runtime import install_runtime

    source: Path = args.source
    out: Path = args.out or source
    if not (source / "config.json").is_file():
        print(f"error: {source} has no config.json (not a publisher model directory)", file=sys.stderr)
        return 2
    start = time.perf_counter()
    try:
        install_runtime(source, out, precision, revision=args.revision)
    except ConversionInProgressError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except (ModelIntegrityError, ConfigError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - start
    name = manifest_name(precision)
    if args.quiet:
        print(out / name)
        return 0
    manifest = read_manifest(out, name=name)
    for file_name, pin in sorted(manifest.files.items()):
        print(f"{pin.size:>14,d}  {pin.sha256}  {file_name}")
    total = sum(pin.size for pin in manifest.files.values())
    print(f"{precision}: {len(manifest.files)} files, {total:,d} bytes, {seconds:.1f} s -> {out / name}")
    return 0
