"""Fixtures of the kernels tests: a real local HTTP server in the Hub's layout."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture()
def hub_server(hub_server_cls: Any) -> Iterator[object]:
    """A started :class:`HubServer` on 127.0.0.1; stopped after the test."""
    server = hub_server_cls().start()
    try:
        yield server
    finally:
        server.stop()

