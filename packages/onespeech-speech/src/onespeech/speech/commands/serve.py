"""``onespeech serve``: the OpenAI-compatible transcription server (extra ``[server]``).

Runs the ASGI app of :mod:`onespeech.speech.server` under uvicorn. Each of
``--workers`` threads loads the models once at start; ``--max-queue`` requests may
wait for a worker, more are answered 503 with Retry-After.
"""

from __future__ import annotations

import argparse
import sys

ORDER = 40
_INSTALL_HINT = "onespeech serve needs the server extra: pip install 'onespeech-speech[server]'"


def register(subparsers: argparse._SubParsersAction) -> None:
    from onespeech.speech.cli import _positive_int, add_model_options
    from onespeech.speech.server.config import DEFAULT_MAX_UPLOAD_BYTES

    parser = subparsers.add_parser("serve", help="OpenAI-compatible transcription server (needs the [server] extra)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument("--workers", type=_positive_int, default=1,
                        help="recognition workers, each with its own loaded models (default 1)")
    parser.add_argument("--max-queue", type=_positive_int, default=4,
                        help="requests that may wait for a worker; more get 503 (default 4)")
    parser.add_argument("--max-upload-mb", type=float, default=DEFAULT_MAX_UPLOAD_BYTES / 2**20,
                        help=f"largest request body in MiB (default {DEFAULT_MAX_UPLOAD_BYTES / 2**20:g})")
    parser.add_argument("--model-alias", default=None,
                        help="another name clients may send as 'model' (e.g. whisper-1)")
    parser.add_argument("--vad", default=None, help="silero_vad.onnx to use (default: the catalog's Silero VAD)")
    add_model_options(parser, outputs=False)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from onespeech.speech.server import Backend, ServerConfig, create_app
    except ImportError as error:
        print(f"{_INSTALL_HINT} ({error})", file=sys.stderr)
        return 2
    from onespeech.speech.cli import transcriber_options

    options = transcriber_options(args)
    try:
        config = ServerConfig(
            model=str(options["model"]), aligner=options["aligner"], language=options["language"],
            precision=options["precision"], threads=options["threads"], max_new_tokens=options["max_new_tokens"],
            context=options["context"], workers=args.workers, max_queue=args.max_queue,
            max_upload_bytes=max(1, int(args.max_upload_mb * 2**20)), vad=args.vad, model_alias=args.model_alias,
        )
    except (TypeError, ValueError) as error:
        print(f"onespeech serve: {error}", file=sys.stderr)
        return 2
    app = create_app(Backend(config))
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning" if args.quiet else "info")
    return 0
