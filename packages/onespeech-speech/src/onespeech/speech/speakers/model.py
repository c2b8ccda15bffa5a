"""Where the speaker encoder and the VAD come from (see :func:`speaker_model_path`)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from onespeech.kernels.store import cache_root
from onespeech.speech.speakers.convert import RUNTIME_NAME, convert_resemblyzer
from onespeech.speech.speakers.encoder import SpeakerEncoder

SPEAKER_MODEL_ENV = "ONESPEECH_SPEAKER_MODEL"


class SpeakerModelNotFoundError(FileNotFoundError):
    """No speaker encoder could be found or fetched; the message says how to provide one."""


def vad_model_path() -> Path:
    """The default VAD model (``onespeech.features.vad_model.default_vad_path``: fetched on first use)."""
    from onespeech.features.vad_model import default_vad_path

    return default_vad_path()


def _converted_user_file(path: Path, cache_dir: str | os.PathLike[str] | None) -> Path:
    head = path.open("rb").read(8)
    if head.startswith(b"OSTENSR"):
        return path
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    out = (
        (Path(cache_dir) if cache_dir is not None else cache_root())
        / "speakers"
        / f"user-{digest}"
        / RUNTIME_NAME
    )
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
        convert_resemblyzer(path, tmp)
        os.replace(tmp, out)
    return out


def speaker_model_path(*, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """A runtime tensor file of the speaker encoder."""
    env = os.environ.get(SPEAKER_MODEL_ENV)
    if env:
        path = Path(env)
        if not path.is_file():
            raise SpeakerModelNotFoundError(f"{SPEAKER_MODEL_ENV}={env!r} is not a file")
        return _converted_user_file(path, cache_dir)
    raise SpeakerModelNotFoundError(f"set {SPEAKER_MODEL_ENV} to Resemblyzer's pretrained.pt")


def load_speaker_encoder(
    *, threads: int | None = None, cache_dir: str | os.PathLike[str] | None = None
) -> SpeakerEncoder:
    """The GE2E encoder, loaded from :func:`speaker_model_path`."""
    return SpeakerEncoder.load(speaker_model_path(cache_dir=cache_dir), threads=threads)
