"""Fixtures of the kernels tests: a real local HTTP server in the Hub's layout."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def load_httpserver():
    """Import tests/httpserver.py by path (pytest runs with --import-mode=importlib)."""
    name = "onespeech_test_httpserver"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("httpserver.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture()
def hub_server() -> Iterator[object]:
    """A started :class:`HubServer` on 127.0.0.1; stopped after the test."""
    server = load_httpserver().HubServer().start()
    try:
        yield server
    finally:
        server.stop()

