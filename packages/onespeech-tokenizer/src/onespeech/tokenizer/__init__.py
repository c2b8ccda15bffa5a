"""Qwen3 byte-level BPE tokenizer (stdlib only)."""

__version__ = "0.1.0"
