"""transcribe(path) -> Document: the OneSpeech pipeline and CLI."""

__version__ = "0.1.0"
