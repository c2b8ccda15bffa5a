"""Subcommands of ``onespeech``: one module each, with ``register(subparsers)`` and ``run(args)``."""
