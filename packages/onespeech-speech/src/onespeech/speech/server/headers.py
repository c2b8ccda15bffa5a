"""A deadline for request headers: uvicorn's HTTP/1.1 protocol (h11) with a header timer.

(It also answers bytes that are not HTTP/1.1 with a JSON 400, ``invalid_http``, where
uvicorn writes plain text: every error of the server has one shape.)

uvicorn waits for a request line and headers without limit, so a client that opens a
connection and sends a header line now and then (slow loris) holds it forever; the
ASGI app never sees such a request, so :class:`.limits.BodyLimit` cannot time it.
This protocol arms a timer when a connection opens and again when it waits for the
next request, and cancels it once the request's headers are complete; if it fires
first, the client gets 408 (JSON, as every error) and the connection is closed. The
body is then timed by ``BodyLimit``, with the same ``--read-timeout``.

``onespeech serve`` passes it to uvicorn as ``http=header_timeout_protocol(...)``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from onespeech.speech.server.errors import ApiError


def header_timeout_protocol(timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol whose request headers must arrive within ``timeout_s`` seconds."""
    error = ApiError(408, f"the request headers did not arrive within this server's limit of {timeout_s:g} s "
                     "(--read-timeout)", "request_timeout")
    body = json.dumps(error.body()).encode()
    answer = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
              b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

    class HeaderTimeout(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._watch_headers()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._watch_headers()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._watch_headers()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_timer()
            super().connection_lost(exc)

        def _watch_headers(self) -> None:
            # IDLE: h11 has not seen a whole request line and headers of the next request yet
            waiting = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
            if not waiting:
                self._stop_timer()
            elif self._header_timer is None:  # a deadline, not an idle timer: more bytes do not extend it
                self._header_timer = self.loop.call_later(timeout_s, self._expired)

        def send_400_response(self, msg: str) -> None:
            # uvicorn answers bytes that are not HTTP/1.1 in plain text: here in the shape of every error
            invalid = ApiError(400, f"the request is not valid HTTP/1.1 ({msg})", "invalid_http")
            data = json.dumps(invalid.body()).encode()
            headers = [(b"content-type", b"application/json"), (b"connection", b"close"),
                       (b"content-length", str(len(data)).encode())]
            for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=data),
                          h11.EndOfMessage()):
                self.transport.write(self.conn.send(event) or b"")
            self.transport.close()

        def _stop_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _expired(self) -> None:
            self._header_timer = None
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            self.transport.write(answer)
            self.transport.close()

    return HeaderTimeout
