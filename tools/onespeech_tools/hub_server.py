"""A real HTTP server on 127.0.0.1 that serves repositories in the Hub's URL layout.

``{endpoint}/{repo_id}/resolve/{revision}/{name}`` maps to a file of a local directory.
It honours ``Range`` (206 / 416) like the Hub's CDN, answers ``HEAD`` with the Hub's
metadata headers (``X-Repo-Commit``; ``X-Linked-Etag`` = SHA-256 for LFS-stored files,
``ETag`` = git blob SHA-1 otherwise), so ``huggingface_hub`` can download from it into
a Hugging Face cache laid out as the real one, logs every request with its headers
(to check what a client sends, e.g. its token), and can
misbehave per file name to exercise the download code: drop the connection mid-body,
serve corrupt or truncated bytes, stall before answering, answer an HTTP status.

Used by the tests of every package that downloads (fixture ``hub_server_cls`` in the
repository's conftest.py) and by ``tools/examples/local_hub_demo.py``; installed with
onespeech-tools, a declared test dependency. Nothing here is mocked: clients talk real
HTTP over a socket.
"""

from __future__ import annotations

import hashlib
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote


@dataclass
class Misbehaviour:
    """How the server should mistreat one file. Counters apply to the next N requests."""

    drop_after: int | None = None  # send only this many body bytes, then close the socket
    drop_times: int = 1  # ... for this many requests
    corrupt: bool = False  # flip one byte in the middle of the body
    truncate_to: int | None = None  # serve only the first N bytes as if it were the file
    delay_s: float = 0.0  # sleep before sending the headers
    trickle_s: float = 0.0  # sleep between 1 KiB blocks of the body
    trickle_times: int = 1_000_000
    stall_after: int | None = None  # send this many body bytes, then go silent for stall_s
    stall_s: float = 0.0
    stall_times: int = 1
    status: int | None = None  # answer this status with an empty body
    status_times: int = 1_000_000
    ignore_range: bool = False  # answer 200 with the whole body to ranged requests


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        # clients that time out or give up close their socket mid-body; that is the point
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@dataclass
class Request:
    path: str
    range: str | None
    method: str = "GET"
    headers: dict[str, str] = field(default_factory=dict)


LFS_SUFFIXES = (".safetensors", ".bin", ".onnx", ".pt", ".pth", ".ost", ".tensors", ".whl")


