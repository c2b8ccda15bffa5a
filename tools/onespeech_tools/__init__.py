"""Developer tools for OneSpeech: not part of the library API.

Kept numpy-only so the reference oracles (which run in a torch environment without
our library) can import the checkpoint generator too.
"""
