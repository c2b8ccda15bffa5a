"""The worker pool: models loaded once per worker, a bounded queue, failures contained."""

from __future__ import annotations

import asyncio
import threading

import pytest

from onespeech.speech.server.pool import QueueFullError, WorkerPool


def _pool(workers: int = 1, max_queue: int = 2) -> tuple[WorkerPool, list[str]]:
    loads: list[str] = []

    def factory() -> str:
        name = threading.current_thread().name
        loads.append(name)
        return name

    return WorkerPool(factory, workers, max_queue), loads


def test_each_worker_loads_its_models_once_and_keeps_them() -> None:
    pool, loads = _pool(workers=2)
    pool.start()
    try:
        async def main() -> list[str]:
            jobs = [pool.submit(lambda models, cancel: models) for _ in range(2)]
            return [await job.future for job in jobs]

        for _ in range(3):
            for models in asyncio.run(main()):
                assert models in loads
        assert sorted(loads) == ["onespeech-worker-0", "onespeech-worker-1"]
    finally:
        pool.stop()
    assert pool.alive_workers == 0


def test_a_full_queue_rejects_instead_of_growing() -> None:
    pool, _ = _pool(workers=1, max_queue=2)
    pool.start()
    release = threading.Event()
    try:
        async def main() -> None:
            running = pool.submit(lambda models, cancel: release.wait(10))
            await asyncio.to_thread(running.started.wait, 10)
            waiting = [pool.submit(lambda models, cancel: 1) for _ in range(2)]
            with pytest.raises(QueueFullError) as error:
                pool.submit(lambda models, cancel: 1)
            assert error.value.retry_after >= 1
            assert pool.queued == 2
            release.set()
            assert await running.future is True
            assert [await job.future for job in waiting] == [1, 1]

        asyncio.run(main())
    finally:
        release.set()
        pool.stop()


def test_a_failing_job_reaches_its_caller_and_the_worker_goes_on() -> None:
    pool, _ = _pool()
    pool.start()
    try:
        async def main() -> None:
            def fail(models: str, cancel: threading.Event) -> None:
                raise ValueError("bad input")

            with pytest.raises(ValueError, match="bad input"):
                await pool.submit(fail).future
            assert await pool.submit(lambda models, cancel: 7).future == 7

        asyncio.run(main())
        assert pool.alive_workers == 1 and pool.failed == 1 and pool.completed == 1
    finally:
        pool.stop()


def test_an_abandoned_waiting_job_never_runs_and_a_running_one_sees_cancel() -> None:
    pool, _ = _pool()
    pool.start()
    ran: list[str] = []
    try:
        async def main() -> None:
            def long(models: str, cancel: threading.Event) -> str:
                ran.append("long")
                cancel.wait(10)
                return "stopped" if cancel.is_set() else "timed out"

            running = pool.submit(long)
            await asyncio.to_thread(running.started.wait, 10)
            waiting = pool.submit(lambda models, cancel: ran.append("waiting"))
            assert waiting.abandon() is False  # not started: it will be skipped
            assert running.abandon() is True  # started: the caller must wait for it
            assert await running.future == "stopped"
            await asyncio.to_thread(waiting.done.wait, 10)

        asyncio.run(main())
        assert ran == ["long"]
        assert pool.abandoned == 1 and pool.completed == 1
    finally:
        pool.stop()


def test_a_model_loading_error_fails_start() -> None:
    def factory() -> None:
        raise FileNotFoundError("no such model")

    pool = WorkerPool(factory, workers=2, max_queue=1)
    with pytest.raises(FileNotFoundError, match="no such model"):
        pool.start()
    assert pool.alive_workers == 0


@pytest.mark.parametrize(("workers", "max_queue"), [(0, 1), (1, 0)])
def test_sizes_must_be_positive(workers: int, max_queue: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        WorkerPool(lambda: None, workers, max_queue)
