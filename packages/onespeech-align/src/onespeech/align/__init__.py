"""Qwen3-ForcedAligner and the timing dispatcher."""

__version__ = "0.1.0"
