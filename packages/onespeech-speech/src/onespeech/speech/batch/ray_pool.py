"""Ray actors, each holding one Transcriber (``pip install onespeech-speech[ray]``).

The driver keeps one task in flight per actor and hands the next file (longest
first) to whichever actor finishes, so a slow file never holds up the others.
An actor that dies (its node lost, killed, out of memory) is replaced; its file
is retried once on the new actor and then recorded as failed. Input paths must
be readable on every node (a shared file system); outputs are written by the
driver, so only the driver needs the output folder.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from onespeech.speech.batch.local_pool import MAX_ATTEMPTS
from onespeech.speech.batch.work import Task, Worker, WorkResult
from onespeech.speech.options import TranscribeOptions

LOCAL = "local"  # ray_address meaning "start a local Ray instance" (ray.init() with no address)


def _ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise ImportError(
            "batch transcription on Ray needs the ray extra: pip install 'onespeech-speech[ray]'"
        ) from e
    return ray


class RayPool:
    """``workers`` Ray actors (default: one per CPU of the cluster, at most one per file)."""

    def __init__(self, address: str, workers: int | None, threads: int, options: TranscribeOptions):
        ray = _ray()
        self._ray = ray
        self._started = not ray.is_initialized()
        if self._started:
            ray.init(address=None if address == LOCAL else address, include_dashboard=False,
                     log_to_driver=False)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers = workers if workers is not None else max(1, cpus // threads)
        self._actor_cls = ray.remote(num_cpus=threads)(Worker)
        self._options = options
        self._actors = [self._actor_cls.remote(options) for _ in range(self.workers)]

    def run(self, tasks: list[Task]) -> Iterator[WorkResult]:
        ray = self._ray
        pending = deque(tasks)
        attempts: dict[int, int] = {}
        in_flight: dict[Any, tuple[int, Task]] = {}
        idle = list(range(len(self._actors)))
        while pending or in_flight:
            while idle and pending:
                slot, task = idle.pop(), pending.popleft()
                attempts[task.index] = attempts.get(task.index, 0) + 1
                in_flight[self._actors[slot].run.remote(task)] = (slot, task)
            done, _ = ray.wait(list(in_flight), num_returns=1)
            slot, task = in_flight.pop(done[0])
            try:
                result: WorkResult = ray.get(done[0])
            except ray.exceptions.RayActorError as e:
                self._actors[slot] = self._actor_cls.remote(self._options)
                idle.append(slot)
                if attempts[task.index] < MAX_ATTEMPTS:
                    pending.appendleft(task)
                    continue
                yield WorkResult(task.index, None, None, "WorkerDied", f"the Ray actor died twice: {e}", 0.0, "")
                continue
            idle.append(slot)
            yield result

    def close(self) -> None:
        for actor in self._actors:
            self._ray.kill(actor)
        self._actors = []
        if self._started:
            self._ray.shutdown()

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
