"""The transcription server through the official openai client, a WebSocket and raw HTTP (127.0.0.1 only)."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile

# the [server] extra and the official client (tox's py env installs both); without them
# these tests skip rather than break a checkout installed without the extra
pytest.importorskip("starlette", reason="needs onespeech-speech[server]")
uvicorn = pytest.importorskip("uvicorn", reason="needs onespeech-speech[server]")
openai = pytest.importorskip("openai", reason="needs the openai client (a test dependency in tox.ini)")
httpx = pytest.importorskip("httpx", reason="needs the openai client (a test dependency in tox.ini)")
pytest.importorskip("websockets", reason="needs onespeech-speech[server]")

from websockets.exceptions import ConnectionClosed  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from onespeech.features import load_audio  # noqa: E402
from onespeech.speech.document import segment_dict  # noqa: E402
from onespeech.speech.server import Backend, ServerConfig, create_app  # noqa: E402
from onespeech.speech.streaming import LiveSession  # noqa: E402
from onespeech.speech.transcribe import transcribe  # noqa: E402
from onespeech.speech.writers import get_writer  # noqa: E402
from onespeech_tools.serving import serving  # noqa: E402

UPLOAD_LIMIT = 4 * 2**20
MAX_AUDIO_S = 300.0
BUDGET = 64  # tokens per chunk: the test clip's whole-file answer ends within it; live regions stop at it


@dataclass
class Served:
    base: str
    port: int
    app: Any
    config: ServerConfig

    def health(self) -> dict[str, Any]:
        return httpx.get(self.base + "/health", timeout=10).json()


@pytest.fixture(scope="module")
def served(runtime_dirs, vad_path: Path) -> Iterator[Served]:  # type: ignore[no-untyped-def]
    config = ServerConfig(model=str(runtime_dirs.asr), aligner=str(runtime_dirs.aligner), vad=vad_path, threads=1,
                          max_new_tokens=BUDGET, workers=1, max_queue=2, max_upload_bytes=UPLOAD_LIMIT,
                          model_alias="whisper-1", max_audio_s=MAX_AUDIO_S)
    app = create_app(Backend(config))
    with serving(app) as port:
        yield Served(f"http://127.0.0.1:{port}", port, app, config)


@pytest.fixture(scope="module")
def client(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.base + "/v1", api_key="not-needed", max_retries=0)


@pytest.fixture(scope="module")
def offline(runtime_dirs, vad_path: Path, clips: dict[str, Path]):  # type: ignore[no-untyped-def]
    """The file path's document of the test clip (with word timings and speakers, as the CLI's default)."""
    # a forced language: the random model names none, and the aligner needs one
    return transcribe(clips["flac"], runtime_dirs.asr, language="en", aligner=runtime_dirs.aligner, vad=vad_path,
                      threads=1, max_new_tokens=BUDGET, progress=False, speakers="auto")


def test_json_and_text_answer_the_file_paths_text(client: openai.OpenAI, offline, clips: dict[str, Path]) -> None:  # type: ignore[no-untyped-def]
    with open(clips["flac"], "rb") as audio:
        result = client.audio.transcriptions.create(model="whisper-1", file=audio, language="en")
    assert result.text == offline.text and offline.text
    with open(clips["flac"], "rb") as audio:
        text = client.audio.transcriptions.create(model="whisper-1", file=audio, response_format="text",
                                                  language="en")
    assert text.strip() == offline.text


def test_verbose_json_has_words_and_segments(client: openai.OpenAI, offline, clips: dict[str, Path]) -> None:  # type: ignore[no-untyped-def]
    with open(clips["flac"], "rb") as audio:
        result = client.audio.transcriptions.create(
            model="whisper-1", file=audio, response_format="verbose_json", language="en",
            timestamp_granularities=["word", "segment"],
        )
    assert result.text == offline.text
    assert result.language == "english"
    assert result.duration == pytest.approx(offline.duration)
    assert [(s.start, s.end, s.text) for s in result.segments] == [
        (s.start, s.end, s.text) for s in offline.segments
    ]
    assert [(w.word, w.start, w.end) for w in result.words] == [(w.text, w.start, w.end) for w in offline.words]
    assert any(w.start is not None for w in result.words)
    # the speakers the CLI's JSON writer writes, on every segment and word
    assert [s.speaker for s in result.segments] == [s.speaker for s in offline.segments]
    assert [w.speaker for w in result.words] == [w.speaker for w in offline.words]
    assert result.speakers == [{"label": s.label, "duration": s.duration} for s in offline.speakers]
    assert offline.speakers and all(w.speaker for w in offline.words)
    with open(clips["flac"], "rb") as audio:
        segments_only = client.audio.transcriptions.create(model="whisper-1", file=audio, language="en",
                                                           response_format="verbose_json")
    assert segments_only.segments and not getattr(segments_only, "words", None)


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_subtitles_are_the_writers_output(client: openai.OpenAI, offline, clips: dict[str, Path], fmt: str) -> None:  # type: ignore[no-untyped-def]
    with open(clips["flac"], "rb") as audio:
        text = client.audio.transcriptions.create(model="whisper-1", file=audio, response_format=fmt,
                                                  language="en")
    want = io.StringIO()
    get_writer(fmt).write(offline, want)
    assert text == want.getvalue()


def test_prompt_is_the_recognizers_context(client: openai.OpenAI, offline, runtime_dirs, vad_path: Path,  # type: ignore[no-untyped-def]
                                           clips: dict[str, Path]) -> None:
    # a context with which the random test model still ends its answer within the budget
    context = "Kennedy"
    expected = transcribe(clips["flac"], runtime_dirs.asr, language="en", aligner=None, vad=vad_path, threads=1,
                          max_new_tokens=BUDGET, progress=False, speakers=False, context=context)
    with open(clips["flac"], "rb") as audio:
        result = client.audio.transcriptions.create(model="whisper-1", file=audio, language="en", prompt=context)
    assert result.text == expected.text and expected.text
    assert expected.text != offline.text  # the context changed the answer: it reached the model


def test_models_and_health(client: openai.OpenAI, served: Served, runtime_dirs) -> None:  # type: ignore[no-untyped-def]
    # the model is a directory: it is served by the directory's name, never its path
    assert [m.id for m in client.models.list()] == [runtime_dirs.asr.name, "whisper-1"]
    health = served.health()
    assert health["status"] == "ok" and health["workers_alive"] == 1 and health["max_queue"] == 2
    assert health["model"] == runtime_dirs.asr.name
    for path in ("/v1/models", "/health"):
        assert str(runtime_dirs.asr.parent) not in httpx.get(served.base + path, timeout=10).text


def test_the_model_may_be_named_by_its_id(client: openai.OpenAI, offline, runtime_dirs,  # type: ignore[no-untyped-def]
                                          clips: dict[str, Path]) -> None:
    with open(clips["flac"], "rb") as audio:
        result = client.audio.transcriptions.create(model=runtime_dirs.asr.name, file=audio, language="en")
    assert result.text == offline.text


def test_speakers_field_off_count_and_bad(client: openai.OpenAI, offline, runtime_dirs, vad_path: Path,  # type: ignore[no-untyped-def]
                                          clips: dict[str, Path]) -> None:
    def verbose(speakers: str) -> Any:
        with open(clips["flac"], "rb") as audio:
            return client.audio.transcriptions.create(model="whisper-1", file=audio, language="en",
                                                      response_format="verbose_json",
                                                      timestamp_granularities=["word", "segment"],
                                                      extra_body={"speakers": speakers})

    off = verbose("off")
    assert off.text == offline.text and off.speakers == []
    assert all(s.speaker is None for s in off.segments) and all(w.speaker is None for w in off.words)
    two = verbose("2")
    want = transcribe(clips["flac"], runtime_dirs.asr, language="en", aligner=runtime_dirs.aligner, vad=vad_path,
                      threads=1, max_new_tokens=BUDGET, progress=False, speakers=2)
    assert [w.speaker for w in two.words] == [w.speaker for w in want.words]
    assert [s["label"] for s in two.speakers] == [s.label for s in want.speakers]
    for bad in ("0", "many", "-1", "101", "2.5"):
        with pytest.raises(openai.BadRequestError) as error:
            verbose(bad)
        assert error.value.code == "invalid_speakers" and "'auto'" in error.value.message


def test_an_upload_that_is_not_audio_says_so(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        client.audio.transcriptions.create(model="whisper-1", file=("x.wav", b"not audio at all" * 50))
    message = error.value.body["message"]  # type: ignore[index]
    assert message.startswith("the uploaded file is not a decodable audio file; send WAV, FLAC, OGG (Vorbis, Opus)")
    assert "None" not in message


def test_a_header_that_declares_no_length_is_held_to_the_limit_while_it_decodes(served: Served) -> None:
    buffer = io.BytesIO()  # silence longer than the limit, at 1 kHz (small and quick to decode)
    soundfile.write(buffer, np.zeros(int((MAX_AUDIO_S + 100) * 1000), dtype=np.int16), 1000, format="FLAC")
    data = bytearray(buffer.getvalue())
    data[8 + 13] &= 0xF0  # STREAMINFO's 36-bit total sample count = 0: "unknown", as a streamed FLAC writes it
    data[8 + 14 : 8 + 18] = b"\0\0\0\0"
    assert soundfile.info(io.BytesIO(bytes(data))).frames >= 2**62
    before = served.health()
    response = httpx.post(served.base + "/v1/audio/transcriptions", data={"model": "whisper-1"},
                          files={"file": ("s.flac", bytes(data))}, timeout=120)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "audio_too_long" and "at least" in error["message"]
    assert served.health()["completed"] == before["completed"]


def test_bad_input_is_400_with_the_reason(client: openai.OpenAI, clips: dict[str, Path]) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        client.audio.transcriptions.create(model="whisper-1", file=("x.wav", b"not audio at all" * 50))
    assert error.value.code == "unreadable_audio"
    with pytest.raises(openai.BadRequestError) as error:
        client.audio.transcriptions.create(model="whisper-1", file=("x.wav", b""))
    assert error.value.code == "unreadable_audio"
    with open(clips["flac"], "rb") as audio, pytest.raises(openai.BadRequestError) as error:
        client.audio.transcriptions.create(model="whisper-1", file=audio, language="tlh")
    assert error.value.code == "unsupported_language"
    with open(clips["flac"], "rb") as audio, pytest.raises(openai.BadRequestError) as error:
        client.audio.transcriptions.create(model="whisper-1", file=audio, prompt="word " * 5000)
    assert error.value.code == "invalid_prompt"
    with open(clips["flac"], "rb") as audio, pytest.raises(openai.BadRequestError) as error:
        client.audio.transcriptions.create(model="whisper-1", file=audio, timestamp_granularities=["word"])
    assert error.value.code == "invalid_timestamp_granularities"
    with open(clips["flac"], "rb") as audio, pytest.raises(openai.NotFoundError) as error:
        client.audio.transcriptions.create(model="gpt-4o-transcribe", file=audio)
    assert error.value.code == "model_not_found"


def test_a_body_over_the_limit_is_413(served: Served) -> None:
    body = b"\0" * (UPLOAD_LIMIT + 1)
    response = httpx.post(served.base + "/v1/audio/transcriptions", data={"model": "whisper-1"},
                          files={"file": ("big.wav", body)}, timeout=30)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "file_too_large"

    def chunked() -> Iterator[bytes]:  # no Content-Length: counted while it arrives
        yield b'--x\r\nContent-Disposition: form-data; name="file"; filename="big.wav"\r\n\r\n'
        for _ in range(UPLOAD_LIMIT // 65536 + 2):
            yield b"\0" * 65536

    response = httpx.post(served.base + "/v1/audio/transcriptions", content=chunked(), timeout=30,
                          headers={"content-type": "multipart/form-data; boundary=x"})
    assert response.status_code == 413


def test_a_full_queue_answers_503_with_retry_after(served: Served, clips: dict[str, Path]) -> None:
    pool = served.app.state.pool
    release = threading.Event()

    async def main() -> httpx.Response:
        blocker = pool.submit(lambda models, cancel: release.wait(60))
        await asyncio.to_thread(blocker.started.wait, 30)
        waiting = [pool.submit(lambda models, cancel: None) for _ in range(2)]  # the queue is full now
        try:
            async with httpx.AsyncClient(base_url=served.base, timeout=30) as http:
                return await http.post("/v1/audio/transcriptions", data={"model": "whisper-1"},
                                       files={"file": ("a.flac", clips["flac"].read_bytes())})
        finally:
            release.set()
            await blocker.future
            for job in waiting:
                await job.future

    response = asyncio.run(main())
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "queue_full"
    assert int(response.headers["retry-after"]) >= 1


def test_a_client_that_goes_away_cancels_its_recognition(served: Served, clips: dict[str, Path]) -> None:
    payload = clips["joined"].read_bytes()  # a minute of speech: several chunks to recognize
    boundary = "b0undary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"j.flac\"\r\n\r\n").encode()
    body += payload + f"\r\n--{boundary}--\r\n".encode()
    head = (f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n").encode()
    before = served.health()
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        sock.sendall(head + body)
        deadline = time.monotonic() + 60
        while served.health()["busy"] == 0:  # wait until a worker runs it
            assert time.monotonic() < deadline
            time.sleep(0.02)
    deadline = time.monotonic() + 60
    while (health := served.health())["busy"]:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert health["cancelled"] == before["cancelled"] + 1  # stopped, not completed
    assert health["completed"] == before["completed"]
    assert health["workers_alive"] == 1


def _stream(served: Served, pcm: np.ndarray, frame_bytes: int, query: str = "") -> list[dict[str, Any]]:
    data = pcm.astype("<i2").tobytes()
    messages = []
    with connect(f"ws://127.0.0.1:{served.port}/v1/audio/stream{query}") as ws:
        for start in range(0, len(data), frame_bytes):
            ws.send(data[start : start + frame_bytes])
        ws.send(json.dumps({"type": "finish"}))
        for message in ws:
            messages.append(json.loads(message))
    return messages


def test_websocket_finals_are_the_live_sessions(served: Served, runtime_dirs, vad_path: Path,  # type: ignore[no-untyped-def]
                                                clips: dict[str, Path]) -> None:
    pcm = np.round(load_audio(clips["flac"])[: 8 * 16000] * 32767).astype(np.int16)  # a few regions
    # a forced language: the random model names none, and a timing stage needs one
    messages = _stream(served, pcm, 3001, "?language=en")  # odd frame sizes split samples between frames
    assert messages[-1]["type"] == "done"
    assert messages[-1]["duration"] == pytest.approx(pcm.shape[0] / 16000)
    finals = [m for m in messages if m["type"] == "final"]
    # the server has an aligner: its finals are a LiveSession's with that aligner, word times included
    with LiveSession(runtime_dirs.asr, language="en", aligner=runtime_dirs.aligner, vad=vad_path, threads=1,
                     max_new_tokens=BUDGET) as session:
        want = session.push(pcm) + session.finish()
    assert len(want) >= 2 and sum(w.start is not None for s in want for w in s.words) >= 2
    assert finals == [{"type": "final", **segment_dict(s)} for s in want]


def test_websocket_bad_parameters_get_an_error_and_a_close(served: Served) -> None:
    with connect(f"ws://127.0.0.1:{served.port}/v1/audio/stream?encoding=mp3") as ws:
        message = json.loads(ws.recv())
        assert message["type"] == "error" and message["error"]["code"] == "invalid_encoding"
        with pytest.raises(ConnectionClosed):
            ws.recv()
        assert ws.close_code == 1008


def test_websocket_chunks_meet_a_full_queue_with_an_error_and_a_close(served: Served,
                                                                      clips: dict[str, Path]) -> None:
    pool = served.app.state.pool
    release = threading.Event()
    data = np.round(load_audio(clips["flac"])[: 4 * 16000] * 32767).astype("<i2").tobytes()

    def stream() -> tuple[list[dict[str, Any]], int | None]:
        messages = []
        with connect(f"ws://127.0.0.1:{served.port}/v1/audio/stream?language=en") as ws:
            ws.send(data)
            ws.send(json.dumps({"type": "finish"}))  # the last chunk closes now: a job for the full queue
            with pytest.raises(ConnectionClosed):
                while True:
                    messages.append(json.loads(ws.recv()))
            return messages, ws.close_code

    async def main() -> tuple[list[dict[str, Any]], int | None]:
        blocker = pool.submit(lambda models, cancel: release.wait(60))
        await asyncio.to_thread(blocker.started.wait, 30)
        waiting = [pool.submit(lambda models, cancel: None) for _ in range(2)]  # the queue is full now
        try:
            return await asyncio.to_thread(stream)
        finally:
            release.set()
            await blocker.future
            for job in waiting:
                await job.future

    messages, code = asyncio.run(main())
    assert messages and messages[-1]["type"] == "error" and messages[-1]["error"]["code"] == "queue_full"
    assert code == 1013  # try again later


def test_the_server_is_healthy_after_all_that(served: Served, client: openai.OpenAI, offline,  # type: ignore[no-untyped-def]
                                              clips: dict[str, Path]) -> None:
    health = served.health()
    assert health["workers_alive"] == 1 and health["queued"] == 0
    with open(clips["flac"], "rb") as audio:
        assert client.audio.transcriptions.create(model="whisper-1", file=audio, language="en").text == offline.text


def test_a_float_wav_of_the_same_samples_answers_the_same(client: openai.OpenAI, offline,  # type: ignore[no-untyped-def]
                                                          clips: dict[str, Path]) -> None:
    buffer = io.BytesIO()
    soundfile.write(buffer, load_audio(clips["flac"]), 16000, format="WAV", subtype="FLOAT")
    result = client.audio.transcriptions.create(model="whisper-1", file=("a.wav", buffer.getvalue()), language="en")
    assert result.text == offline.text


def test_onespeech_serve_runs_the_app(runtime_dirs, vad_path: Path, clips: dict[str, Path]) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "onespeech.speech.cli", "serve", "-m", str(runtime_dirs.asr), "--aligner",
               "none", "--port", str(port), "--vad", str(vad_path), "--threads", "1", "--max-new-tokens", str(BUDGET),
               "--model-alias", "whisper-1", "-q"]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.stderr.read() if server.stderr else ""
            assert time.monotonic() < deadline, "onespeech serve did not become healthy"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        with open(clips["flac"], "rb") as audio:
            result = client.audio.transcriptions.create(model="whisper-1", file=audio, language="en")
        assert result.text
        with open(clips["flac"], "rb") as audio, pytest.raises(openai.BadRequestError) as error:
            client.audio.transcriptions.create(model="whisper-1", file=audio, response_format="verbose_json",
                                               timestamp_granularities=["word"])
        assert error.value.code == "word_timestamps_unavailable"  # --aligner none
    finally:
        server.terminate()
        server.wait(30)
