"""What a batch did: files done, skipped and failed, audio time, throughput, load per worker."""

from __future__ import annotations

from dataclasses import dataclass, field

from onespeech.speech.batch.inputs import ManifestError


@dataclass(frozen=True)
class FileFailure:
    """A file that failed: its path, the error's type name and message."""

    path: str
    error_type: str
    message: str


@dataclass
class WorkerLoad:
    """One worker's share: files finished, their audio seconds, and seconds spent on them."""

    files: int = 0
    audio_seconds: float = 0.0
    busy_seconds: float = 0.0


@dataclass
class BatchReport:
    """The outcome of ``transcribe_corpus``.

    ``throughput`` is audio hours transcribed per wall-clock hour (files done in
    this run only; skipped files cost nothing and count for nothing).
    """

    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[FileFailure] = field(default_factory=list)
    manifest_errors: list[ManifestError] = field(default_factory=list)
    audio_seconds: float = 0.0
    wall_seconds: float = 0.0
    workers: dict[str, WorkerLoad] = field(default_factory=dict)

    @property
    def audio_hours(self) -> float:
        return self.audio_seconds / 3600.0

    @property
    def throughput(self) -> float:
        return self.audio_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def ok(self) -> bool:
        return not self.failed and not self.manifest_errors

    def summary(self) -> str:
        lines = [
            f"{len(self.done)} done, {len(self.skipped)} skipped, {len(self.failed)} failed"
            + (f", {len(self.manifest_errors)} bad manifest lines" if self.manifest_errors else ""),
            f"{self.audio_hours:.3f} h of audio in {self.wall_seconds:.1f} s: "
            f"{self.throughput:.1f} audio hours per wall hour",
        ]
        for name, load in sorted(self.workers.items()):
            lines.append(
                f"  worker {name}: {load.files} files, {load.audio_seconds:.1f} s audio, {load.busy_seconds:.1f} s busy"
            )
        lines += [f"  failed {f.path}: {f.error_type}: {f.message}" for f in self.failed]
        lines += [f"  {e}" for e in self.manifest_errors]
        return "\n".join(lines)
