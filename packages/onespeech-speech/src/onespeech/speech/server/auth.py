"""The optional API key as ASGI middleware: ``Authorization: Bearer <key>``, as OpenAI clients send it.

Every HTTP request and WebSocket handshake needs the key except ``GET /health``
(a load balancer's probe carries none) and the web page's own files (the page asks the
person for the key). A browser's WebSocket cannot send headers, so a handshake may carry
the key as the ``api_key`` query parameter instead. The key is compared in constant time
(both sides are hashed first, so not even its length leaks). A missing or wrong
key is answered 401 in the OpenAI error shape before any body is read; a WebSocket
handshake gets the same answer as its HTTP response where the server supports
that (uvicorn does), else a close with 1008.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import parse_qs

from onespeech.speech.server.errors import ApiError
from onespeech.speech.server.limits import App, Receive, Scope, Send, send_error

OPEN_PATHS = frozenset({"/health", "/", "/static/app.js", "/static/style.css"})


def _digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


class ApiKey:
    """Wrap ``app`` so requests without ``Authorization: Bearer <key>`` are refused with 401."""

    def __init__(self, app: App, key: str) -> None:
        self.app = app
        self._digest = _digest(key.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        error = self._check(scope)
        if error is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            await send_error(send, error)
        elif "websocket.http.response" in scope.get("extensions", {}):
            await send_error(send, error, "websocket.http.response")
        else:
            await send({"type": "websocket.close", "code": 1008, "reason": error.message[:120]})

    def _check(self, scope: Scope) -> ApiError | None:
        header = next((value for name, value in scope.get("headers", []) if name == b"authorization"), None)
        if header is None and scope["type"] == "websocket":
            keys = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("api_key")
            header = b"Bearer " + keys[-1].encode("latin-1") if keys else None
        if header is None:
            return _unauthorized("this server needs an API key: send the header 'Authorization: Bearer <key>'",
                                 "missing_api_key")
        scheme, _, key = header.strip().partition(b" ")
        if scheme.lower() != b"bearer" or not hmac.compare_digest(_digest(key.strip()), self._digest):
            return _unauthorized("the API key is not this server's key; send 'Authorization: Bearer <key>' with "
                                 "the key the server was started with", "invalid_api_key")
        return None


def _unauthorized(message: str, code: str) -> ApiError:
    # the body is left unread: the connection cannot carry another request
    return ApiError(401, message, code, headers={"WWW-Authenticate": "Bearer", "Connection": "close"})