def hub_etag(name: str, data: bytes) -> tuple[str, str]:
    """The header and value the Hub sends as a file's etag: (``X-Linked-Etag``, SHA-256)
    for LFS-stored files (weights), (``ETag``, git blob SHA-1) for the others."""
    if name.endswith(LFS_SUFFIXES):
        return "X-Linked-Etag", hashlib.sha256(data).hexdigest()
    return "ETag", hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class HubServer:
    """Start with :meth:`start`; stop with :meth:`stop`. ``endpoint`` is the base URL."""

    repos: dict[tuple[str, str], Path] = field(default_factory=dict)
    commits: dict[tuple[str, str], str] = field(default_factory=dict)  # (repo, revision) -> commit id
    files: dict[str, Path] = field(default_factory=dict)  # URL path -> file (e.g. a wheel)
    behaviour: dict[str, Misbehaviour] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    endpoint: str = ""
    _httpd: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def add_repo(self, repo_id: str, revision: str, directory: str | Path, commit: str | None = None) -> None:
        """Serve ``directory`` as ``repo_id`` at ``revision`` (a branch such as ``main`` names
        its ``commit``, sent as ``X-Repo-Commit``; a commit id names itself)."""
        self.repos[(repo_id, revision)] = Path(directory)
        self.commits[(repo_id, revision)] = commit or revision

    def add_file(self, url_path: str, path: str | Path) -> str:
        """Serve ``path`` at ``url_path`` (outside the Hub layout, as a package index does);
        returns its URL. Misbehaviours apply by the file's last path component."""
        self.files["/" + url_path.lstrip("/")] = Path(path)
        return f"{self.endpoint}/{url_path.lstrip('/')}"

    def misbehave(self, name: str, **kwargs: object) -> Misbehaviour:
        self.behaviour[name] = Misbehaviour(**kwargs)  # type: ignore[arg-type]
        return self.behaviour[name]

    def requests_for(self, name: str) -> list[Request]:
        return [r for r in self.requests if r.path.endswith("/" + name)]

    def start(self) -> HubServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server naming
                server.requests.append(Request(self.path, self.headers.get("Range"), "GET", dict(self.headers)))
                server._serve(self)

            def do_HEAD(self) -> None:  # noqa: N802 - http.server naming
                server.requests.append(Request(self.path, self.headers.get("Range"), "HEAD", dict(self.headers)))
                server._serve(self, head=True)

        self._httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    # -- request handling ---------------------------------------------------------
    def _locate(self, url_path: str) -> tuple[str, Path | None, str | None]:
        """(file name, file or None, commit id of a Hub-layout URL or None)."""
        plain = unquote(url_path.split("?")[0])
        if plain in self.files:
            return plain.rsplit("/", 1)[-1], self.files[plain], None
        parts = plain.lstrip("/").split("/")
        if len(parts) < 5 or parts[2] != "resolve":
            return "", None, None
        repo_id, revision, name = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
        root = self.repos.get((repo_id, revision))
        if root is None or ".." in name.split("/"):
            return name, None, None
        path = root / name
        return name, path if path.is_file() else None, self.commits.get((repo_id, revision))

    def _serve(self, h: BaseHTTPRequestHandler, head: bool = False) -> None:
        name, path, commit = self._locate(h.path)
        rule = self.behaviour.get(name, Misbehaviour())
        if rule.delay_s:
            time.sleep(rule.delay_s)
        if rule.status is not None and rule.status_times > 0:
            rule.status_times -= 1
            self._empty(h, rule.status)
            return
        if path is None:
            self._empty(h, 404)
            return
        data = path.read_bytes()
        if rule.truncate_to is not None:
            data = data[: rule.truncate_to]
        if rule.corrupt and data:
            mid = len(data) // 2
            data = data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1 :]
        start = 0
        rng = h.headers.get("Range")
        if rng and not rule.ignore_range:
            start = int(rng.removeprefix("bytes=").split("-")[0])
            if start >= len(data):
                h.send_response(416)
                h.send_header("Content-Range", f"bytes */{len(data)}")
                h.send_header("Content-Length", "0")
                h.end_headers()
                return
            h.send_response(206)
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            h.send_response(200)
        body = data[start:]
        h.send_header("Content-Length", str(len(body)))
        h.send_header("Accept-Ranges", "bytes")
        if commit is not None:
            h.send_header("X-Repo-Commit", commit)
            etag_header, etag = hub_etag(name, path.read_bytes())
            h.send_header(etag_header, f'"{etag}"')
        h.end_headers()
        if head:
            return
        if rule.drop_after is not None and rule.drop_times > 0:
            rule.drop_times -= 1
            h.wfile.write(body[: rule.drop_after])
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)
            return
        if rule.stall_after is not None and rule.stall_times > 0:
            rule.stall_times -= 1
            h.wfile.write(body[: rule.stall_after])
            h.wfile.flush()
            time.sleep(rule.stall_s)
            body = body[rule.stall_after :]
        if rule.trickle_s and rule.trickle_times > 0:
            rule.trickle_times -= 1
            pause = rule.trickle_s
            for i in range(0, len(body), 1024):
                h.wfile.write(body[i : i + 1024])
                h.wfile.flush()
                time.sleep(pause)
        else:
            h.wfile.write(body)

    @staticmethod
    def _empty(h: BaseHTTPRequestHandler, status: int) -> None:
        h.send_response(status)
        h.send_header("Content-Length", "0")
        h.end_headers()

