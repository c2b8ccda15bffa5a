"""The ASGI application: OpenAI-compatible transcription, live streaming over WebSocket, health.

Routes
------
POST /v1/audio/transcriptions  multipart ``file``, ``model``, ``language``, ``prompt`` (the
                               context), ``response_format`` (json, text, srt, vtt,
                               verbose_json), ``timestamp_granularities[]`` (word, segment),
                               ``temperature`` (0 only: decoding is greedy), ``speakers``
                               (auto, off or a number, as ``transcribe``'s option)
GET  /v1/models                the served model's id (never a local path), in OpenAI's list shape
GET  /health                   workers alive, queue length, completed and failed jobs (open
                               without the API key)
WS   /v1/audio/stream          binary PCM frames in, JSON finals out (see ``websocket.py``)

Requests wait in a bounded queue for a worker (:mod:`.pool`); a full queue answers 503
with Retry-After. While a request waits or runs, the server watches the connection:
if the client goes away the job's cancel event is set, recognition stops within one
encoder layer or decoder step, and the request ends with 499. Every error answer, 404
and 405 included, is JSON in OpenAI's shape (:mod:`.errors`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute

from onespeech.speech.server.auth import ApiKey
from onespeech.speech.server.backend import Backend
from onespeech.speech.server.errors import (
    CLIENT_CLOSED,
    ApiError,
    BodyTimeoutError,
    audio_too_long,
    bad_request,
    from_exception,
)
from onespeech.speech.server.limits import BodyLimit, BodyTooLargeError, too_large, too_slow
from onespeech.speech.server.page import page_routes
from onespeech.speech.server.pool import Job, QueueFullError, WorkerPool
from onespeech.speech.server.responses import GRANULARITIES, RESPONSE_FORMATS, verbose_json

_DISCONNECT_POLL_S = 0.05
_MAX_FORM_FIELD_BYTES = 1 << 20  # prompt and the small fields; the file part is bounded by the body limit
MAX_FORM_SPEAKERS = 100  # the 'speakers' form field's largest count
_STATUS_CODES = {404: "not_found", 405: "method_not_allowed"}
_UNKNOWN_FRAMES = 2**63 - 1  # libsndfile's frame count when the header declares none (SF_COUNT_MAX)


def create_app(backend: Backend) -> Starlette:
    """The server application over ``backend``.

    The models load with the app's lifespan, or before it with ``app.state.load()``
    (``onespeech serve`` does, so a model that cannot load is one line, not a server
    that fails to start).
    """
    config = backend.config
    pool: WorkerPool[Any] = WorkerPool(backend.load_worker, config.workers, config.max_queue, close=backend.close_worker)

    def load() -> None:
        if not pool.started:
            backend.load_shared()
            pool.start()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await asyncio.to_thread(load)
        try:
            yield
        finally:
            await asyncio.to_thread(pool.stop)

    async def transcriptions(request: Request) -> Response:
        try:
            return await _transcribe(request, backend, pool)
        except ApiError as error:
            return error_response(error)

    async def models(request: Request) -> Response:
        # ids only: a model given as a directory is named by the directory's name, never its path
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "onespeech"} for name in config.model_ids]
        return JSONResponse({"object": "list", "data": data})

    async def health(request: Request) -> Response:
        alive = pool.alive_workers
        body = {"status": "ok" if alive == config.workers else "degraded", "workers": config.workers,
                "workers_alive": alive, "busy": pool.busy, "queued": pool.queued, "max_queue": config.max_queue,
                "completed": pool.completed, "failed": pool.failed, "cancelled": pool.cancelled,
                "abandoned": pool.abandoned, **backend.decode_stats(),
                "model": config.model_id}
        return JSONResponse(body, status_code=200 if alive == config.workers else 503)

    from onespeech.speech.server.websocket import stream_endpoint

    async def stream(websocket: Any) -> None:
        await stream_endpoint(websocket, backend, pool)

    routes = [
        Route("/v1/audio/transcriptions", transcriptions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        WebSocketRoute("/v1/audio/stream", stream),
        *page_routes(),
    ]
    handlers = {HTTPException: _http_error, ApiError: _api_error, Exception: _internal_error}
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)  # type: ignore[arg-type]
    app.state.pool = pool
    app.state.load = load
    app.add_middleware(BodyLimit, limit=config.max_upload_bytes, read_timeout_s=config.read_timeout_s)
    if config.api_key is not None:  # outermost: a request without the key is refused before its body is read
        app.add_middleware(ApiKey, key=config.api_key)
    return app


async def _http_error(request: Request, error: HTTPException) -> Response:
    """Starlette's own errors (no such path, a method the path does not take) in the OpenAI shape."""
    if error.status_code == 404:
        message = (f"no endpoint at {request.url.path!r}; this server has POST /v1/audio/transcriptions, "
                   "POST /v1/documents/render, GET /v1/models, GET /health, WS /v1/audio/stream and its page at /")
    elif error.status_code == 405:
        allowed = (error.headers or {}).get("Allow", "")
        message = f"{request.method} is not allowed on {request.url.path!r}; use {allowed}"
    else:
        message = str(error.detail)
    code = _STATUS_CODES.get(error.status_code, "http_error")
    return error_response(ApiError(error.status_code, message, code, headers=dict(error.headers or {})))


