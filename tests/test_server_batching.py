"""Continuous batching in the server: a request's chunks join the running decode batch.

Two workers share one decode batch. A multi-chunk upload starts decoding; a second
upload sent while it decodes joins the running batch at its next step. Each
answer must be the document of serving (transcribing) that file alone, and
``/health`` must count steps that advanced both requests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="needs onespeech-speech[server]")
pytest.importorskip("uvicorn", reason="needs onespeech-speech[server]")
httpx = pytest.importorskip("httpx", reason="needs the openai client (a test dependency in tox.ini)")

from onespeech.speech.document import Document  # noqa: E402
from onespeech.speech.server import Backend, ServerConfig, create_app  # noqa: E402
from onespeech.speech.transcribe import transcribe  # noqa: E402
from onespeech_tools.serving import serving  # noqa: E402

BUDGET = 256  # every chunk of the joined clip ends within it (as in test_transcribe.py)


@pytest.fixture(scope="module")
def config(runtime_dirs, vad_path: Path) -> ServerConfig:  # type: ignore[no-untyped-def]
    return ServerConfig(model=str(runtime_dirs.asr), aligner=str(runtime_dirs.aligner), vad=vad_path, threads=1,
                        max_new_tokens=BUDGET, workers=2, max_queue=2, speakers=False, model_alias="whisper-1")


@pytest.fixture(scope="module")
def backend(config: ServerConfig) -> Backend:
    return Backend(config)


@pytest.fixture(scope="module")
def base(backend: Backend) -> Iterator[str]:
    with serving(create_app(backend)) as port:
        yield f"http://127.0.0.1:{port}"


def _post(base: str, path: Path) -> dict[str, Any]:
    with open(path, "rb") as audio:
        response = httpx.post(f"{base}/v1/audio/transcriptions", timeout=600,
                              data={"model": "whisper-1", "language": "en", "response_format": "document"},
                              files={"file": (path.name, audio)})
    assert response.status_code == 200, response.text
    return dict(response.json())


def _alone(config: ServerConfig, path: Path) -> dict[str, Any]:
    """The file path's document with the server's options (a request serves its file with them)."""
    document = transcribe(path, options=config.options, language="en", progress=False)
    return Document.from_json(document.to_json()).to_dict()


def test_two_requests_share_decode_steps_and_answer_as_alone(base: str, config: ServerConfig,
                                                             clips: dict[str, Path]) -> None:
    long, short = clips["joined"], clips["flac"]  # several chunks; one chunk
    answers: dict[str, dict[str, Any]] = {}
    first = threading.Thread(target=lambda: answers.__setitem__("long", _post(base, long)))
    first.start()
    deadline = time.monotonic() + 300
    while httpx.get(f"{base}/health", timeout=10).json()["decode_steps"] == 0:  # the long one decodes now
        assert time.monotonic() < deadline and first.is_alive()
        time.sleep(0.01)
    answers["short"] = _post(base, short)
    first.join(600)
    assert set(answers) == {"long", "short"}
    while (health := httpx.get(f"{base}/health", timeout=10).json())["busy"]:  # the pool counts after answering
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert health["shared_decode_steps"] > 0, health  # the second request joined the running batch
    assert health["completed"] == 2 and health["failed"] == 0
    assert Document.from_dict(answers["long"]).to_dict() == _alone(config, long)
    assert Document.from_dict(answers["short"]).to_dict() == _alone(config, short)


def test_the_shared_batch_is_bounded_as_the_file_path_is(base: str, backend: Backend, config: ServerConfig) -> None:
    from onespeech.qwen3 import Qwen3Recognizer

    assert config.options.decode_memory_mb is None  # auto: a quarter of the recognizer's weights
    shared = backend._batch
    assert shared is not None  # the workers are loaded while the server runs
    with Qwen3Recognizer.load(config.options.model, config.options.recognizer_options()) as rec:
        assert shared.limits == rec.batch_decoder(config.options.batch_limits()).limits
        assert shared.limits.kv_budget_bytes == rec.weight_bytes // 4
