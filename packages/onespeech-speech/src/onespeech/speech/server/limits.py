"""Request body size and time limits as ASGI middleware (413 or 408 before or while the body is read).

A declared ``Content-Length`` over the limit is refused before any byte is read.
A body without one (chunked) is counted as it arrives; the first byte over the
limit raises :class:`BodyTooLargeError` inside the form parser, which the route
answers with 413. A body must also arrive whole within ``read_timeout_s`` of its
headers: a client that sends a byte now and then (slow loris) would otherwise hold
its connection and parser forever. The next read after the deadline raises
:class:`BodyTimeoutError`, which the route answers with 408 and a closed connection.
The headers before it are timed by :mod:`.headers` (uvicorn's protocol).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from onespeech.speech.server.errors import ApiError, BodyTimeoutError, BodyTooLargeError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def too_large(limit: int) -> ApiError:
    return ApiError(413, f"the request body is over this server's limit of {limit} bytes; send a smaller file "
                    "(or start the server with a larger --max-upload-mb)", "file_too_large", param="file",
                    headers={"Connection": "close"})


def too_slow(read_timeout_s: float) -> ApiError:
    return ApiError(408, f"the request body did not arrive within this server's limit of {read_timeout_s:g} s; "
                    "send it faster (or start the server with a larger --read-timeout)", "request_timeout",
                    headers={"Connection": "close"})


class BodyLimit:
    """Wrap ``app`` so HTTP request bodies over ``limit`` bytes, or slower than ``read_timeout_s``, are refused."""

    def __init__(self, app: App, limit: int, read_timeout_s: float) -> None:
        self.app = app
        self.limit = limit
        self.read_timeout_s = read_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await send_error(send, too_large(self.limit))
            return
        received = 0
        deadline = asyncio.get_running_loop().time() + self.read_timeout_s
        body_done = False

        async def counting_receive() -> Message:
            nonlocal received, body_done
            if body_done:  # after the body only a disconnect can come: no deadline
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - asyncio.get_running_loop().time()))
            except asyncio.TimeoutError:
                raise BodyTimeoutError() from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLargeError()
                body_done = not message.get("more_body", False)
            else:
                body_done = True
            return message

        await self.app(scope, counting_receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def send_error(send: Send, error: ApiError, kind: str = "http.response") -> None:
    """Answer ``error`` as JSON straight from middleware (``kind``: ``websocket.http.response`` for a handshake)."""
    body = json.dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               *((name.lower().encode(), value.encode()) for name, value in error.headers.items())]
    await send({"type": f"{kind}.start", "status": error.status, "headers": headers})
    await send({"type": f"{kind}.body", "body": body})