async def _internal_error(request: Request, error: Exception) -> Response:
    return error_response(from_exception(error))


def error_response(error: ApiError) -> Response:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


async def _api_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, ApiError)
    return error_response(error)


async def _transcribe(request: Request, backend: Backend, pool: WorkerPool[Any]) -> Response:
    try:
        form = await request.form(max_files=1, max_fields=16, max_part_size=_MAX_FORM_FIELD_BYTES)
    except BodyTooLargeError:
        raise too_large(backend.config.max_upload_bytes) from None
    except BodyTimeoutError:
        raise too_slow(backend.config.read_timeout_s) from None
    except MultiPartException as error:
        raise bad_request(f"the request is not a valid multipart form: {error.message}", "invalid_form") from None
    except ClientDisconnect:
        raise _client_gone() from None
    try:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise bad_request("no audio: send the file as the multipart field 'file'", "missing_file", "file")
        options = _options(form, backend)
        # a file libsndfile cannot open, or too long, is refused here, without taking a place in the queue
        await asyncio.to_thread(_check_readable, upload, backend.config.max_audio_s)
        try:
            job = pool.submit(lambda models, cancel: backend.transcribe(
                models, upload.file, language=options["language"], context=options["context"],
                words=options["words"], speakers=options["speakers"], cancel=cancel))
        except QueueFullError as full:
            raise ApiError(503, str(full), "queue_full", type="server_error",
                           headers={"Retry-After": str(full.retry_after)}) from None
        document = await _wait(request, job)
        return _render(document, options["response_format"], options["granularities"])
    finally:
        await form.close()


