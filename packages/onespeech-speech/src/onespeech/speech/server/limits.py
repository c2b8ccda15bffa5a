"""Request body size limit as ASGI middleware (413 before or while the body is read).

A declared ``Content-Length`` over the limit is refused before any byte is read.
A body without one (chunked) is counted as it arrives; the first byte over the
limit raises :class:`BodyTooLargeError` inside the form parser, which the route
answers with 413.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from onespeech.speech.server.errors import ApiError, BodyTooLargeError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def too_large(limit: int) -> ApiError:
    return ApiError(413, f"the request body is over this server's limit of {limit} bytes; send a smaller file "
                    "(or start the server with a larger --max-upload-mb)", "file_too_large", param="file")


class BodyLimit:
    """Wrap ``app`` so HTTP request bodies over ``limit`` bytes are refused."""

    def __init__(self, app: App, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await _send_error(send, too_large(self.limit))
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLargeError()
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


async def _send_error(send: Send, error: ApiError) -> None:
    body = json.dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
