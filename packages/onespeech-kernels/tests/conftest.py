"""Fixtures of the kernels tests: per-test random inputs, float32 bounds, a local HTTP server."""

from __future__ import annotations

import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# the tests import `f32bounds` (error bounds) from this folder: pytest runs with
# --import-mode=importlib, where test folders are not on sys.path by themselves
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True)
def _per_test_seed(request: pytest.FixtureRequest) -> None:
    """Give a test module's ``RNG`` a seed of this test's own (file and test id).

    A test then draws the same inputs whichever tests run before it (``-k``,
    ``-x``, another order), so a failure replays by its id alone.
    """
    if isinstance(getattr(request.module, "RNG", None), np.random.Generator):
        key = f"{Path(str(request.node.path)).name}::{request.node.name}"
        request.module.RNG = np.random.default_rng(zlib.crc32(key.encode()))


@pytest.fixture()
def hub_server(hub_server_cls: Any) -> Iterator[object]:
    """A started :class:`HubServer` on 127.0.0.1; stopped after the test."""
    server = hub_server_cls().start()
    try:
        yield server
    finally:
        server.stop()
