"""Qwen3-ASR recognizer on the OneSpeech runtime."""

__version__ = "0.1.0"
