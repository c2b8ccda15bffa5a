"""Hostile input to live sessions and streaming: rates, scales, finished sessions, threads, stdin.

One rate rule holds for every input path (``onespeech.features.pcm.check_sample_rate``,
1000 to 768000 Hz) and is checked before any resampler starts: soxr spun holding the
GIL on a rate of 10**14 (a WebSocket query froze the whole server) and asked for
gigabytes at 1 Hz. Those cases run under ``run_case`` so that the unfixed behaviour
fails on its time or memory cap instead of hanging the suite.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onespeech.features import (
    NonFiniteSampleError,
    PcmScaleError,
    SampleRateError,
    load_audio,
    stream_resampler,
)
from onespeech.features.pcm import MAX_FLOAT_PEAK, MAX_INPUT_SAMPLE_RATE, MIN_INPUT_SAMPLE_RATE
from onespeech.speech.errors import SessionFinishedError
from onespeech.speech.streaming import LiveSession

RANGE = f"{MIN_INPUT_SAMPLE_RATE} to {MAX_INPUT_SAMPLE_RATE} Hz"
_SESSION_CASE = """
import numpy as np
from onespeech.speech.streaming import LiveSession
with LiveSession(args["asr"], aligner=None, vad=args["vad"], threads=1, max_new_tokens=4) as session:
    session.push(np.zeros(args["n"], dtype=np.float32), sample_rate=args["rate"])
    result = session.samples_heard
