"""The hostile-input suite: files and calls from strangers, each case bounded.

A service runs this library on files it did not make and shares one instance
between requests. Each module here takes one area (``test_audio.py``,
``test_tokenizer.py``, ``test_json.py``, ``test_threads.py``, ...) and checks that
malformed, oversized or adversarial input meets a specific error (or a documented
warning) quickly and in bounded memory, never a crash, a hang, a bare
``RecursionError`` or gigabytes of allocation.

Bounding a case
---------------
A case that might misbehave (allocate without limit, spin, start threads, kill
the process) runs in its own Python process with an address-space cap
(``resource.setrlimit(RLIMIT_AS)``), a CPU-time cap (``RLIMIT_CPU``: the
timeout on every CPU) and a wall-clock timeout. Use the ``run_case`` fixture::

    def test_one_hertz_wav_is_refused(run_case, tmp_path):
        path = write_the_file(tmp_path)
        result = run_case(
            '''
            from onespeech.features import load_audio
            load_audio(args["path"])
            ''',
            args={"path": str(path)},
            memory_mb=512,
            timeout_s=30,
        )
        result.expect_error("AudioFormatError", match="below 1000 Hz")

The source is dedented and run as the body of a function in a fresh
interpreter with ``args`` (a JSON-decoded dict) in scope. It may assign
``result = <JSON-serialisable value>``; that value comes back as
``CaseResult.value``. An exception in the case comes back as its class name,
the names of its bases and its message (``CaseResult.error``/``.bases``/``.message``);
the child never lets it escape, so a non-zero exit code means the process died
(a signal, ``MemoryError`` at interpreter level, a C library calling ``exit``).
Exceeding the wall-clock timeout fails the test, naming the limit.

The child gets ``OMP_NUM_THREADS=1`` and ``OPENBLAS_NUM_THREADS=1`` unless the
call passes ``env`` (OpenBLAS reserves address space per thread, which the
memory cap counts). The default cap, 1024 MiB of address space, leaves room for
numpy, soundfile and the compiled kernels (about 400 MiB of mappings); a case
that must prove a small footprint passes a smaller ``memory_mb``.

Checkpoints: ``tiny_asr_dir`` and ``tiny_aligner_dir`` are tiny seeded checkpoints in
the publisher's layout (session-wide, never edit them); ``asr_copy`` is a private
copy of the ASR one's publisher files for a test to damage.

Cases that are safe to run in the test process (a typed error from a small
input, no allocation worth capping) may do so directly; the subprocess is for
anything whose failure mode is "unbounded".
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from onespeech_tools.checkpoints import make_checkpoint

DEFAULT_MEMORY_MB = 1024
DEFAULT_TIMEOUT_S = 60.0
_MARK = "@@hostile-case@@"

# the child: run the case body, report its value or its exception as one JSON line
_RUNNER = """
import json, sys, traceback
args = json.loads(sys.argv[1])
def _case(args):
    result = None
{body}
    return result
try:
    _out = {{"value": _case(args)}}
except BaseException as error:  # report everything: the parent judges
    _out = {{
        "error": type(error).__name__,
        "bases": [klass.__name__ for klass in type(error).__mro__],
        "message": str(error),
        "traceback": traceback.format_exc(),
    }}
sys.stdout.flush()
print({mark!r} + json.dumps(_out, default=repr), flush=True)
"""


@dataclass
class CaseResult:
    """What a bounded case did: its value, or the exception it raised, or how it died."""

    returncode: int
    stdout: str
    stderr: str
    value: Any = None
    error: str | None = None
    bases: list[str] = field(default_factory=list)
    message: str = ""
    traceback: str = ""

    def describe(self) -> str:
        return (
            f"exit code {self.returncode}, error {self.error!r}: {self.message}\n"
            f"{self.traceback}\n--- stdout ---\n{self.stdout[-2000:]}\n--- stderr ---\n{self.stderr[-2000:]}"
        )

    def expect_ok(self) -> Any:
        """Assert that the case finished without an exception; return its value."""
        assert self.returncode == 0 and self.error is None, self.describe()
        return self.value

    def expect_error(self, name: str, match: str | None = None) -> str:
        """Assert that the case raised ``name`` (the class or one of its bases); return the message.

        ``match`` is a regular expression searched in the message, as in ``pytest.raises``.
        """
        assert self.returncode == 0, f"the case process died instead of raising {name}: {self.describe()}"
        assert self.error is not None, f"expected {name}, the case finished: value={self.value!r}"
        assert name in self.bases, f"expected {name}, got {self.describe()}"
        if match is not None:
            assert re.search(match, self.message), f"{self.message!r} does not match {match!r}"
        return self.message


def _limits(memory_mb: int, cpu_s: int) -> Callable[[], None]:
    def apply() -> None:
        memory = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))

    return apply


def run_bounded(
    source: str,
    *,
    args: Mapping[str, Any] | None = None,
    memory_mb: int = DEFAULT_MEMORY_MB,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
) -> CaseResult:
    """Run ``source`` in a fresh interpreter under a memory and time cap (module doc)."""
    body = textwrap.indent(textwrap.dedent(source).strip() or "pass", "    ")
    program = _RUNNER.format(body=body, mark=_MARK)
    child_env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", **(env or {})}
    try:
        done = subprocess.run(
            [sys.executable, "-c", program, json.dumps(dict(args or {}))],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=child_env,
            # CPU time: the wall-clock limit on every CPU, so only a runaway thread pool trips it first
            preexec_fn=_limits(memory_mb, int(timeout_s * len(os.sched_getaffinity(0))) + 1),
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"the case ran longer than {timeout_s} s (the bound for this case); stderr: {error.stderr!r}")
    result = CaseResult(done.returncode, done.stdout, done.stderr)
    reports = [line for line in done.stdout.splitlines() if line.startswith(_MARK)]
    if reports:
        report = json.loads(reports[-1][len(_MARK) :])
        result.value = report.get("value")
        result.error = report.get("error")
        result.bases = report.get("bases", [])
        result.message = report.get("message", "")
        result.traceback = report.get("traceback", "")
    elif done.returncode == 0:
        pytest.fail(f"the case exited without reporting: {result.describe()}")
    elif done.returncode == -signal.SIGXCPU:
        pytest.fail(f"the case used more CPU time than its limit (timeout_s on every CPU): {result.describe()}")
    return result


@pytest.fixture(scope="session")
def run_case() -> Callable[..., CaseResult]:
    """`run_bounded`: run a case in a subprocess with a memory cap and a time limit."""
    return run_bounded


@pytest.fixture(scope="session")
def tiny_asr_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("hostile-asr"), "tiny", seed=0, kind="asr", data_dir=shared_data)


@pytest.fixture(scope="session")
def tiny_aligner_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("hostile-aligner"), "tiny", seed=7, kind="aligner",
                           data_dir=shared_data)


@pytest.fixture
def asr_copy(tiny_asr_dir: Path, tmp_path: Path) -> Path:
    """A private copy of the tiny ASR checkpoint (publisher files only) to edit."""
    target = tmp_path / "asr"
    target.mkdir()
    for item in tiny_asr_dir.iterdir():
        if item.is_file() and not item.name.startswith(("manifest", "fp32-", "bf16-", "install", ".")):
            shutil.copyfile(item, target / item.name)
    return target
