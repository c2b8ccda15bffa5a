"""OpenAI-compatible transcription server (``pip install onespeech-speech[server]``).

>>> from onespeech.speech.server import Backend, ServerConfig, create_app
>>> app = create_app(Backend(ServerConfig(model="Qwen/Qwen3-ASR-0.6B")))   # any ASGI server runs it

See ``docs/server.md`` for the endpoints, the error codes and the measured figures.
"""

from onespeech.speech.server.app import create_app
from onespeech.speech.server.backend import Backend
from onespeech.speech.server.config import ServerConfig

__all__ = ["Backend", "ServerConfig", "create_app"]