"""


@pytest.fixture(scope="module")
def session(runtime_dirs, vad_path: Path) -> Iterator[LiveSession]:  # type: ignore[no-untyped-def]
    with LiveSession(runtime_dirs.asr, aligner=None, vad=vad_path, threads=1, max_new_tokens=4) as live:
        yield live


@pytest.fixture(scope="module")
def speech(clips: dict[str, Path]) -> np.ndarray:
    return load_audio(clips["flac"])[: 6 * 16000]


# -- the rate rule ---------------------------------------------------------------------------


@pytest.mark.parametrize(("rate", "n"), [(10**14, 1600), (1, 16000)])
def test_a_push_outside_the_rate_range_is_refused_before_the_resampler(run_case, runtime_dirs, vad_path,  # type: ignore[no-untyped-def]
                                                                        rate: int, n: int) -> None:
    # before: 10**14 spun in soxr holding the GIL (no timeout could stop it), 1 Hz ended in std::bad_alloc
    result = run_case(_SESSION_CASE, args={"asr": str(runtime_dirs.asr), "vad": str(vad_path), "rate": rate, "n": n},
                      memory_mb=1024, timeout_s=60)
    result.expect_error("SampleRateError", match=f"{rate} Hz; audio from {RANGE}")


class _GuardedResampler:
    """soxr.ResampleStream that fails the test when it is started outside the rate rule (instead of spinning)."""

    def __new__(cls, in_rate: float, *args: Any, **kwargs: Any) -> Any:
        assert MIN_INPUT_SAMPLE_RATE <= in_rate <= MAX_INPUT_SAMPLE_RATE, f"soxr started at {in_rate} Hz"
        return _REAL_RESAMPLER(in_rate, *args, **kwargs)


_REAL_RESAMPLER = stream_resampler.soxr.ResampleStream


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rate=st.one_of(st.integers(-10, 2 * MAX_INPUT_SAMPLE_RATE), st.integers(-(10**18), 10**18),
                      st.sampled_from([0, 1, 999, 1000, 768000, 768001, 10**14])))
def test_push_takes_exactly_the_rates_of_the_rule(session: LiveSession, monkeypatch: pytest.MonkeyPatch,
                                                  rate: int) -> None:
    monkeypatch.setattr(stream_resampler.soxr, "ResampleStream", _GuardedResampler)
    session.reset()
    block = np.zeros(64, dtype=np.float32)
    if MIN_INPUT_SAMPLE_RATE <= rate <= MAX_INPUT_SAMPLE_RATE:
        assert session.push(block, rate) == []
        return
    with pytest.raises(SampleRateError, match=RANGE):
        session.push(block, rate)
    # a refused push changes nothing: the clock did not move and no rate was fixed
    assert session.samples_heard == 0
    assert session.push(np.zeros(1600, dtype=np.float32), 16000) == []
    assert session.samples_heard == 1600


def test_rates_that_are_not_whole_numbers_are_refused(session: LiveSession) -> None:
    for rate in (16000.0, "16000", True, None):
        session.reset()
        with pytest.raises(SampleRateError, match="not a whole number of Hz"):
            session.push(np.zeros(16, dtype=np.float32), rate)  # type: ignore[arg-type]


# -- the sample scale ------------------------------------------------------------------------


def test_float_samples_at_int16_scale_are_refused_with_the_conversion(session: LiveSession,
                                                                      speech: np.ndarray) -> None:
    session.reset()
    int16_scale = speech[:16000] * 32767  # the mistake: int16 values stored as floats
    with pytest.raises(PcmScaleError, match="divide 16-bit samples by 32768") as caught:
        session.push(int16_scale, 16000)
    assert caught.value.index == int(np.argmax(np.abs(int16_scale)))
    assert session.samples_heard == 0
    session.push(np.round(int16_scale).astype(np.int16))  # the int16 array itself is taken (scaled by 1/32768)
    assert session.samples_heard == 16000


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(peak=st.floats(0.0, 40000.0, allow_nan=False), at=st.integers(0, 799), rate=st.sampled_from([16000, 8000]))
def test_float_blocks_are_taken_up_to_the_peak_and_refused_beyond(session: LiveSession, peak: float, at: int,
                                                                  rate: int) -> None:
    session.reset()
    block = np.zeros(800, dtype=np.float32)
    block[at] = -np.float32(peak)
    if abs(float(block[at])) <= MAX_FLOAT_PEAK:
        session.push(block, rate)
        assert session.samples_heard > 0 or rate != 16000
        return
    with pytest.raises(PcmScaleError):
        session.push(block, rate)
    assert session.samples_heard == 0
    session.push(np.zeros(800, dtype=np.float32), 16000)  # the refused block fixed no rate


def test_a_nonfinite_block_at_another_rate_fixes_nothing(session: LiveSession) -> None:
    session.reset()
    block = np.zeros(800, dtype=np.float32)
    block[700] = np.nan
    with pytest.raises(NonFiniteSampleError, match="sample 700 is nan"):
        session.push(block, 8000)  # before: soxr took it and fixed the session's rate at 8000
    session.push(np.zeros(800, dtype=np.float32), 16000)
    assert session.samples_heard == 800


# -- a finished session ----------------------------------------------------------------------


@pytest.mark.parametrize("chunking", ["file", "region"])
def test_a_finished_session_refuses_pushes_until_reset(runtime_dirs, vad_path: Path, speech: np.ndarray,  # type: ignore[no-untyped-def]
                                                       chunking: str) -> None:
    with LiveSession(runtime_dirs.asr, aligner=None, vad=vad_path, threads=1, max_new_tokens=4, chunking=chunking) as session:
        first = session.push(speech[: 2 * 16000]) + session.finish()
        assert first  # the 2 s of speech gave a final
        heard = session.samples_heard
        with pytest.raises(SessionFinishedError, match=r"reset\(\)"):
            session.push(speech[2 * 16000 : 3 * 16000])  # before ("file"): taken, and the first 2 s came again
        assert session.samples_heard == heard
        assert session.finish() == []  # nothing pending, nothing repeated
        session.reset()
        assert session.push(speech[: 2 * 16000]) + session.finish() == first


# -- threads ---------------------------------------------------------------------------------


def test_pushes_from_four_threads_keep_the_session_whole(runtime_dirs, vad_path: Path,  # type: ignore[no-untyped-def]
                                                          speech: np.ndarray) -> None:
    blocks = [speech[start : start + 1600] for start in range(0, speech.shape[0], 1600)]
    bad = np.full(1600, 20000.0, dtype=np.float32)  # refused: must not count
    errors: list[BaseException] = []
    refused: list[BaseException] = []
    finals: list[Any] = []
    barrier = threading.Barrier(4)

    def pusher(session: LiveSession, seed: int) -> None:
        rng = np.random.default_rng(seed)
        barrier.wait()
        for index in rng.permutation(len(blocks)):
            try:
                finals.extend(session.push(blocks[index]))
                if index % 7 == 0:
                    session.push(bad)
            except PcmScaleError as error:
                refused.append(error)
            except BaseException as error:  # every other error is a failure of the session
                errors.append(error)

    with LiveSession(runtime_dirs.asr, aligner=None, vad=vad_path, threads=1, max_new_tokens=4) as session:
        threads = [threading.Thread(target=pusher, args=(session, seed)) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        assert not any(thread.is_alive() for thread in threads)
        assert errors == []
        assert len(refused) == 4 * sum(1 for index in range(len(blocks)) if index % 7 == 0)
        assert session.samples_heard == 4 * speech.shape[0]  # exactly the pushes that were taken
        finals += session.finish()
    finals.sort(key=lambda final: final.start)
    assert all(a.end <= b.start for a, b in zip(finals, finals[1:], strict=False))  # one clock, no chunk twice


# -- onespeech stream - ----------------------------------------------------------------------

_CLI_CASE = """
import contextlib, io, sys
from onespeech.speech.cli import main

