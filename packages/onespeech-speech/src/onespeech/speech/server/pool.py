"""Recognition workers behind a bounded queue.

Each worker is a thread that loads its own models once (``factory()``) and then runs
jobs one at a time; the model calls spend their time in BLAS and compiled kernels,
so the event loop stays responsive. The queue holds at most ``max_queue`` waiting
jobs: ``submit`` rejects with :class:`QueueFullError` instead of letting it grow.
A job that fails hands its exception to its caller; the worker goes on.
"""

from __future__ import annotations

import asyncio
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from onespeech.kernels.errors import OperationCancelledError
from onespeech.speech.server.errors import QueueFullError

Models = TypeVar("Models")
_STOP = object()


@dataclass
class Job:
    """One unit of work: ``run(models, cancel)`` on a worker thread."""

    run: Callable[[Any, threading.Event], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    cancel: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    _claim_lock: threading.Lock = field(default_factory=threading.Lock)

    def abandon(self) -> bool:
        """The caller gives up: set ``cancel``; True if a worker already runs the job.

        A job abandoned before a worker took it never runs (so the caller may free
        its inputs); a running job sees ``cancel`` at its next check.
        """
        with self._claim_lock:
            self.cancel.set()
            return self.started.is_set()

    def _claim(self) -> bool:
        with self._claim_lock:
            if self.cancel.is_set():
                return False
            self.started.set()
            return True

    def _deliver(self, result: Any = None, error: BaseException | None = None) -> None:
        def settle() -> None:
            if self.future.done():
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(result)

        try:
            self.loop.call_soon_threadsafe(settle)
        except RuntimeError:
            pass  # the event loop is closed: the server is shutting down and nobody waits


class WorkerPool(Generic[Models]):
    """``workers`` threads, each with models from ``factory``, fed by a bounded queue.

    Parameters
    ----------
    factory : callable
        Called once in each worker thread; returns what jobs receive as ``models``.
    workers : int
        Number of worker threads (each holds its own models).
    max_queue : int
        Jobs allowed to wait for a worker; more are rejected.
    close : callable, optional
        Called with a worker's models when the pool stops.
    """

    def __init__(self, factory: Callable[[], Models], workers: int = 1, max_queue: int = 4,
                 close: Callable[[Models], None] | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers={workers}; at least 1 is needed")
        if max_queue < 1:
            raise ValueError(f"max_queue={max_queue}; at least 1 is needed")
        self._factory = factory
        self._close = close
        self._queue: queue.Queue[Any] = queue.Queue(max_queue)
        self._workers = workers
        self._threads: list[threading.Thread] = []
        self._ready = threading.Barrier(workers + 1)
        self._load_errors: list[BaseException] = []
        self._serving = 0  # workers that loaded their models and read the queue
        self._idle = workers
        self._lock = threading.Lock()
        self._job_seconds = 1.0  # moving average of a job's run time, for Retry-After
        self.completed = 0
        self.failed = 0
        self.cancelled = 0
        self.abandoned = 0  # cancelled before a worker took them: never ran

    def start(self) -> None:
        """Start the workers and wait until each has loaded its models.

        Raises
        ------
        Exception
            The first worker's model loading error (the pool is stopped).
        """
        for index in range(self._workers):
            thread = threading.Thread(target=self._work, name=f"onespeech-worker-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self._ready.wait()
        if self._load_errors:
            self.stop()
            raise self._load_errors[0]

    def stop(self) -> None:
        """Let running jobs finish, then end the workers (waiting jobs are cancelled)."""
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(job, Job):
                job.cancel.set()
                job._deliver(error=QueueFullError(1, "the server is stopping"))
        with self._lock:
            serving, self._serving = self._serving, 0
        for _ in range(serving):  # a worker whose loading failed takes no stop message
            self._queue.put(_STOP)
        for thread in self._threads:
            thread.join()
        self._threads.clear()

    @property
    def started(self) -> bool:
        """The workers run (``start`` succeeded and ``stop`` was not called)."""
        return bool(self._threads)

    @property
    def alive_workers(self) -> int:
        return sum(thread.is_alive() for thread in self._threads)

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    @property
    def busy(self) -> int:
        with self._lock:
            return self._workers - self._idle

    def submit(self, run: Callable[[Models, threading.Event], Any]) -> Job:
        """Queue ``run(models, cancel)``; await ``job.future`` for its result.

        Must be called from the event loop thread.

        Raises
        ------
        QueueFullError
            ``max_queue`` jobs are already waiting.
        """
        loop = asyncio.get_running_loop()
        job = Job(run, loop.create_future(), loop)
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise QueueFullError(self._retry_after()) from None
        return job

    def _retry_after(self) -> int:
        # the queue drains at about `workers` jobs per average job time
        waiting = self._queue.qsize() + self._workers
        return max(1, math.ceil(self._job_seconds * waiting / self._workers))

    def _work(self) -> None:
        try:
            models = self._factory()
        except BaseException as error:  # reported by start(); the thread ends
            self._load_errors.append(error)
            self._ready.wait()
            return
        with self._lock:
            self._serving += 1
        self._ready.wait()
        try:
            while True:
                job = self._queue.get()
                if job is _STOP:
                    return
                self._run(job, models)
        finally:
            if self._close is not None:
                self._close(models)

    def _run(self, job: Job, models: Models) -> None:
        if not job._claim():  # the client left while the job waited
            with self._lock:
                self.abandoned += 1
            job.done.set()
            return
        with self._lock:
            self._idle -= 1
        began = time.perf_counter()
        outcome = "failed"
        try:
            result = job.run(models, job.cancel)
        except OperationCancelledError as error:
            outcome = "cancelled"
            job._deliver(error=error)
        except Exception as error:  # handed to the caller; this worker serves the next job
            outcome = "failed"
            job._deliver(error=error)
        else:
            outcome = "completed"
            job._deliver(result)
        finally:
            seconds = time.perf_counter() - began
            with self._lock:
                self._idle += 1
                self._job_seconds = 0.8 * self._job_seconds + 0.2 * seconds
                setattr(self, outcome, getattr(self, outcome) + 1)
            job.done.set()
