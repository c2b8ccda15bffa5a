"""The default VAD model: Silero VAD, fetched and converted on first use like every model.

``default_vad_path()`` returns the runtime tensor file of the catalog entry
``silero-vad`` (silero-vad 6.2.3): on first use the pinned wheel is downloaded, its
``silero_vad.onnx`` member is copied out and verified against its pin, converted and
installed in the model cache (``onespeech.kernels.resolve``); later calls verify
the installed file and touch no network. ``ONESPEECH_VAD_MODEL`` names a file to use
instead (a ``silero_vad.onnx`` or our converted tensor file; the user's choice, so
it is not held to the pin).

``load_vad(vad)`` is the one place a VAD argument becomes a loaded ``SileroVad``:
every caller (the recognizer's long-audio path, file transcription, live sessions,
the server, diarization) passes what its user gave it through here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from onespeech.features.errors import VadModelNotFoundError
from onespeech.kernels.cancel import Cancel
from onespeech.kernels.catalog import CatalogEntry
from onespeech.kernels.resolve import install_record_name, resolve
from onespeech.kernels.store import read_manifest

if TYPE_CHECKING:
    from onespeech.features.vad import SileroVad

__all__ = ["DEFAULT_VAD", "VAD_MODEL_ENV", "default_vad_path", "load_vad"]

#: Environment variable naming a local ``silero_vad.onnx`` to use instead of the cached model.
VAD_MODEL_ENV = "ONESPEECH_VAD_MODEL"
#: Catalog name of the VAD used when none is given.
DEFAULT_VAD = "silero-vad"


def default_vad_path(
    entry: CatalogEntry | str = DEFAULT_VAD,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
    cancel: Cancel = None,
) -> Path:
    """Path of the default VAD model (``$ONESPEECH_VAD_MODEL``, else the installed catalog entry).

    Raises
    ------
    VadModelNotFoundError
        ``ONESPEECH_VAD_MODEL`` names no file.
    OfflineModeError
        Offline and the model is not in the cache yet.
    DownloadError, ModelIntegrityError, OperationCancelledError
        As :func:`onespeech.kernels.resolve.resolve`.
    """
    env = os.environ.get(VAD_MODEL_ENV)
    if env:
        path = Path(env)
        if not path.is_file():
            raise VadModelNotFoundError(f"{VAD_MODEL_ENV}={env!r} is not a file; point it at silero_vad.onnx")
        return path
    runtime = resolve(entry, "fp32", kind="vad", cache_dir=cache_dir, offline=offline, cancel=cancel)
    record = read_manifest(runtime, name=install_record_name("fp32"))
    tensors = sorted(name for name in record.files if name.endswith(".tensors"))
    if len(tensors) != 1:
        raise VadModelNotFoundError(f"{runtime} holds {len(tensors)} VAD tensor files, expected one")
    return runtime / tensors[0]


def load_vad(
    vad: SileroVad | str | os.PathLike[str] | None = None,
    *,
    offline: bool | None = None,
    cancel: Cancel = None,
) -> SileroVad:
    """A loaded Silero VAD: ``vad`` itself, the file it names, or the default model.

    Parameters
    ----------
    vad : SileroVad, str, PathLike or None
        A loaded ``SileroVad`` (returned as is, as is any object that is not a
        path); the path of ``silero_vad.onnx`` or of a
        converted runtime file (an ONNX file is converted once and kept in the cache,
        keyed by its SHA-256, see :meth:`SileroVad.load`); None for
        :func:`default_vad_path` (``$ONESPEECH_VAD_MODEL``, else the catalog's
        ``silero-vad``, fetched and verified on first use).
    offline, cancel
        Passed to :func:`default_vad_path` when ``vad`` is None.

    Raises
    ------
    VadModelNotFoundError
        The path names no file, or ``ONESPEECH_VAD_MODEL`` names no file.
    VadModelError
        The file is not a Silero VAD model.
    OfflineModeError, DownloadError, ModelIntegrityError, OperationCancelledError
        As :func:`default_vad_path`.
    """
    from onespeech.features.vad import SileroVad

    if vad is None:
        return SileroVad.load(default_vad_path(offline=offline, cancel=cancel))
    if isinstance(vad, (str, os.PathLike)):
        return SileroVad.load(Path(vad))
    return vad  # already loaded (the caller's object: tests pass stand-ins with the same methods)
