"""Server reliability under load: many clients, bad uploads, dropped connections (loopback only).

``python benchmarks/bench_server_load.py [--clients 50] [--seconds 60]``

Starts ``onespeech serve`` (a tiny seeded checkpoint whose greedy output ends, or
``--model``) on 127.0.0.1 in a child process, then runs ``--clients`` threads for
``--seconds``, each sending in a loop one of: a valid clip, corrupt bytes, an empty
file, a body over the upload limit, a WAV cut short, an upload dropped half way, a
request dropped while it waits for its answer. It checks that

- every valid request answers 200 with exactly the text a lone request got, or 503
  with Retry-After (the queue rejects rather than grows);
- bad uploads get their 4xx (400 unreadable, 413 too large), never a 5xx;
- the queue never holds more than ``--max-queue`` jobs and no worker dies (``/health``);
- the server's memory stays flat: RSS after warm-up and at the end, and its peak.

Exit status 0 when all hold, 1 otherwise. Not a unit test: run it by hand (under the
heavy lock on shared machines); docs/server.md quotes its output.
"""

from __future__ import annotations

import argparse
import collections
import io
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tools"))

from onespeech_tools.data import SKIP_STATUS, find_shared_data  # noqa: E402

KINDS = {  # kind: weight
    "valid": 40, "corrupt": 12, "empty": 8, "huge": 10, "truncated": 10, "drop_upload": 10, "drop_waiting": 10,
}
END_SCALE = 0.1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-queue", type=int, default=8)
    parser.add_argument("--max-upload-mb", type=float, default=2.0)
    parser.add_argument("--clip-seconds", type=float, default=11.0)
    parser.add_argument("--model", default=None, help="checkpoint directory (default: a generated tiny one)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    data = find_shared_data()
    if data is None:
        print("skipped: the shared data folder is not on this machine")
        return SKIP_STATUS
    with tempfile.TemporaryDirectory(prefix="onespeech-load-") as tmp:
        model = args.model or _checkpoint(Path(tmp), data)
        valid = _clip(data, args.clip_seconds)
        port = _free_port()
        server = _start_server(model, data, port, args)
        try:
            return _run(args, port, server, valid)
        finally:
            server.terminate()
            try:
                server.wait(20)
            except subprocess.TimeoutExpired:
                server.kill()


def _run(args: argparse.Namespace, port: int, server: subprocess.Popen, valid: bytes) -> int:
    import httpx

    base = f"http://127.0.0.1:{port}"
    _wait_healthy(base, server)
    with httpx.Client(base_url=base, timeout=120) as client:
        baseline = _post(client, valid)
        if baseline.status_code != 200:
            print(f"FAIL: a lone valid request got {baseline.status_code}: {baseline.text[:300]}")
            return 1
        expected = baseline.json()["text"]
        for _ in range(2):  # warm-up
            _post(client, valid)
    rss_start = _rss(server.pid)
    payloads = _payloads(valid, int(args.max_upload_mb * 2**20))
    deadline = time.monotonic() + args.seconds
    results: collections.Counter[tuple[str, str]] = collections.Counter()
    problems: list[str] = []
    health: list[dict] = []
    lock = threading.Lock()

    def client_loop(index: int) -> None:
        rng = random.Random(args.seed * 1000 + index)
        kinds, weights = list(KINDS), list(KINDS.values())
        with httpx.Client(base_url=base, timeout=300) as http:
            while time.monotonic() < deadline:
                kind = rng.choices(kinds, weights)[0]
                outcome, problem = _one(kind, http, port, payloads, expected)
                with lock:
                    results[(kind, outcome)] += 1
                    if problem:
                        problems.append(f"{kind}: {problem}")

    rss_samples: list[float] = []

    def watch() -> None:
        with httpx.Client(base_url=base, timeout=30) as http:
            while time.monotonic() < deadline:
                try:
                    health.append(http.get("/health").json())
                except httpx.HTTPError as error:
                    problems.append(f"/health failed: {error!r}")
                rss_samples.append(_rss(server.pid))
                time.sleep(1.0)

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(args.clients)]
    threads.append(threading.Thread(target=watch))
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    time.sleep(2.0)  # let cancelled jobs finish
    rss_end = _rss(server.pid)
    peak = _rss(server.pid, "VmHWM")
    with httpx.Client(base_url=base, timeout=120) as client:
        final_health = client.get("/health").json()
        after = _post(client, valid)
    if after.status_code != 200 or after.json()["text"] != expected:
        problems.append(f"after the run a valid request got {after.status_code}")
    if server.poll() is not None:
        problems.append(f"the server exited with {server.returncode}")
    max_queued = max((h["queued"] for h in health), default=0)
    if max_queued > args.max_queue:
        problems.append(f"the queue held {max_queued} jobs, over --max-queue {args.max_queue}")
    if final_health["workers_alive"] != args.workers or any(h["workers_alive"] != args.workers for h in health):
        problems.append(f"a worker died: {final_health}")

    print(f"clients={args.clients} seconds={elapsed:.1f} workers={args.workers} max_queue={args.max_queue} "
          f"upload limit={args.max_upload_mb} MiB valid clip={args.clip_seconds} s")
    print(f"{'kind':<14}{'outcome':<28}{'count':>7}")
    for (kind, outcome), count in sorted(results.items()):
        print(f"{kind:<14}{outcome:<28}{count:>7}")
    answered = sum(c for (k, o), c in results.items() if k == "valid" and o == "200 correct")
    print(f"valid answered correctly: {answered} ({answered / elapsed:.2f}/s); "
          f"503 rejections: {sum(c for (k, o), c in results.items() if o.startswith('503'))}")
    print(f"queue length max (sampled each second): {max_queued}; workers alive at the end: "
          f"{final_health['workers_alive']}/{args.workers}; jobs completed {final_health['completed']}, "
          f"failed {final_health['failed']}, cancelled while running {final_health['cancelled']}, "
          f"dropped before they ran {final_health['abandoned']}")
    print(f"server RSS: after warm-up {rss_start:.0f} MiB, at the end {rss_end:.0f} MiB, peak {peak:.0f} MiB")
    quarters = [rss_samples[min(len(rss_samples) - 1, len(rss_samples) * q // 4)] for q in range(1, 5)]
    print("server RSS at 1/4, 1/2, 3/4 and the end of the run: " + ", ".join(f"{r:.0f}" for r in quarters) + " MiB")
    for problem in problems[:20]:
        print(f"PROBLEM {problem}")
    print("OK" if not problems else f"FAIL ({len(problems)} problems)")
    return 0 if not problems else 1


def _one(kind: str, http, port: int, payloads: dict[str, bytes], expected: str) -> tuple[str, str | None]:
    import httpx

    if kind == "drop_upload":
        _drop(port, payloads["valid"], send_fraction=0.5)
        return "dropped mid-upload", None
    if kind == "drop_waiting":
        _drop(port, payloads["valid"], send_fraction=1.0)
        return "dropped while waiting", None
    try:
        response = _post(http, payloads[kind])
    except httpx.HTTPError as error:
        if kind == "huge":  # refused before the body was read: the send may break instead
            return "connection closed early", None
        return f"error {type(error).__name__}", f"{error!r}"
    status = response.status_code
    if status == 503:
        ok = "retry-after" in response.headers
        return "503 queue full", None if ok else "503 without Retry-After"
    if kind == "valid":
        if status == 200 and response.json()["text"] == expected:
            return "200 correct", None
        return f"{status} wrong", f"{status} {response.text[:200]}"
    if kind == "huge":
        return str(status), None if status == 413 else f"{status} instead of 413"
    if kind == "truncated":  # libsndfile may read the frames that are there, or refuse the file
        return str(status), None if status in (200, 400) else f"{status}: {response.text[:200]}"
    return str(status), None if status == 400 else f"{status} instead of 400: {response.text[:200]}"


def _post(http, payload: bytes):  # type: ignore[no-untyped-def]
    return http.post("/v1/audio/transcriptions", data={"model": "tiny"},
                     files={"file": ("audio.wav", payload, "audio/wav")})


def _drop(port: int, payload: bytes, send_fraction: float) -> None:
    """A raw multipart request; close the socket after part of the body, or before reading the answer."""
    boundary = "onespeechload"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ntiny\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
            "Content-Type: audio/wav\r\n\r\n").encode()
    body = head + payload + f"\r\n--{boundary}--\r\n".encode()
    request = (f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {len(body)}\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request.encode() + body[: int(len(body) * send_fraction)])
        time.sleep(0.2)


def _payloads(valid: bytes, limit: int) -> dict[str, bytes]:
    rng = random.Random(1)
    return {
        "valid": valid,
        "corrupt": bytes(rng.getrandbits(8) for _ in range(20000)),
        "empty": b"",
        "huge": os.urandom(limit + 1024),
        "truncated": valid[: len(valid) * 3 // 5],
    }


def _clip(data: Path, seconds: float) -> bytes:
    import soundfile

    from onespeech.features import load_audio

    pcm = load_audio(data / "audio" / "jfk.flac")[: int(seconds * 16000)]
    buffer = io.BytesIO()
    soundfile.write(buffer, pcm, 16000, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def _checkpoint(root: Path, data: Path) -> str:
    from onespeech.qwen3.runtime import load_model
    from onespeech_tools.checkpoints import make_checkpoint

    path = make_checkpoint(root / "asr-tiny", "tiny", seed=0, data_dir=data, end_scale=END_SCALE)
    load_model(path, "fp32").close()  # convert once, before the workers load it
    return str(path)


def _start_server(model: str, data: Path, port: int, args: argparse.Namespace) -> subprocess.Popen:
    command = [sys.executable, "-m", "onespeech.speech.cli", "serve", "-m", model, "--model-alias", "tiny",
               "--aligner", "none", "--host", "127.0.0.1", "--port", str(port), "--workers", str(args.workers),
               "--max-queue", str(args.max_queue), "--max-upload-mb", str(args.max_upload_mb),
               "--vad", str(data / "models" / "silero_vad.onnx"), "--threads", "1", "-q"]
    # the server attributes speakers by default, as the CLI: its encoder comes from the shared data, not the network
    env = {"ONESPEECH_SPEAKER_MODEL": str(data / "models" / "resemblyzer_pretrained.pt"), **os.environ}
    return subprocess.Popen(command, env=env)


def _wait_healthy(base: str, server: subprocess.Popen, timeout: float = 120.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with {server.returncode} before it was ready")
        try:
            if httpx.get(base + "/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError("the server did not become healthy in time")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rss(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


if __name__ == "__main__":
    raise SystemExit(main())
