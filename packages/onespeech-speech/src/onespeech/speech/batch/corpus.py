"""transcribe_corpus: many files, resumable, on a local pool of processes or on Ray.

The driver expands the inputs, skips every file whose record says it is done
with the same options, schedules the rest longest first, and writes each
file's outputs and then its record as results come back. Only the driver
writes, so a killed worker or a killed driver loses at most the files in
flight: everything recorded is complete, and a rerun redoes the rest.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import soundfile

from onespeech.speech.batch.inputs import CorpusItem, expand_inputs
from onespeech.speech.batch.local_pool import LocalPool
from onespeech.speech.batch.ray_pool import RayPool
from onespeech.speech.batch.records import (
    InputStamp,
    Record,
    claimed_by_other,
    is_current,
    read_record,
    record_path,
    write_atomic,
)
from onespeech.speech.batch.report import BatchReport, FileFailure, WorkerLoad
from onespeech.speech.batch.work import Task, WorkResult
from onespeech.speech.document import Document
from onespeech.speech.errors import OutputPathError
from onespeech.speech.options import TranscribeOptions
from onespeech.speech.output_paths import check_targets, prepare_output_dir
from onespeech.speech.progress import Progress, check_progress, progress_reporter
from onespeech.speech.writers import parse_formats, write_outputs


def transcribe_corpus(
    inputs: Sequence[str | os.PathLike[str]],
    output_dir: str | os.PathLike[str],
    *,
    options: TranscribeOptions | None = None,
    formats: Sequence[str] = ("json",),
    workers: int | None = None,
    ray_address: str | None = None,
    retry_failed: bool = False,
    overwrite_others: bool = False,
    progress: Progress = None,
    **changes: object,
) -> BatchReport:
    """Transcribe every audio file of ``inputs`` into ``output_dir``.

    Parameters
    ----------
    inputs : sequence of paths
        Audio files, folders (searched recursively for audio extensions) and
        manifests (``.txt``/``.lst``: a path per line; ``.jsonl``: objects with
        ``path`` and optional ``language`` and ``context``).
    output_dir : path
        Where ``<stem>.<format>`` files go (created if missing; it must be a
        writable folder); inputs from folders keep their relative folders. Next to
        each file's outputs a hidden record holds the input's path, size,
        modification time and SHA-256 and the options. Every output path is
        checked before any work: it must resolve inside ``output_dir`` and be no
        input file.
    options : TranscribeOptions, optional
        As for ``transcribe``; keyword arguments naming its fields (``model``,
        ``aligner``, ``language``, ``threads``, ...) change it. A manifest's per-file
        language and context override the batch's. Every option but ``threads`` is
        kept in each file's record: a rerun with other options redoes the files
        (their outputs would differ), one with other ``threads`` skips them.
    formats : sequence of str
        As ``onespeech transcribe -f``.
    workers : int, optional
        Worker processes (or Ray actors), each holding one Transcriber. Default:
        enough workers of ``threads`` threads (default 2) to use every core.
    ray_address : str, optional
        None runs a local process pool; ``"local"`` starts a local Ray instance;
        any other value is passed to ``ray.init(address=...)`` (``"auto"``, or
        ``ray://host:10001``).
    retry_failed : bool
        Redo only the files whose record says they failed.
    overwrite_others : bool
        Let an input take over outputs that a record says another input finished
        (same output name, other path and content). Without it such a batch is
        refused before any work with `OutputPathError` naming both inputs.
    progress : None, False or callable
        The progress protocol of ``transcribe``: None, a tqdm bar over the audio
        seconds done on stderr when it is a terminal; False, none; a callable gets
        ``("batch", done_seconds, total_seconds)`` as each file is finished.

    Returns
    -------
    BatchReport
        A file's failure is recorded there (error type and message) and in its
        record; it never stops the batch. Failing to write a file's outputs (a
        full disk) is such a failure.

    Raises
    ------
    OutputPathError
        Before any work: ``output_dir`` is not a writable folder, an output would
        overwrite an input or land outside ``output_dir``, or (without
        ``overwrite_others``) another input's finished outputs would be replaced.
    """
    formats = parse_formats(formats)
    check_progress(progress)
    start = time.perf_counter()
    expansion = expand_inputs(list(inputs))
    output = prepare_output_dir(output_dir)
    _check_paths(output, expansion.items, [Path(p) for p in inputs], formats)
    settings = TranscribeOptions.build(options, **changes)
    report = BatchReport(manifest_errors=list(expansion.errors))
    todo: list[tuple[CorpusItem, dict[str, Any]]] = []
    claimed: list[str] = []
    for item in expansion.items:
        key = _record_options(settings, formats, item)
        stem = output / item.rel
        record = read_record(record_path(stem))
        if retry_failed:
            wanted = record is not None and record.status == "failed"
        else:
            wanted = not is_current(record, item.path, key, stem.parent)
        if wanted and record is not None and claimed_by_other(record, item.path):
            claimed.append(f"{item.path} would replace {item.rel}.* finished from {record.source}")
        if wanted:
            todo.append((item, key))
        else:
            report.skipped.append(str(item.path))
    if claimed and not overwrite_others:
        shown = "; ".join(claimed[:5]) + (f"; and {len(claimed) - 5} more" if len(claimed) > 5 else "")
        raise OutputPathError(f"{shown}. Give another output folder, or let them replace those outputs "
                              "(overwrite_others=True, --overwrite-others)")
    durations = [_duration(item.path) for item, _ in todo]
    order = sorted(range(len(todo)), key=lambda i: -durations[i])
    tasks = [Task(i, str(todo[i][0].path), todo[i][0].language, todo[i][0].context) for i in order]
    if tasks:
        threads, count = _split_threads(settings.threads, workers, len(tasks))
        worker_options = replace(settings, threads=threads)
        pool: LocalPool | RayPool
        if ray_address is None:
            pool = LocalPool(count, worker_options)
        else:
            pool = RayPool(ray_address, workers, threads, worker_options)
        total, done = sum(durations), 0.0
        report_progress = progress_reporter(progress, "batch")
        try:
            with pool:
                for result in pool.run(tasks):
                    item, key = todo[result.index]
                    seconds = durations[result.index]
                    _finish(item, key, result, seconds, output, formats, report)
                    done += seconds
                    report_progress("batch", done, total)
        finally:
            report_progress.close()
    report.wall_seconds = time.perf_counter() - start
    return report


def _check_paths(output: Path, items: Sequence[CorpusItem], given: Sequence[Path], formats: Sequence[str]) -> None:
    """Every output and record path resolves inside ``output`` and onto no input (files and manifests)."""
    targets: list[Path] = []
    for item in items:
        stem = output / item.rel
        targets += [stem.with_name(f"{stem.name}.{fmt}") for fmt in formats] + [record_path(stem)]
    check_targets(output, targets, [item.path for item in items] + [p for p in given if p.is_file()])


def _record_options(options: TranscribeOptions, formats: Sequence[str], item: CorpusItem) -> dict[str, Any]:
    key = options.record()  # without threads: another thread count skips the files
    if item.language is not None:
        key["language"] = item.language
    if item.context is not None:
        key["context"] = item.context
    key["formats"] = sorted(formats)
    return dict(sorted(key.items()))


def _split_threads(threads: int | None, workers: int | None, n_files: int) -> tuple[int, int]:
    """Threads per worker and worker count, so that workers x threads = the available cores."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if workers is not None and workers < 1:
        raise ValueError(f"workers={workers}; it must be at least 1")
    if threads is None:
        threads = max(1, cores // workers) if workers is not None else min(2, cores)
    if workers is None:
        workers = max(1, cores // threads)
    return threads, max(1, min(workers, n_files))


def _duration(path: Path) -> float:
    """Seconds of audio from the file's header; 0 when unreadable (the worker then reports why)."""
    try:
        return float(soundfile.info(str(path)).duration)
    except (RuntimeError, OSError, ValueError, soundfile.LibsndfileError):
        return 0.0


def _finish(
    item: CorpusItem,
    key: dict[str, Any],
    result: WorkResult,
    seconds: float,
    output: Path,
    formats: Sequence[str],
    report: BatchReport,
) -> None:
    """Write a file's outputs, then its record (the commit mark), and account for it.

    A write that fails (a full disk, a folder made read-only meanwhile) is this
    file's failure; the batch goes on.
    """
    stem = output / item.rel
    stamp = result.stamp or _stamp_or_unknown(item.path)
    source = str(item.path.resolve())
    load = report.workers.setdefault(result.worker or "(died)", WorkerLoad())
    load.busy_seconds += result.busy_seconds
    error = None
    if result.document is None:
        error = {"type": result.error_type or "Error", "message": result.error_message or ""}
    else:
        try:
            check_targets(output, [stem.with_name(f"{stem.name}.{fmt}") for fmt in formats], [item.path])
            # the item's output name ends in its input's stem, which is what write_outputs names files by
            written = write_outputs(Document.from_dict(result.document), item.path, stem.parent, formats)
            record = Record(stamp, key, "done", outputs=[p.name for p in written], audio_seconds=seconds, source=source)
            write_atomic(record_path(stem), record.to_json())
        except (OSError, OutputPathError) as e:
            error = {"type": type(e).__name__, "message": f"writing the outputs: {e}"}
    if error is not None:
        failure = Record(stamp, key, "failed", error=error, audio_seconds=seconds, source=source)
        try:
            write_atomic(record_path(stem), failure.to_json())
        except OSError as e:  # the report still says what happened; the next run redoes the file
            error["message"] += f" (its record could not be written either: {e})"
        report.failed.append(FileFailure(str(item.path), error["type"], error["message"]))
        return
    report.done.append(str(item.path))
    report.audio_seconds += seconds
    load.files += 1
    load.audio_seconds += seconds


def _stamp_or_unknown(path: Path) -> InputStamp:
    try:
        return InputStamp.of(path)
    except OSError:
        return InputStamp(-1, -1, "")