class Stdin:
    buffer = io.BytesIO(bytes.fromhex(args["stdin"]))

sys.stdin = Stdin()
err, out = io.StringIO(), io.StringIO()
with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
    try:
        status = main(["stream", "-", "-m", args["asr"], "--aligner", "none", "--threads", "1", "--max-new-tokens", "4", *args["extra"]])
    except SystemExit as exit:
        status = exit.code
result = {"status": status, "err": err.getvalue(), "out": out.getvalue()}
"""


def _wav_header(rate: int, data_bytes: int) -> bytes:
    import struct

    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    return (b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt
            + b"data" + struct.pack("<I", data_bytes))


@pytest.mark.parametrize(("stdin", "extra", "status"), [
    pytest.param(_wav_header(1, 48000) + bytes(range(256)) * 187, [], 1, id="1 Hz WAV header"),
    pytest.param(bytes(range(256)) * 187, ["--rate", "1"], 2, id="--rate 1"),
])
def test_stream_stdin_outside_the_rate_range_fails_at_once(run_case, runtime_dirs, vad_path, stdin: bytes,  # type: ignore[no-untyped-def]
                                                          extra: list[str], status: int) -> None:
    # before: a minute of CPU resampling 48 KB at 1 Hz, nothing printed, exit status 0
    result = run_case(_CLI_CASE, args={"asr": str(runtime_dirs.asr), "stdin": stdin.hex(), "extra": extra},
                      env={"ONESPEECH_VAD_MODEL": str(vad_path)}, memory_mb=1024, timeout_s=60)
    value = result.expect_ok()
    assert value["status"] == status and value["out"] == ""
    assert f"1 Hz; audio from {RANGE}" in value["err"], value["err"]
    assert "Traceback" not in value["err"]


# -- the WebSocket ---------------------------------------------------------------------------

_SERVER_CASE = """
import json, threading, time
import httpx, uvicorn
from websockets.sync.client import connect
from onespeech.speech.server import Backend, ServerConfig, create_app

config = ServerConfig(model=args["asr"], aligner=None, vad=args["vad"], threads=1, max_new_tokens=4, workers=1)
server = uvicorn.Server(uvicorn.Config(create_app(Backend(config)), host="127.0.0.1", port=0, log_level="warning",
                                       lifespan="on"))
