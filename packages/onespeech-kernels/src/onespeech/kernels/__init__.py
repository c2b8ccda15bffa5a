"""OneSpeech runtime: kernels, tensor files, model store.

`onespeech.kernels.ops` is the math used by model code; `info()` reports which
compiled variant runs it, whether it has OpenMP, the thread count and the BLAS.
"""

from __future__ import annotations

import os
from typing import Any

from .errors import (
    CatalogError,
    ConversionInProgressError,
    CorruptDownloadError,
    DownloadError,
    JsonNestingError,
    ModelIntegrityError,
    ModelKindError,
    ModelNotInstalledError,
    ModelRevisionError,
    ObjectClosedError,
    OfflineModeError,
    OperationCancelledError,
    PublisherFilesMissingError,
    RemoteFileNotFoundError,
    TensorFileError,
    UnknownModelError,
    UnsafeFileNameError,
)
from .precision import Precision
from .threads import OPENBLAS_SPIN_TIMEOUT  # imports no numpy: the setdefault below still precedes it

__version__ = "0.1.0"

__all__ = [
    "CatalogError",
    "ConversionInProgressError",
    "CorruptDownloadError",
    "DownloadError",
    "JsonNestingError",
    "ModelIntegrityError",
    "ModelKindError",
    "ModelNotInstalledError",
    "ModelRevisionError",
    "ObjectClosedError",
    "OfflineModeError",
    "OperationCancelledError",
    "Precision",
    "PublisherFilesMissingError",
    "RemoteFileNotFoundError",
    "TensorFileError",
    "UnknownModelError",
    "UnsafeFileNameError",
    "describe",
    "info",
]

# numpy's OpenBLAS keeps its worker threads spinning for ~2^28 cycles after
# each threaded call (measured here: ~50 ms of a core), which starves our
# OpenMP kernels on small machines; 2^4 makes them sleep at once. OpenBLAS
# reads this when numpy is first imported, so it takes effect here when
# onespeech is imported before numpy (otherwise `threads` restarts the pool
# with it on first use); a value set by the user wins.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", OPENBLAS_SPIN_TIMEOUT)


def info() -> dict[str, Any]:
    """What runs the math here, for logs and benchmark headers.

    Returns
    -------
    dict
        ``variant`` (compiled kernel variant, or "numpy" if none is built),
        ``openmp`` (bool), ``lanes`` (float32 SIMD lanes), ``threads``,
        ``supported`` (variants this CPU runs), ``cpu_features`` (the relevant
        subset), ``blas`` (threadpoolctl's view of numpy's BLAS pool).
    """
    from threadpoolctl import threadpool_info

    from . import cpu, ops
    from .threads import get_threads

    k = ops._kernels
    relevant = {f for need in cpu.VARIANTS.values() for f in need}
    return {
        "variant": k.VARIANT if k is not None else "numpy",
        "openmp": bool(k.OPENMP) if k is not None else False,
        "lanes": int(k.LANES) if k is not None else 1,
        "threads": get_threads(),
        "supported": cpu.supported_variants(),
        "cpu_features": sorted(cpu.cpu_features() & relevant),
        "blas": [
            {key: i.get(key) for key in ("internal_api", "version", "num_threads", "architecture")}
            for i in threadpool_info()
            if i.get("user_api") == "blas"
        ],
    }


def describe() -> str:
    """One line for benchmark headers: ``kernels avx2 | openmp yes | threads 2 | blas openblas 0.3``."""
    i = info()
    blas = ", ".join(f"{b['internal_api']} {b['version']}" for b in i["blas"]) or "none found"
    return f"kernels {i['variant']} | openmp {'yes' if i['openmp'] else 'no'} | threads {i['threads']} | blas {blas}"
