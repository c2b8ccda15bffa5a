"""OneSpeech runtime: kernels, tensor files, model store."""

__version__ = "0.1.0"