def _options(form: Any, backend: Backend) -> dict[str, Any]:
    config = backend.config
    model = _text(form, "model")
    if model is None:
        raise bad_request(f"'model' is required; this server serves {list(config.model_ids)}", "missing_model", "model")
    if model not in config.model_ids:
        raise ApiError(404, f"model {model!r} is not served here; use one of {list(config.model_ids)}",
                       "model_not_found", param="model")
    response_format = _text(form, "response_format") or "json"
    if response_format not in RESPONSE_FORMATS:
        raise bad_request(f"response_format={response_format!r}; use one of {list(RESPONSE_FORMATS)}",
                          "invalid_response_format", "response_format")
    granularities = tuple(str(g) for g in form.getlist("timestamp_granularities[]"))
    for granularity in granularities:
        if granularity not in GRANULARITIES:
            raise bad_request(f"timestamp_granularities[] has {granularity!r}; use 'word' and/or 'segment'",
                              "invalid_timestamp_granularities", "timestamp_granularities[]")
    if granularities and response_format != "verbose_json":
        raise bad_request("timestamp_granularities[] needs response_format=verbose_json",
                          "invalid_timestamp_granularities", "timestamp_granularities[]")
    if "word" in granularities and config.options.aligner is None:
        raise bad_request("word timestamps need the forced aligner, and this server runs with --aligner none",
                          "word_timestamps_unavailable", "timestamp_granularities[]")
    temperature = _text(form, "temperature")
    if temperature is not None:
        try:
            value = float(temperature)
        except ValueError:
            value = -1.0
        if value != 0.0:
            raise bad_request(f"temperature={temperature!r}; decoding is greedy, so only 0 is accepted",
                              "invalid_temperature", "temperature")
    language = _text(form, "language") or None
    if language is not None:
        backend.check_language(language)
    return {"language": language, "context": _text(form, "prompt") or None,
            "words": "word" in granularities or response_format in ("srt", "vtt", "document"),
            "speakers": _speakers(form, config.options.speakers),
            "response_format": response_format, "granularities": granularities}


def _speakers(form: Any, default: str | int | bool) -> str | int | bool:
    """The ``speakers`` field: "auto", "off" or a count, as ``transcribe``'s ``speakers`` (auto, False, N)."""
    text = _text(form, "speakers")
    if text is None or not text.strip():
        return default
    value = text.strip().lower()
    if value == "auto":
        return "auto"
    if value == "off":
        return False
    if value.isascii() and value.isdigit() and len(value) <= 3 and 1 <= int(value) <= MAX_FORM_SPEAKERS:
        return int(value)
    raise bad_request(f"speakers={text!r:.40}; use 'auto' (the count is found), 'off' (no speakers) or a number "
                      f"of speakers from 1 to {MAX_FORM_SPEAKERS}", "invalid_speakers", "speakers")


def _text(form: Any, name: str) -> str | None:
    value = form.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise bad_request(f"'{name}' must be a text field, not a file", "invalid_field", name)
    return value


async def _wait(request: Request, job: Job) -> Any:
    """The job's result; if the client disconnects first, cancel the job and answer 499."""
    while True:
        try:
            done, _ = await asyncio.wait({job.future}, timeout=_DISCONNECT_POLL_S)
        except asyncio.CancelledError:  # the server cancelled the request (shutdown): stop its recognition too
            job.abandon()
            raise
        if done:
            try:
                return job.future.result()
            except Exception as error:
                raise from_exception(error) from error
        if await request.is_disconnected():
            if job.abandon():  # running: it stops within a decode step; wait so its upload stays open
                with contextlib.suppress(Exception):
                    await job.future
            raise _client_gone()


def _client_gone() -> ApiError:
    return ApiError(CLIENT_CLOSED, "the client closed the connection; recognition was stopped", "cancelled",
                    type="cancelled")


def _check_readable(upload: UploadFile, max_audio_s: float) -> None:
    """Refuse an upload that is not audio, or whose header declares more than ``max_audio_s``."""
    from onespeech.features import AudioError, AudioFileSource

    try:
        with AudioFileSource(upload.file) as audio:  # reads the header only
            known = audio.input_frames < _UNKNOWN_FRAMES
            duration = audio.duration_s
    except AudioError as error:
        raise from_exception(error) from None
    finally:
        upload.file.seek(0)
    # a length the header does not declare (a streamed FLAC) is held to the limit while it decodes
    if known and duration > max_audio_s:
        raise audio_too_long(duration, max_audio_s)


def _render(document: Any, response_format: str, granularities: tuple[str, ...]) -> Response:
    if response_format == "json":
        return JSONResponse({"text": document.text})
    if response_format == "text":
        return PlainTextResponse(document.text)
    if response_format == "verbose_json":
        return JSONResponse(verbose_json(document, granularities))
    from onespeech.speech.server.responses import written

    if response_format == "document":
        return Response(written(document, "json"), media_type="application/json")
    return PlainTextResponse(written(document, response_format))
