"""A pool of local worker processes, each holding one Transcriber.

Each worker takes one task at a time over its own pipe, so when a worker dies
(killed, out of memory, a crash in native code) the driver knows exactly which
file it was on: that file is retried once on a fresh worker and then recorded
as failed, and every other file goes on. Workers start with ``spawn`` so no
thread or OpenMP state of the driver leaks into them. Workers ignore SIGINT: a
Ctrl-C at the terminal reaches the whole process group, and the driver alone
decides, stopping every worker at once (no traceback from each of them).
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from onespeech.speech.batch.work import Task, Worker, WorkResult
from onespeech.speech.options import TranscribeOptions

MAX_ATTEMPTS = 2  # a file whose worker dies twice is recorded as failed


def _worker_main(conn: Connection, options: TranscribeOptions) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker = Worker(options)
    try:
        while (task := conn.recv()) is not None:
            conn.send(worker.run(task))
    except (EOFError, KeyboardInterrupt):
        pass  # the driver went away or was interrupted: stop quietly
    finally:
        worker.close()


@dataclass
class _Slot:
    process: Any
    conn: Connection
    task: Task | None = None


class LocalPool:
    """``workers`` processes running ``Worker(options)``; ``run`` yields results as files finish."""

    def __init__(self, workers: int, options: TranscribeOptions):
        if workers < 1:
            raise ValueError(f"workers={workers}; it must be at least 1")
        self._context = multiprocessing.get_context("spawn")
        self._options = options
        self._slots = [self._start() for _ in range(workers)]

    def _start(self) -> _Slot:
        parent, child = self._context.Pipe()
        process = self._context.Process(target=_worker_main, args=(child, self._options), daemon=True)
        with _sigint_ignored():  # inherited by the child until _worker_main ignores it for good
            process.start()
        child.close()
        return _Slot(process, parent)

    def run(self, tasks: list[Task]) -> Iterator[WorkResult]:
        pending = deque(tasks)
        attempts: dict[int, int] = {}
        while pending or any(slot.task is not None for slot in self._slots):
            for slot in self._slots:
                if slot.task is None and pending:
                    slot.task = pending.popleft()
                    attempts[slot.task.index] = attempts.get(slot.task.index, 0) + 1
                    slot.conn.send(slot.task)
            busy = [slot for slot in self._slots if slot.task is not None]
            ready = wait([s.conn for s in busy] + [s.process.sentinel for s in busy])
            for index, slot in enumerate(self._slots):
                if slot.task is None or (slot.conn not in ready and slot.process.sentinel not in ready):
                    continue
                result = self._receive(slot)
                task, slot.task = slot.task, None
                if result is not None:
                    yield result
                    continue
                code = slot.process.exitcode
                slot.conn.close()
                self._slots[index] = self._start()
                if attempts[task.index] < MAX_ATTEMPTS:
                    pending.appendleft(task)
                else:
                    message = f"the worker process died (exit code {code}) while transcribing this file, twice"
                    yield WorkResult(task.index, None, None, "WorkerDied", message, 0.0, "")

    @staticmethod
    def _receive(slot: _Slot) -> WorkResult | None:
        try:
            if slot.conn.poll():
                result: WorkResult = slot.conn.recv()
                return result
        except (EOFError, OSError):
            pass
        slot.process.join(timeout=5)
        return None

    def close(self, *, at_once: bool = False) -> None:
        """Stop the workers: after their current file, or ``at_once`` (killed, the driver was interrupted)."""
        for slot in self._slots:
            if at_once:
                slot.process.kill()
                continue
            try:
                slot.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for slot in self._slots:
            slot.process.join(timeout=10)
            if slot.process.is_alive():
                slot.process.kill()
                slot.process.join()
            slot.conn.close()

    def __enter__(self) -> LocalPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self.close(at_once=kind is not None)


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored while a worker starts, so a Ctrl-C in its first moments cannot hit it.

    A spawned interpreter that inherits SIGINT ignored installs no KeyboardInterrupt
    handler; only the main thread may change signal handlers, so other threads skip this.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
