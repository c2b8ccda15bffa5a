"""The transcription server against strangers: slow bodies, idle sockets, long audio, keys, paths, bad URLs.

Every case here is refused before a model runs, so the servers below load no
recognizer: a real uvicorn on 127.0.0.1 with its lifespan off (no worker starts;
a request that got past its check would wait in the queue until the test's own
timeout fails it), or Starlette's in-process test client. ``onespeech serve`` runs
as a child process whose model cannot load, so it never listens.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile

pytest.importorskip("starlette", reason="needs onespeech-speech[server]")
uvicorn = pytest.importorskip("uvicorn", reason="needs onespeech-speech[server]")
httpx = pytest.importorskip("httpx", reason="needs httpx (a test dependency in tox.ini)")
pytest.importorskip("websockets", reason="needs onespeech-speech[server]")

from starlette.testclient import TestClient, WebSocketDenialResponse  # noqa: E402
from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from onespeech.speech.server import Backend, ServerConfig, create_app  # noqa: E402
from onespeech.speech.server.headers import header_timeout_protocol  # noqa: E402
from onespeech_tools.serving import serving  # noqa: E402

KEY = "s3cret-key"


def _config(model: Path, vad: Path, **overrides: Any) -> ServerConfig:
    return ServerConfig(model=str(model), aligner=None, vad=vad, threads=1, **overrides)


@contextmanager
def _listening(config: ServerConfig) -> Iterator[tuple[int, Any]]:
    """A real server on 127.0.0.1 with the shared VAD loaded and no worker (lifespan off)."""
    backend = Backend(config)
    backend.load_shared()
    app = create_app(backend)
    # as serve runs it: with the header timeout
    with serving(app, lifespan="off", http=header_timeout_protocol(config.read_timeout_s), start_timeout_s=60) as port:
        yield port, app


def _multipart(fields: dict[str, str], audio: bytes, boundary: str = "b0undary") -> bytes:
    body = b"".join(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
                    for name, value in fields.items())
    body += f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.flac"\r\n\r\n'.encode()
    return body + audio + f"\r\n--{boundary}--\r\n".encode()


# -- slow bodies and idle sockets ------------------------------------------------------------


def test_a_slow_loris_body_is_answered_408_and_closed(tiny_asr_dir: Path, vad_path: Path) -> None:
    config = _config(tiny_asr_dir, vad_path, read_timeout_s=1.0)
    with _listening(config) as (port, _):
        body = _multipart({"model": config.model_ids[0]}, b"\0" * 1000)
        head = (f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
                "Content-Type: multipart/form-data; boundary=b0undary\r\n\r\n").encode()
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(head)
            sock.setblocking(False)
            answer = b""
            for byte in body:  # a byte every 50 ms: the whole body would take 60 s
                try:
                    sock.send(bytes([byte]))
                except OSError:
                    break  # the server closed the connection
                time.sleep(0.05)
                with contextlib.suppress(BlockingIOError):
                    answer += sock.recv(65536)
                if b"\r\n\r\n" in answer or time.monotonic() - started > 10:
                    break
            sock.settimeout(10)
            while True:  # the rest of the answer, then the close
                try:
                    data = sock.recv(65536)
                except OSError:
                    break
                if not data:
                    break
                answer += data
    elapsed = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert elapsed < 8, f"the slow body was held {elapsed:.1f} s with a 1 s read timeout"
    error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
    assert error["code"] == "request_timeout" and "1 s" in error["message"]


@pytest.mark.parametrize("first", [b"", b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: 127.0.0.1\r\n"])
def test_slow_headers_are_answered_408_and_closed(tiny_asr_dir: Path, vad_path: Path, first: bytes) -> None:
    """A connection that never finishes its headers (nothing at all, or a header line now and then)."""
    with _listening(_config(tiny_asr_dir, vad_path, read_timeout_s=1.0)) as (port, _):
        started = time.monotonic()
        answer = b""
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(first)
            sock.setblocking(False)
            for index in range(200):  # a header line every 50 ms: the headers would never end
                if first:
                    try:
                        sock.send(f"X-Slow-{index}: {index}\r\n".encode())
                    except OSError:
                        break  # the server closed the connection
                time.sleep(0.05)
                with contextlib.suppress(BlockingIOError):
                    data = sock.recv(65536)
                    answer += data
                    if not data:
                        break
                if time.monotonic() - started > 10:
                    break
        elapsed = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert elapsed < 8, f"the connection was held {elapsed:.1f} s with a 1 s read timeout"
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "request_timeout"


def test_bytes_that_are_not_http_get_a_json_400(tiny_asr_dir: Path, vad_path: Path) -> None:
    with _listening(_config(tiny_asr_dir, vad_path)) as (port, _):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"\x16\x03\x01 this is no request line\r\n\r\n")
            answer = b""
            while data := sock.recv(65536):
                answer += data
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"content-type: application/json" in answer.lower()
    error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
    assert error["code"] == "invalid_http" and set(error) == {"message", "type", "param", "code"}


def test_a_quick_client_keeps_its_connection_alive(tiny_asr_dir: Path, vad_path: Path) -> None:
    """The header deadline starts afresh for each request of a keep-alive connection."""
    with _listening(_config(tiny_asr_dir, vad_path, read_timeout_s=1.0)) as (port, _):
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            for _ in range(4):
                assert http.get("/v1/models").status_code == 200
                time.sleep(0.4)  # 1.6 s on one connection, each request's headers quick


def test_an_idle_websocket_is_closed(tiny_asr_dir: Path, vad_path: Path) -> None:
    with _listening(_config(tiny_asr_dir, vad_path, idle_timeout_s=0.5)) as (port, _):
        started = time.monotonic()
        with connect(f"ws://127.0.0.1:{port}/v1/audio/stream", open_timeout=10) as ws:
            ws.send(b"\0\0" * 160)  # one frame, then silence on the wire
            message = json.loads(ws.recv(timeout=10))
            with pytest.raises(ConnectionClosed):
                ws.recv(timeout=10)
        assert message["type"] == "error" and message["error"]["code"] == "idle_timeout"
        assert ws.close_code == 1008
        assert time.monotonic() - started < 8


# -- audio longer than the server takes ------------------------------------------------------


def _silence_flac(seconds: float, rate: int = 1000) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, np.zeros(int(seconds * rate), dtype=np.int16), rate, format="FLAC", subtype="PCM_16")
    return buffer.getvalue()


def test_two_hours_of_silence_are_refused_by_duration_before_any_work(tiny_asr_dir: Path, vad_path: Path) -> None:
    audio = _silence_flac(2 * 3600)  # 23 KB that would hold the one worker for its 2 h
    assert len(audio) < 100_000
    config = _config(tiny_asr_dir, vad_path, max_audio_s=600.0)
    with _listening(config) as (port, app):
        response = httpx.post(f"http://127.0.0.1:{port}/v1/audio/transcriptions", timeout=20,
                              data={"model": config.model_ids[0]}, files={"file": ("silence.flac", audio)})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "audio_too_long" and error["param"] == "file"
        assert "7200.0 s" in error["message"] and "600 s" in error["message"]
        assert app.state.pool.queued == 0  # refused from the header: it never took a place in the queue


# -- the API key -----------------------------------------------------------------------------


@pytest.fixture
def keyed(tiny_asr_dir: Path, vad_path: Path) -> TestClient:
    """The app with an API key, in process (no lifespan: no model loads)."""
    return TestClient(create_app(Backend(_config(tiny_asr_dir, vad_path, api_key=KEY))), raise_server_exceptions=False)


def test_the_api_key_is_required(keyed: TestClient) -> None:
    for method, path in (("GET", "/v1/models"), ("POST", "/v1/audio/transcriptions"), ("GET", "/nowhere")):
        response = keyed.request(method, path, files={"file": ("a.wav", b"RIFF")} if method == "POST" else None)
        assert response.status_code == 401, (path, response.text)
        assert response.json()["error"]["code"] == "missing_api_key"
        assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("header", [f"Bearer {KEY}x", "Bearer s3cret-ke", f"Basic {KEY}", KEY, "Bearer "])
def test_a_wrong_api_key_is_refused(keyed: TestClient, header: str) -> None:
    response = keyed.get("/v1/models", headers={"Authorization": header})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert KEY not in response.text


def test_the_right_api_key_is_accepted_and_health_stays_open(keyed: TestClient) -> None:
    assert keyed.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert keyed.get("/v1/models", headers={"Authorization": f"bearer  {KEY} "}).status_code == 200
    assert keyed.get("/health").status_code in (200, 503)  # no key needed (503: no worker runs here)


def test_a_websocket_without_the_key_is_refused(keyed: TestClient) -> None:
    with pytest.raises(WebSocketDenialResponse) as denied:
        with keyed.websocket_connect("/v1/audio/stream"):
            pass
    assert denied.value.status_code == 401
    assert denied.value.json()["error"]["code"] == "missing_api_key"


def test_a_websocket_with_the_key_over_the_network(tiny_asr_dir: Path, vad_path: Path) -> None:
    with _listening(_config(tiny_asr_dir, vad_path, api_key=KEY, idle_timeout_s=0.3)) as (port, _):
        with pytest.raises(InvalidStatus) as refused:
            connect(f"ws://127.0.0.1:{port}/v1/audio/stream", open_timeout=10)
        assert refused.value.response.status_code == 401
        with connect(f"ws://127.0.0.1:{port}/v1/audio/stream", open_timeout=10,
                     additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
            assert json.loads(ws.recv(timeout=10))["error"]["code"] == "idle_timeout"  # in, then idle


# -- what the server shows -------------------------------------------------------------------


def test_no_local_path_in_models_or_health(tiny_asr_dir: Path, vad_path: Path) -> None:
    client = TestClient(create_app(Backend(_config(tiny_asr_dir, vad_path, model_alias="whisper-1"))),
                        raise_server_exceptions=False)
    models = client.get("/v1/models")
    assert [m["id"] for m in models.json()["data"]] == [tiny_asr_dir.name, "whisper-1"]
    health = client.get("/health")
    assert health.json()["model"] == tiny_asr_dir.name
    for text in (models.text, health.text):
        assert str(tiny_asr_dir.parent) not in text and str(vad_path.parent) not in text
    # the 404 for another model names the ids, not the directory
    missing = client.post("/v1/audio/transcriptions", data={"model": "gpt-4o-transcribe"},
                          files={"file": ("a.wav", b"RIFF")})
    assert missing.status_code == 404 and str(tiny_asr_dir.parent) not in missing.text


@pytest.mark.parametrize(("method", "path", "status", "code"), [
    ("GET", "/nowhere", 404, "not_found"),
    ("POST", "/v1/audio/translations", 404, "not_found"),
    ("GET", "/v1/audio/transcriptions", 405, "method_not_allowed"),
    ("DELETE", "/v1/models", 405, "method_not_allowed"),
])
def test_every_error_is_openai_shaped_json(tiny_asr_dir: Path, vad_path: Path, method: str, path: str,
                                           status: int, code: str) -> None:
    client = TestClient(create_app(Backend(_config(tiny_asr_dir, vad_path))), raise_server_exceptions=False)
    response = client.request(method, path)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code
    assert path in error["message"]
    if status == 405:
        assert response.headers["allow"] and response.headers["allow"] in error["message"]


# -- onespeech serve, with a model that cannot load ------------------------------------------


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    child_env = {name: value for name, value in os.environ.items() if name != "ONESPEECH_API_KEY"}
    child_env.update({"ONESPEECH_OFFLINE": "1", **(env or {})})
    return subprocess.run([sys.executable, "-m", "onespeech.speech.cli", "serve", *args], capture_output=True,
                          text=True, timeout=120, env=child_env)


def test_serve_with_a_model_that_cannot_load_prints_one_line_and_exits_1(tmp_path: Path, vad_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    done = _serve("-m", str(missing), "--aligner", "none", "--vad", str(vad_path), "--port", "0", "-q")
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("onespeech serve: cannot load the models:") and str(missing) in lines[0]


def test_serve_warns_when_it_listens_beyond_loopback_without_a_key(tmp_path: Path, vad_path: Path) -> None:
    # the model cannot load, so nothing ever listens: the warning comes first
    common = ("-m", str(tmp_path / "none"), "--aligner", "none", "--vad", str(vad_path), "-q")
    exposed = _serve("--host", "0.0.0.0", *common)
    assert exposed.returncode == 1
    warning = [line for line in exposed.stderr.splitlines() if "warning" in line]
    assert len(warning) == 1 and "0.0.0.0" in warning[0] and "ONESPEECH_API_KEY" in warning[0]
    for args, env in ((("--host", "127.0.0.1"), None), (("--host", "::1"), None),
                      (("--host", "0.0.0.0", "--api-key", KEY), None),
                      (("--host", "0.0.0.0"), {"ONESPEECH_API_KEY": KEY})):
        quiet = _serve(*args, *common, env=env)
        assert quiet.returncode == 1 and "warning" not in quiet.stderr, (args, quiet.stderr)
        assert KEY not in quiet.stderr
