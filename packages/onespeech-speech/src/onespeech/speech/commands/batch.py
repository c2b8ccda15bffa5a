"""``onespeech batch INPUT... -o DIR``: a corpus, resumable, on local workers or Ray.

Inputs are audio files, folders (recursively) and manifests (``.txt``/``.lst``,
``.jsonl`` with per-file language and context). Every model and output option
of ``onespeech transcribe`` applies. ``-o`` and every output path are checked
before any work. Prints the report on stderr; exit status 0 when every file
succeeded or was already done, 1 when any failed (or a manifest line was bad),
2 for usage errors, 130 when interrupted (Ctrl-C: files finished before it are
recorded, a rerun goes on from there).
"""

from __future__ import annotations

import argparse
import sys

from onespeech.speech.batch.ray_pool import LOCAL

ORDER = 20


def register(subparsers: argparse._SubParsersAction) -> None:
    from onespeech.speech.arguments import add_model_options
    from onespeech.speech.flags import workers_option

    parser = subparsers.add_parser("batch", help="transcribe a corpus: resumable, on worker processes or Ray")
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="audio files, folders, manifests (.txt, .jsonl)")
    add_model_options(parser)
    parser.add_argument("--workers", type=workers_option, default=None,
                        help="worker processes or Ray actors (default: workers x threads = CPUs)")
    parser.add_argument("--ray", nargs="?", const=LOCAL, default=None, metavar="ADDRESS",
                        help="run on Ray (pip install 'onespeech-speech[ray]'): no address starts a local "
                             "instance; 'auto' or ray://host:port joins a cluster")
    parser.add_argument("--retry-failed", action="store_true", help="redo only the files that failed last time")
    parser.add_argument("--overwrite-others", action="store_true",
                        help="let an input replace outputs that another input (same name, other path) finished")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except KeyboardInterrupt:
        print("onespeech batch: interrupted; the files finished before it are recorded, run it again to go on",
              file=sys.stderr)
        return 130


def _run(args: argparse.Namespace) -> int:
    from onespeech.speech.arguments import options_from_args, progress_from_args
    from onespeech.speech.batch import transcribe_corpus
    from onespeech.speech.writers import parse_formats

    try:
        options = options_from_args(args)
        formats = parse_formats(args.format)
        if args.workers is not None and args.workers < 1:
            raise ValueError(f"--workers {args.workers}: it must be at least 1")
        report = transcribe_corpus(
            args.inputs, args.output_dir, options=options, formats=formats, workers=args.workers,
            ray_address=args.ray, retry_failed=args.retry_failed, overwrite_others=args.overwrite_others,
            progress=progress_from_args(args),
        )
    except (FileNotFoundError, ValueError, ImportError) as error:
        print(f"onespeech batch: {error}", file=sys.stderr)
        return 2
    if not args.quiet or not report.ok:
        print(report.summary(), file=sys.stderr)
    return 0 if report.ok else 1
