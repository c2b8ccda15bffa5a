"""Exceptions of the OneSpeech runtime (model files, conversion, kernels input).

Each class is a concept of the spec: a damaged model file the user must remove
(`ModelIntegrityError`), a conversion held by another process
(`ConversionInProgressError`, an `OSError` so callers that retry on I/O errors
keep working), and a file in our tensor format that fails validation
(`TensorFileError`, a kind of integrity error).
"""

from __future__ import annotations

import concurrent.futures
import json
import os

__all__ = [
    "CatalogError",
    "ConversionInProgressError",
    "CorruptDownloadError",
    "DownloadError",
    "HFCacheMismatchWarning",
    "JsonNestingError",
    "ModelIntegrityError",
    "ModelKindError",
    "ModelNotInstalledError",
    "ModelRevisionError",
    "ObjectClosedError",
    "OfflineModeError",
    "OperationCancelledError",
    "PublisherFilesMissingError",
    "RemoteFileNotFoundError",
    "TensorFileError",
    "UnknownModelError",
    "UnsafeFileNameError",
]


class ModelIntegrityError(Exception):
    """A model file is missing, truncated, corrupt or does not match its digest.

    Parameters
    ----------
    path : str or os.PathLike
        The file to remove; the next load fetches or converts it again.
    reason : str
        What was wrong (size, digest, header field, ...).
    """

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = os.fspath(path)
        self.reason = reason
        super().__init__(
            f"model file {self.path} failed its integrity check: {reason}; "
            f"remove {self.path} and load again to fetch or convert it afresh"
        )

    def __reduce__(self):  # keep pickling (multiprocessing) working with two args
        return (type(self), (self.path, self.reason))


class TensorFileError(ModelIntegrityError):
    """A runtime tensor file has a bad header, index or size."""


class ConversionInProgressError(OSError):
    """Another process holds the conversion lock of a model directory.

    Parameters
    ----------
    directory : str or os.PathLike
        The model directory being converted.
    holder : str, optional
        Who holds the lock (e.g. ``"pid 1234 on host"``), if known.
    """

    def __init__(self, directory: str | os.PathLike[str], holder: str | None = None) -> None:
        self.directory = os.fspath(directory)
        self.holder = holder
        who = f" ({holder})" if holder else ""
        super().__init__(
            f"another process{who} is converting {self.directory}; "
            "retry after the other process completes"
        )

    def __reduce__(self):
        return (type(self), (self.directory, self.holder))


class OperationCancelledError(concurrent.futures.CancelledError):
    """The caller's cancellation signal was set; the operation stopped without a result.

    The base of every cancellation error in OneSpeech (recognition, alignment,
    downloads), so one ``except`` catches them all; it is also a
    ``concurrent.futures.CancelledError``.
    """


class ObjectClosedError(ValueError):
    """A method was called on an object after its ``close()`` (as with a closed file)."""


class DownloadError(OSError):
    """A download failed (network, timeout, HTTP error) after all retries."""


class RemoteFileNotFoundError(DownloadError):
    """The remote answered 404/410 for a file: wrong endpoint, repository, revision or name."""


class HFCacheMismatchWarning(UserWarning):
    """A file in the Hugging Face cache does not match the catalog's pin; it is not used."""


class OfflineModeError(FileNotFoundError):
    """Offline mode is on and the cache lacks files that would have to be downloaded."""


class UnsafeFileNameError(ValueError):
    """A file name (from a catalog, a remote index or a manifest) could escape its directory."""


class CatalogError(ValueError):
    """A catalog file does not follow the schema (the message names the file and the field)."""


class UnknownModelError(ValueError):
    """A model id that is not in the catalog (the message lists the known ids)."""


class ModelRevisionError(UnknownModelError):
    """A revision of a catalogued model that the catalog does not pin (resolve, verify) or
    that the cache does not hold (remove); the message names the revisions there are."""


class ModelNotInstalledError(FileNotFoundError):
    """A catalogued model with nothing in the cache to verify or remove; the message says
    how to install it (``onespeech models fetch ID``)."""


class PublisherFilesMissingError(FileNotFoundError):
    """A BF16 conversion needs publisher files that are not in the cache (it never downloads)."""


class ModelKindError(ValueError):
    """The model (a directory or a catalog entry) is another kind than the one asked for."""


class CorruptDownloadError(ModelIntegrityError):
    """Downloaded bytes do not match their pin; the partial file was discarded.

    ``path`` is the discarded file; loading again downloads it afresh (if the
    mismatch repeats, the endpoint serves other bytes than the catalog pins).
    """

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = os.fspath(path)
        self.reason = reason
        Exception.__init__(
            self,
            f"the download of {self.path} failed its integrity check: {reason}; the downloaded bytes were "
            "discarded, load again to download the file afresh (if this repeats, the endpoint does not "
            "serve the pinned file)",
        )


class JsonNestingError(json.JSONDecodeError):
    """JSON whose arrays/objects nest deeper than the parser can follow.

    A ``json.JSONDecodeError`` (so a ``ValueError``), so every reader of a model
    file turns it into its own typed error naming the file, as for any other
    malformed JSON; ``pos`` is where the nesting first went that deep.
    """

    def __init__(self, doc: str, pos: int, depth: int) -> None:
        self.depth = depth
        super().__init__(f"arrays/objects are nested {depth} levels deep at this point, deeper than the JSON "
                         "parser follows "
                         "(model files nest fewer than 10)", doc, pos)

    def __reduce__(self):
        return (type(self), (self.doc, self.pos, self.depth))
