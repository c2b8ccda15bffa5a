"""``qwen-fetch``: download and verify a catalogued model's publisher files.

By default only fetches and verifies (resumable, retried, pinned SHA-256); with
``--convert`` it also converts and installs the runtime files (what the library
does on first use). The library packages are imported inside :func:`run` so that
``onespeech-convert --help`` works in environments that lack them (the reference env).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="catalog id, e.g. Qwen/Qwen3-ASR-0.6B")
    parser.add_argument("--cache-dir", type=Path, help="cache root (default: $ONESPEECH_HOME or the user cache)")
    parser.add_argument("--catalog-dir", type=Path, help="use this directory of catalog files instead of the shipped one")
    parser.add_argument("--endpoint", help="Hub endpoint or mirror (default: $HF_ENDPOINT or https://huggingface.co)")
    parser.add_argument("--offline", action="store_true", help="use only the cache (as ONESPEECH_OFFLINE=1)")
    parser.add_argument("--all", action="store_true", help="also fetch optional catalogued files (README.md)")
    parser.add_argument("--convert", action="store_true", help="then convert and install the runtime files")
    parser.add_argument(
        "--precision", choices=("fp32", "bf16", "int8"), default="fp32", help="runtime precision for --convert (default fp32)"
    )
    parser.add_argument("--retries", type=int, default=5, help="retries per file (default 5)")
    parser.add_argument("--timeout", type=float, default=60.0, help="read timeout in seconds (default 60)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from onespeech.kernels.catalog import get_entry
    from onespeech.kernels.errors import (
        CatalogError,
        ConversionInProgressError,
        DownloadError,
        ModelIntegrityError,
    )
    from onespeech.kernels.fetch import FetchOptions
    from onespeech.kernels.resolve import fetch_publisher, resolve

    options = FetchOptions(
        endpoint=args.endpoint,
        offline=True if args.offline else None,
        progress=False if args.quiet else None,
        read_timeout_s=args.timeout,
        retries=args.retries,
    )
    try:
        entry = get_entry(args.model, args.catalog_dir)
        publisher = fetch_publisher(entry, cache_dir=args.cache_dir, options=options, include_optional=args.all)
        print(f"publisher files verified: {publisher}")
        if args.convert:
            runtime = resolve(entry, args.precision, cache_dir=args.cache_dir, fetch_options=options)
            print(f"runtime files ({args.precision}) installed: {runtime}")
    except ConversionInProgressError as e:
        print(f"qwen-fetch: {e}", file=sys.stderr)
        return 75  # EX_TEMPFAIL: try again later
    except (CatalogError, ModelIntegrityError, DownloadError, OSError, ValueError) as e:
        print(f"qwen-fetch: {e}", file=sys.stderr)
        return 1
    return 0
