"""``WS /v1/audio/stream``: a LiveSession over a WebSocket.

Query parameters: ``sample_rate`` (default 16000; other rates are resampled),
``encoding`` (``pcm_s16le``, the default, or ``pcm_f32le``), ``language`` (forces it).

Client -> server: binary frames of mono PCM in that encoding (any size; a frame may
split a sample), then the text frame ``{"type": "finish"}`` to flush the last chunk.
Server -> client, as JSON text frames, in order:
``{"type": "final", "start", "end", "text", "language"}`` for each final (the same
finals a ``LiveSession`` returns), then ``{"type": "done", "duration"}`` after a finish,
and the server closes the socket. Errors are ``{"type": "error", "error": {...}}``
(the HTTP error shape) followed by a close: 1008 for bad input, 1013 when the queue
is full (try again later), 1011 for anything else. Each closed chunk waits in the
same bounded queue as file requests; if the client goes away, its queued and running
chunks are cancelled.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
from typing import Any

import numpy as np
from starlette.websockets import WebSocket, WebSocketDisconnect

from onespeech.features.pcm import SAMPLE_RATE
from onespeech.speech.live_chunks import ClosedChunk, LiveChunker
from onespeech.speech.server.backend import Backend
from onespeech.speech.server.errors import ApiError, bad_request, from_exception
from onespeech.speech.server.pool import Job, QueueFullError, WorkerPool
from onespeech.speech.streaming import StreamResampler

ENCODINGS = {"pcm_s16le": np.dtype("<i2"), "pcm_f32le": np.dtype("<f4")}
_CLOSE_BAD_INPUT, _CLOSE_TRY_LATER, _CLOSE_INTERNAL = 1008, 1013, 1011


class _Finish(Exception):
    pass


async def stream_endpoint(websocket: WebSocket, backend: Backend, pool: WorkerPool[Any]) -> None:
    await websocket.accept()
    pending: collections.deque[Job] = collections.deque()
    sender: asyncio.Task[None] | None = None
    try:
        sample_rate, dtype, language = _parameters(websocket, backend)
        chunker = LiveChunker(backend.vad)
        resampler = StreamResampler()
        leftover = b""
        ready = asyncio.Event()  # set when a job is appended or the stream ends
        sender = asyncio.create_task(_send_finals(websocket, pending, ready))

        def submit(chunks: list[ClosedChunk]) -> None:
            for chunk in chunks:
                def run(models: Any, cancel: Any, chunk: ClosedChunk = chunk) -> Any:
                    return backend.recognize_chunk(models, chunk, language=language, cancel=cancel)

                try:
                    pending.append(pool.submit(run))
                except QueueFullError as full:
                    raise ApiError(503, str(full), "queue_full", type="server_error") from None
                ready.set()

        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(message.get("code", 1000))
            if message.get("bytes") is not None:
                data = leftover + message["bytes"]
                usable = len(data) - len(data) % dtype.itemsize
                leftover = data[usable:]
                block = np.frombuffer(data[:usable], dtype=dtype)
                submit(await asyncio.to_thread(_feed, chunker, resampler, block, sample_rate))
                continue
            _check_finish(message.get("text"))
            if leftover:
                raise bad_request(f"the stream ended inside a sample ({len(leftover)} stray bytes)", "invalid_audio")
            submit(await asyncio.to_thread(_finish, chunker, resampler))
            pending.append(None)  # type: ignore[arg-type]  # end marker for the sender
            ready.set()
            await sender
            await websocket.send_json({"type": "done", "duration": chunker.n_samples / SAMPLE_RATE})
            await websocket.close(1000)
            return
    except WebSocketDisconnect:
        return
    except Exception as error:
        api = from_exception(error)
        code = _CLOSE_TRY_LATER if api.status == 503 else _CLOSE_BAD_INPUT if api.status < 500 else _CLOSE_INTERNAL
        with contextlib.suppress(Exception):
            await websocket.send_json({"type": "error", **api.body()})
            await websocket.close(code)
    finally:
        for job in pending:
            if job is not None:
                job.abandon()
        if sender is not None and not sender.done():
            sender.cancel()
            with contextlib.suppress(BaseException):
                await sender


async def _send_finals(websocket: WebSocket, pending: collections.deque[Job], ready: asyncio.Event) -> None:
    """Send each chunk's final in chunk order; stop at the end marker."""
    while True:
        while not pending:
            ready.clear()
            await ready.wait()
        job = pending[0]
        if job is None:
            pending.popleft()
            return
        try:
            segment = await job.future
        finally:
            pending.popleft()
        if segment.text:
            await websocket.send_json({"type": "final", "start": segment.start, "end": segment.end,
                                       "text": segment.text, "language": segment.language})


def _parameters(websocket: WebSocket, backend: Backend) -> tuple[int, np.dtype, str | None]:
    query = websocket.query_params
    try:
        sample_rate = int(query.get("sample_rate", SAMPLE_RATE))
    except ValueError:
        sample_rate = 0
    if sample_rate < 1:
        raise bad_request(f"sample_rate={query.get('sample_rate')!r}; give a positive whole number of Hz",
                          "invalid_sample_rate", "sample_rate")
    encoding = query.get("encoding", "pcm_s16le")
    if encoding not in ENCODINGS:
        raise bad_request(f"encoding={encoding!r}; use one of {list(ENCODINGS)}", "invalid_encoding", "encoding")
    language = query.get("language") or None
    if language is not None:
        backend.check_language(language)
    return sample_rate, ENCODINGS[encoding], language


def _check_finish(text: str | None) -> None:
    try:
        message = json.loads(text or "")
    except json.JSONDecodeError:
        message = None
    if not isinstance(message, dict) or message.get("type") != "finish":
        raise bad_request(f"unexpected text frame {text!r:.80}; send audio as binary frames and "
                          '{"type": "finish"} to end the stream', "invalid_message")


def _feed(chunker: LiveChunker, resampler: StreamResampler, block: np.ndarray, sample_rate: int) -> list[ClosedChunk]:
    return chunker.feed(resampler.convert(block.astype(block.dtype.newbyteorder("="), copy=False), sample_rate))


def _finish(chunker: LiveChunker, resampler: StreamResampler) -> list[ClosedChunk]:
    return chunker.feed(resampler.flush()) + chunker.finish()