thread = threading.Thread(target=server.run, daemon=True)
thread.start()
while not server.started:
    assert thread.is_alive()
    time.sleep(0.05)
port = server.servers[0].sockets[0].getsockname()[1]
answers = []
for query in args["queries"]:
    with connect(f"ws://127.0.0.1:{port}/v1/audio/stream?{query}", open_timeout=10) as ws:
        try:
            ws.send(bytes(65536))  # one 64 KiB frame
            ws.send(json.dumps({"type": "finish"}))
        except Exception:
            pass  # the server may have closed already
        messages = []
        try:
            while True:
                messages.append(json.loads(ws.recv(timeout=20)))
        except Exception:
            pass
        answers.append({"messages": messages, "close": ws.close_code})
health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code
server.should_exit = True
thread.join(20)
result = {"answers": answers, "health": health}
"""


def test_websocket_rates_outside_the_rule_are_refused_and_the_server_keeps_answering(  # type: ignore[no-untyped-def]
        run_case, runtime_dirs, vad_path) -> None:
    pytest.importorskip("uvicorn", reason="needs onespeech-speech[server]")
    pytest.importorskip("websockets", reason="needs onespeech-speech[server]")
    pytest.importorskip("httpx", reason="needs httpx")
    queries = ["sample_rate=100000000000000", "sample_rate=1", "sample_rate=abc", "sample_rate=8000"]
    # before: 10**14 froze the server (soxr spinning with the GIL held), 1 Hz asked for 4.6 GB
    result = run_case(_SERVER_CASE, args={"asr": str(runtime_dirs.asr), "vad": str(vad_path), "queries": queries},
                      memory_mb=1536, timeout_s=120)
    value = result.expect_ok()
    *refused, accepted = value["answers"]
    for query, answer in zip(queries, refused, strict=False):
        assert answer["close"] == 1008, (query, answer)
        (error,) = answer["messages"]
        assert error["type"] == "error" and error["error"]["code"] == "invalid_sample_rate", (query, error)
        assert RANGE in error["error"]["message"] and error["error"]["param"] == "sample_rate"
    assert accepted["close"] == 1000 and accepted["messages"][-1]["type"] == "done"
    assert accepted["messages"][-1]["duration"] == pytest.approx(32768 / 8000, abs=0.01)
    assert value["health"] == 200


@settings(max_examples=300, deadline=None)
@given(query=st.one_of(st.integers(-(10**20), 10**20).map(str), st.integers(0, 2 * MAX_INPUT_SAMPLE_RATE).map(str),
                       st.integers(0, 10**6).map(lambda n: "0" * 30 + str(n)),
                       st.text(max_size=30), st.sampled_from(["1e3", " 16000", "16000 ", "16_000", "+16000", "0x3e80",
                                                              "\u0661\u0666\u0660\u0660\u0660", "16000.0", ""])))
def test_websocket_sample_rate_query_follows_the_rule(query: str) -> None:
    pytest.importorskip("starlette", reason="needs onespeech-speech[server]")
    from types import SimpleNamespace

    from onespeech.speech.server.errors import ApiError
    from onespeech.speech.server.websocket import _parameters

    websocket = SimpleNamespace(query_params={"sample_rate": query})
    plain = query.isascii() and query.isdigit()
    if plain and MIN_INPUT_SAMPLE_RATE <= int(query) <= MAX_INPUT_SAMPLE_RATE:
        rate, _, _ = _parameters(websocket, None)  # type: ignore[arg-type]
        assert rate == int(query)
        return
    with pytest.raises(ApiError) as caught:  # before: any int() parse above 0 was taken (10**14, 1, "16_000")
        _parameters(websocket, None)  # type: ignore[arg-type]
    assert caught.value.status == 400 and caught.value.code == "invalid_sample_rate"
    assert caught.value.param == "sample_rate" and RANGE in caught.value.message
