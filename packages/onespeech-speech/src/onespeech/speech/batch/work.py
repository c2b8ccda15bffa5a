"""One file's work as a worker runs it: the same for the local pool and for Ray.

A worker holds one ``Transcriber`` (its models load on the first file and stay
for the next ones) and turns each task into a ``WorkResult``. Every exception
that a file raises is caught here and returned as data: a failing file is a
result of the batch, never the end of a worker.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onespeech.speech.batch.records import InputStamp
from onespeech.speech.options import TranscribeOptions


@dataclass(frozen=True)
class Task:
    """A file to transcribe, with its per-file options (None: the batch's)."""

    index: int
    path: str
    language: str | None
    context: str | None


@dataclass(frozen=True)
class WorkResult:
    """What a worker returns: the Document as a dict, or the error's type and message.

    ``stamp`` identifies the input as it was read, taken before transcribing it
    so that a file changed meanwhile is redone by the next run.
    """

    index: int
    stamp: InputStamp | None
    document: dict[str, Any] | None
    error_type: str | None
    error_message: str | None
    busy_seconds: float
    worker: str


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Worker:
    """Holds one Transcriber built from ``options`` and runs tasks on it."""

    def __init__(self, options: TranscribeOptions):
        self._options = options
        self._transcriber: Any = None
        self.name = worker_name()

    def run(self, task: Task) -> WorkResult:
        start = time.perf_counter()
        stamp = None
        try:
            stamp = InputStamp.of(Path(task.path))
            if self._transcriber is None:
                from onespeech.speech.transcribe import Transcriber

                self._transcriber = Transcriber(options=self._options, progress=False)
            overrides = {k: v for k, v in (("language", task.language), ("context", task.context)) if v is not None}
            document = self._transcriber.transcribe(task.path, **overrides).to_dict()
        except Exception as e:  # a file's failure is data for the report, whatever it was
            return WorkResult(task.index, stamp, None, type(e).__name__, str(e), time.perf_counter() - start, self.name)
        return WorkResult(task.index, stamp, document, None, None, time.perf_counter() - start, self.name)

    def close(self) -> None:
        if self._transcriber is not None:
            self._transcriber.close()
            self._transcriber = None
