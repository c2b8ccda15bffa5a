"""OpenAI-compatible transcription server (``pip install onespeech-speech[server]``).

>>> from onespeech.speech.server import Backend, ServerConfig, create_app
>>> app = create_app(Backend(ServerConfig(model="Qwen/Qwen3-ASR-0.6B")))   # any ASGI server runs it

See ``docs/server.md`` for the endpoints, the error codes and the measured figures.
Only ``create_app`` needs the extra; the worker pool and the settings import without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from onespeech.speech.server.backend import Backend
from onespeech.speech.server.config import ServerConfig

if TYPE_CHECKING:
    from onespeech.speech.server.app import create_app

__all__ = ["Backend", "ServerConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":  # imports Starlette: only when asked for
        from onespeech.speech.server.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
