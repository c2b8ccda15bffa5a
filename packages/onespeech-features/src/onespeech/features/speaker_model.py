"""Where the speaker encoder comes from: the catalog's pinned wheel, fetched on first use.

:func:`speaker_model_path` returns a runtime tensor file of the GE2E encoder, taking in
order

1. the file named by ``ONESPEECH_SPEAKER_MODEL`` (a Resemblyzer ``pretrained.pt``, read
   with the restricted reader and converted once into ``<cache>/speakers/user-<digest>``,
   or an already converted tensor file; a file the user chose, so not held to the pin);
2. the catalog entry ``resemblyzer`` through the kernels' one install path
   (:func:`onespeech.kernels.resolve.resolve`, kind ``speaker``): on first use the
   pinned wheel is downloaded (``ONESPEECH_PYPI_FILES`` names a mirror of PyPI's file
   host), its member ``resemblyzer/pretrained.pt`` is verified against its pin,
   converted, checked against the catalog's runtime pin and installed under
   ``<cache>/models/pypi--Resemblyzer/0.1.4/runtime``; later calls verify the install
   and touch no network.
"""

from __future__ import annotations

import os
from pathlib import Path

from onespeech.features import models as _models  # noqa: F401 - registers the speaker kind
from onespeech.features.errors import SpeakerModelNotFoundError
from onespeech.features.resemblyzer_convert import RUNTIME_NAME, convert_resemblyzer
from onespeech.features.speaker_encoder import SpeakerEncoder
from onespeech.kernels.catalog import get_entry
from onespeech.kernels.errors import OfflineModeError
from onespeech.kernels.fetch import FetchOptions
from onespeech.kernels.resolve import convert_directory, install_record_name, is_installed, resolve
from onespeech.kernels.store import cache_root, sha256_file
from onespeech.kernels.wheel import PYPI_FILES_ENV, wheel_url

__all__ = [
    "DEFAULT_SPEAKER_MODEL",
    "PYPI_FILES_ENV",
    "SPEAKER_MODEL_ENV",
    "SpeakerModelNotFoundError",
    "load_speaker_encoder",
    "speaker_model_path",
    "wheel_url",
]

#: Environment variable naming a local Resemblyzer ``pretrained.pt`` to use instead of the cached model.
SPEAKER_MODEL_ENV = "ONESPEECH_SPEAKER_MODEL"
#: Catalog name of the speaker encoder used when none is given.
DEFAULT_SPEAKER_MODEL = "resemblyzer"


def speaker_model_path(
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    catalog_dir: str | os.PathLike[str] | None = None,
    fetch_options: FetchOptions | None = None,
) -> Path:
    """A verified runtime tensor file of the speaker encoder (see the module docstring).

    Raises
    ------
    SpeakerModelNotFoundError
        ``ONESPEECH_SPEAKER_MODEL`` names no file.
    OfflineModeError
        Offline mode and the encoder is not in the cache.
    ModelIntegrityError
        The wheel, its member or the converted file does not match its pin (names the file).
    DownloadError, ConversionInProgressError
        The download failed; another process is converting (retry).
    TorchCheckpointError
        The checkpoint is hostile or malformed.
    """
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    env = os.environ.get(SPEAKER_MODEL_ENV)
    if env:
        path = Path(env)
        if not path.is_file():
            raise SpeakerModelNotFoundError(
                f"{SPEAKER_MODEL_ENV}={env!r} is not a file; point it at Resemblyzer's pretrained.pt"
            )
        return _converted_user_file(path, root)
    entry = get_entry(DEFAULT_SPEAKER_MODEL, catalog_dir)
    try:
        runtime = resolve(entry, "fp32", kind="speaker", cache_dir=root, fetch_options=fetch_options or FetchOptions())
    except OfflineModeError as e:
        raise OfflineModeError(f"{e}; or set {SPEAKER_MODEL_ENV} to a Resemblyzer pretrained.pt") from e
    return runtime / RUNTIME_NAME


def load_speaker_encoder(
    *, threads: int | None = None, cache_dir: str | os.PathLike[str] | None = None
) -> SpeakerEncoder:
    """The GE2E encoder from :func:`speaker_model_path`."""
    return SpeakerEncoder.load(speaker_model_path(cache_dir=cache_dir), threads=threads)


def _converted_user_file(path: Path, root: Path) -> Path:
    """A user's ``pretrained.pt`` converted once into ``<cache>/speakers/user-<sha256[:16]>``,
    installed and verified at every load like every runtime file."""
    with open(path, "rb") as f:
        if f.read(8) == b"OSTENSR\x00":
            return path
    target = root / "speakers" / f"user-{sha256_file(path).sha256[:16]}"
    if not is_installed(target, install_record_name("fp32")):

        def convert(publisher: Path, staging: Path, precision: str, revision: str | None) -> None:
            convert_resemblyzer(path, staging / RUNTIME_NAME)

        convert_directory(path.parent, target, "fp32", kind="speaker", converter=convert)
    return target / RUNTIME_NAME
