"""``WS /v1/audio/stream``: a LiveSession over a WebSocket.

Query parameters: ``sample_rate`` (default 16000; 1000 to 768000 Hz, the rate rule of
every input path, checked before any frame is read; other rates than 16000 are resampled),
``encoding`` (``pcm_s16le``, the default, or ``pcm_f32le``), ``language`` (forces it).

Client -> server: binary frames of mono PCM in that encoding (any size; a frame may
split a sample), then the text frame ``{"type": "finish"}`` to flush the last chunk.
Server -> client, as JSON text frames, in order:
``{"type": "final", "start", "end", "text", "language", "words", "finish", "timing_method",
"untimed_reason", "speaker"}``
for each final (the same finals a ``LiveSession`` with the server's aligner returns, as
the Document JSON writes a segment: each word ``{"text", "start", "end", "confidence",
"timing_method", "speaker"}``, times in seconds from the first sample, None when the
server has no aligner or no stage times the language), then ``{"type": "done",
"duration"}`` after a finish, and the server closes the socket. Errors are ``{"type": "error", "error": {...}}``
(the HTTP error shape) followed by a close: 1008 for bad input, 1013 when the queue
is full (try again later), 1011 for anything else. A client that sends nothing for the
server's idle timeout gets the error ``idle_timeout`` and a 1008 close. Each closed chunk is a job in the
same bounded queue as file requests, one at a time per session; if the client goes
away, its queued or running chunk is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import numpy as np
from starlette.websockets import WebSocket, WebSocketDisconnect

from onespeech.features import ClosedChunk, LiveChunker, StreamResampler
from onespeech.features.errors import SampleRateError
from onespeech.features.pcm import SAMPLE_RATE, check_sample_rate
from onespeech.kernels.jsonfile import loads_json
from onespeech.speech.document import segment_dict
from onespeech.speech.server.backend import Backend
from onespeech.speech.server.errors import ApiError, bad_request, from_exception
from onespeech.speech.server.pool import Job, QueueFullError, WorkerPool

ENCODINGS: dict[str, np.dtype] = {"pcm_s16le": np.dtype("<i2"), "pcm_f32le": np.dtype("<f4")}
_CLOSE_BAD_INPUT, _CLOSE_TRY_LATER, _CLOSE_INTERNAL = 1008, 1013, 1011


_MAX_WAITING_CHUNKS = 2  # closed chunks a session holds before it stops reading the socket


class _Stopped(Exception):
    """The recognizing side ended with an error it has already sent to the client."""


async def stream_endpoint(websocket: WebSocket, backend: Backend, pool: WorkerPool[Any]) -> None:
    """One live session: read frames, chunk them, recognize chunks one at a time, send finals in order.

    A session has at most one job in the pool's queue (its chunks are recognized in
    order, one after the other), so one fast client cannot fill the queue. When it
    holds ``_MAX_WAITING_CHUNKS`` closed chunks it stops reading the socket, and TCP
    flow control slows the client down: memory stays bounded however fast audio comes.
    """
    await websocket.accept()
    recognizer: _Recognizer | None = None
    try:
        sample_rate, dtype, language = _parameters(websocket, backend)
        # the server's VAD settings, as a LiveSession with the server's options chunks
        chunker = LiveChunker(backend.shared_vad(), backend.config.options.vad_options)
        resampler = StreamResampler()
        recognizer = _Recognizer(websocket, backend, pool, language)
        leftover = b""
        while True:
            message = await _receive(websocket, backend.config.idle_timeout_s)
            if message["type"] == "websocket.disconnect":
                return
            if message.get("bytes") is not None:
                data = leftover + message["bytes"]
                usable = len(data) - len(data) % dtype.itemsize
                leftover = data[usable:]
                block = np.frombuffer(data[:usable], dtype=dtype)
                for chunk in await asyncio.to_thread(_feed, chunker, resampler, block, sample_rate):
                    await recognizer.put(chunk)
                continue
            _check_finish(message.get("text"))
            if leftover:
                raise bad_request(f"the stream ended inside a sample ({len(leftover)} stray bytes)", "invalid_audio")
            for chunk in await asyncio.to_thread(_finish, chunker, resampler):
                await recognizer.put(chunk)
            await recognizer.finish()
            await websocket.send_json({"type": "done", "duration": chunker.n_samples / SAMPLE_RATE})
            await websocket.close(1000)
            return
    except (WebSocketDisconnect, _Stopped):
        return
    except Exception as error:
        await _send_error(websocket, from_exception(error))
    finally:
        if recognizer is not None:
            await recognizer.stop()


class _Recognizer:
    """The session's recognizing side: a task that takes closed chunks in order."""

    def __init__(self, websocket: WebSocket, backend: Backend, pool: WorkerPool[Any], language: str | None):
        self._websocket = websocket
        self._backend = backend
        self._pool = pool
        self._language = language
        self._chunks: asyncio.Queue[ClosedChunk | None] = asyncio.Queue(_MAX_WAITING_CHUNKS)
        self._job: Job | None = None
        self._task = asyncio.create_task(self._run())

    async def put(self, chunk: ClosedChunk | None) -> None:
        """Hand over a chunk; waits while the session already holds the maximum."""
        put = asyncio.ensure_future(self._chunks.put(chunk))
        await asyncio.wait({put, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not put.done():
            put.cancel()
            raise _Stopped()

    async def finish(self) -> None:
        """Wait until every chunk handed over has its final sent."""
        await self.put(None)
        await asyncio.wait({self._task})
        if self._task.result() is not None:
            raise _Stopped()

    async def stop(self) -> None:
        if self._job is not None:
            self._job.abandon()  # a chunk waiting or running for a client that is gone
        if not self._task.done():
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task

    async def _run(self) -> ApiError | None:
        while True:
            chunk = await self._chunks.get()
            if chunk is None:
                return None
            try:
                segment = await self._recognize(chunk)
            except Exception as error:
                api = from_exception(error)
                await _send_error(self._websocket, api)
                return api
            if segment.text:
                await self._websocket.send_json({"type": "final", **segment_dict(segment)})

    async def _recognize(self, chunk: ClosedChunk) -> Any:
        backend, language = self._backend, self._language

        def run(models: Any, cancel: Any) -> Any:
            return backend.recognize_chunk(models, chunk, language=language, cancel=cancel)

        try:
            self._job = self._pool.submit(run)
        except QueueFullError as full:
            raise ApiError(503, str(full), "queue_full", type="server_error") from None
        try:
            return await self._job.future
        finally:
            self._job = None


async def _send_error(websocket: WebSocket, error: ApiError) -> None:
    code = _CLOSE_TRY_LATER if error.status == 503 else _CLOSE_BAD_INPUT if error.status < 500 else _CLOSE_INTERNAL
    with contextlib.suppress(Exception):  # the client may be gone already
        await websocket.send_json({"type": "error", **error.body()})
        await websocket.close(code)


def _parameters(websocket: WebSocket, backend: Backend) -> tuple[int, np.dtype, str | None]:
    query = websocket.query_params
    sample_rate = parse_sample_rate(query.get("sample_rate"))
    encoding = query.get("encoding", "pcm_s16le")
    if encoding not in ENCODINGS:
        raise bad_request(f"encoding={encoding!r}; use one of {list(ENCODINGS)}", "invalid_encoding", "encoding")
    language = query.get("language") or None
    if language is not None:
        backend.check_language(language)
    return sample_rate, ENCODINGS[encoding], language


def parse_sample_rate(text: str | None) -> int:
    """The ``sample_rate`` query parameter: ASCII digits, within the rate rule of every input path.

    Checked when the socket opens, before any frame is read or any resampler starts
    (``onespeech.features.pcm.check_sample_rate``: 1000 to 768000 Hz).
    """
    if text is None:
        return SAMPLE_RATE
    number = text.lstrip("0") or "0"
    # anything but ASCII digits ("1e3", " 16000", "16_000", other scripts' digits) is left a string,
    # which the rule refuses as not a whole number; a number is bounded in length before int() reads it
    rate: int | str = int(number) if text.isascii() and text.isdigit() and len(number) <= 100 else text[:40]
    try:
        return check_sample_rate(rate, "sample_rate", subject="the query asks for")
    except SampleRateError as error:
        raise bad_request(str(error), "invalid_sample_rate", "sample_rate") from None


async def _receive(websocket: WebSocket, idle_timeout_s: float) -> Any:
    """The client's next message; a client silent for ``idle_timeout_s`` is refused (it held a session)."""
    try:
        return await asyncio.wait_for(websocket.receive(), idle_timeout_s)
    except asyncio.TimeoutError:
        raise ApiError(408, f"no frame arrived for {idle_timeout_s:g} s, this server's idle limit; send audio "
                       'continuously and {"type": "finish"} at the end (or start the server with a larger '
                       "--idle-timeout)", "idle_timeout") from None


def _check_finish(text: str | None) -> None:
    try:
        message = loads_json(text or "")
    except json.JSONDecodeError:
        message = None
    if not isinstance(message, dict) or message.get("type") != "finish":
        raise bad_request(f"unexpected text frame {text!r:.80}; send audio as binary frames and "
                          '{"type": "finish"} to end the stream', "invalid_message")


def _feed(chunker: LiveChunker, resampler: StreamResampler, block: np.ndarray, sample_rate: int) -> list[ClosedChunk]:
    return chunker.feed(resampler.convert(block.astype(block.dtype.newbyteorder("="), copy=False), sample_rate))


def _finish(chunker: LiveChunker, resampler: StreamResampler) -> list[ClosedChunk]:
    return chunker.feed(resampler.flush()) + chunker.finish()
