"""An ASGI app under uvicorn on 127.0.0.1 in a background thread, for tests and benchmarks."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def serving(app: Any, *, lifespan: str = "on", http: Any = None, start_timeout_s: float = 120.0) -> Iterator[int]:
    """Serve ``app`` on a free port of 127.0.0.1 until the block ends; yields the port.

    ``http`` is uvicorn's protocol class (``onespeech serve`` passes its header-timeout one);
    None is uvicorn's default. The server stops (and its lifespan ends) when the block exits.
    """
    import uvicorn

    extra = {"http": http} if http is not None else {}
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan=lifespan,
                                           **extra))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.02)
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(30)
