"""``onespeech serve``: the OpenAI-compatible transcription server (extra ``[server]``).

Runs the ASGI app of :mod:`onespeech.speech.server` under uvicorn. Each of
``--workers`` threads loads the models once, before the server listens (a model
that cannot load is one line and exit 1); ``--max-queue`` requests may wait for a
worker, more are answered 503 with Retry-After. Limits: ``--max-upload-mb``,
``--max-audio-seconds``, ``--read-timeout`` (request headers, then bodies), ``--idle-timeout``
(WebSockets); ``--api-key`` or ``ONESPEECH_API_KEY`` requires a Bearer key.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys

ORDER = 40
API_KEY_ENV = "ONESPEECH_API_KEY"
_INSTALL_HINT = "onespeech serve needs the server extra: pip install 'onespeech-speech[server]'"


def register(subparsers: argparse._SubParsersAction) -> None:
    from onespeech.speech.arguments import add_model_options
    from onespeech.speech.flags import NumberOption, workers_option
    from onespeech.speech.server.config import (
        DEFAULT_IDLE_TIMEOUT_S,
        DEFAULT_MAX_AUDIO_S,
        DEFAULT_MAX_UPLOAD_BYTES,
        DEFAULT_READ_TIMEOUT_S,
    )

    seconds = NumberOption(0.1, 86400, unit="seconds")
    parser = subparsers.add_parser("serve", help="OpenAI-compatible transcription server (needs the [server] extra)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=NumberOption(0, 65535, whole=True, unit="0 picks a free port"), default=8000,
                        help="port (default 8000; 0 picks a free one)")
    parser.add_argument("--workers", type=workers_option, default=1,
                        help="recognition workers, each with its own loaded models (default 1)")
    parser.add_argument("--max-queue", type=NumberOption(1, 100_000, whole=True, unit="requests"), default=4,
                        help="requests that may wait for a worker; more get 503 (default 4)")
    parser.add_argument("--max-upload-mb", type=NumberOption(0.01, 2048, unit="MiB"),
                        default=DEFAULT_MAX_UPLOAD_BYTES / 2**20,
                        help=f"largest request body in MiB (default {DEFAULT_MAX_UPLOAD_BYTES / 2**20:g})")
    parser.add_argument("--max-audio-seconds", type=NumberOption(1, 86400, unit="seconds"),
                        default=DEFAULT_MAX_AUDIO_S,
                        help=f"longest audio per request, from its header (default {DEFAULT_MAX_AUDIO_S:g})")
    parser.add_argument("--read-timeout", type=seconds, default=DEFAULT_READ_TIMEOUT_S,
                        help=f"seconds a request's headers, then its body, may take to arrive "
                             f"(default {DEFAULT_READ_TIMEOUT_S:g})")
    parser.add_argument("--idle-timeout", type=seconds, default=DEFAULT_IDLE_TIMEOUT_S,
                        help=f"seconds a WebSocket may send nothing before it is closed "
                             f"(default {DEFAULT_IDLE_TIMEOUT_S:g})")
    parser.add_argument("--api-key", default=None,
                        help=f"require 'Authorization: Bearer KEY' (default: ${API_KEY_ENV}, else no key; "
                             "the variable keeps the key out of the process list)")
    parser.add_argument("--model-alias", default=None,
                        help="another name clients may send as 'model' (e.g. whisper-1)")
    add_model_options(parser, outputs=False)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from onespeech.speech.server import Backend, ServerConfig, create_app
    except ImportError as error:
        print(f"{_INSTALL_HINT} ({error})", file=sys.stderr)
        return 2
    from onespeech.speech.arguments import options_from_args

    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    try:
        config = ServerConfig(
            options_from_args(args), workers=args.workers, max_queue=args.max_queue,
            max_upload_bytes=max(1, int(args.max_upload_mb * 2**20)), model_alias=args.model_alias,
            read_timeout_s=args.read_timeout, idle_timeout_s=args.idle_timeout, max_audio_s=args.max_audio_seconds,
            api_key=api_key,
        )
    except (TypeError, ValueError) as error:
        print(f"onespeech serve: {error}", file=sys.stderr)
        return 2
    if api_key is None and not is_loopback(args.host):
        print(f"onespeech serve: warning: listening on {args.host} without an API key: anyone who can reach this "
              f"port can use the server; set {API_KEY_ENV} (or --api-key)", file=sys.stderr)
    app = create_app(Backend(config))
    try:
        app.state.load()  # before listening: a model that cannot load is one line, not a failed startup
    except KeyboardInterrupt:  # the worker threads are daemons: they end with the process
        print("onespeech serve: interrupted while loading the models", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - any loading failure ends the command with its one-line cause
        print(f"onespeech serve: cannot load the models: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    from onespeech.speech.server.headers import header_timeout_protocol

    uvicorn.run(app, host=args.host, port=args.port, log_level="warning" if args.quiet else "info",
                http=header_timeout_protocol(config.read_timeout_s))
    return 0


def is_loopback(host: str) -> bool:
    """Whether ``host`` only ever means this machine (an address, or a name that resolves only to loopback)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return False
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)
