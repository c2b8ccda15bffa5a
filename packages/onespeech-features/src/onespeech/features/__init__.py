"""Audio source, Whisper log-mel features and Silero VAD in numpy."""

__version__ = "0.1.0"
