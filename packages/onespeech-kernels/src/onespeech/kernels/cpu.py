"""CPU features and the choice of compiled kernel variant.

numpy already probes the CPU (and the OS's support for wide registers) at
import; its table is private (`numpy._core._multiarray_umath.__cpu_features__`),
so it is wrapped here with a fallback to /proc/cpuinfo and then to "nothing
known", which selects the portable generic kernels.
"""

from __future__ import annotations

import importlib
import os
import warnings
from functools import cache
from types import ModuleType

__all__ = ["ENV_VAR", "VARIANTS", "cpu_features", "load_variant", "select_variant", "supported_variants"]

#: Environment variable naming the kernel variant to load instead of the best one this CPU supports.
ENV_VAR = "ONESPEECH_KERNELS"
#: Kernel variant -> the CPU features it needs, all of them (numpy's names); best first.
VARIANTS: dict[str, tuple[str, ...]] = {
    # avx512bf16 plus AMX tiles, which only the bf16 x bf16 GEMM (`gemm_bf16amx`) uses
    "amx": ("AMX_BF16", "AMX_TILE", "AVX512BF16", "AVX512VNNI", "AVX512F", "AVX512BW", "AVX512VL", "AVX2", "FMA3"),
    # avx512 plus VDPBF16PS, which only the bf16 x bf16 GEMM (`gemm_bf16dp`) uses, and VPDPBUSD
    # for the int8 products (every CPU with AVX512_BF16 has AVX512_VNNI)
    "avx512bf16": ("AVX512BF16", "AVX512VNNI", "AVX512F", "AVX512BW", "AVX512VL", "AVX2", "FMA3"),
    "avx512": ("AVX512F", "AVX512BW", "AVX512VL", "AVX2", "FMA3"),
    "avx2": ("AVX2", "FMA3", "F16C"),
    "generic": (),
}
_CPUINFO_NAMES = {"avx512f": "AVX512F", "avx512bw": "AVX512BW", "avx512vl": "AVX512VL", "avx2": "AVX2",
                  "fma": "FMA3", "f16c": "F16C", "avx512_bf16": "AVX512BF16", "avx512_vnni": "AVX512VNNI"}
# numpy's table has no AMX; Linux lists it (and the tiles' OS state is asked for by the amx build itself)
_AMX_NAMES = {"amx_bf16": "AMX_BF16", "amx_tile": "AMX_TILE"}


def _cpuinfo_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@cache
def cpu_features() -> frozenset[str]:
    """Names (numpy's spelling, e.g. "AVX2"; "AMX_BF16" from Linux) of the features this CPU and OS support."""
    flags = _cpuinfo_flags()
    amx = {v for k, v in _AMX_NAMES.items() if k in flags}
    for module in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:
            table = importlib.import_module(module).__cpu_features__
        except (ImportError, AttributeError):
            continue
        return frozenset(name for name, on in table.items() if on) | amx
    return frozenset(v for k, v in _CPUINFO_NAMES.items() if k in flags) | amx


def supported_variants() -> list[str]:
    """Variants this CPU can run, best first (always ends with "generic")."""
    have = cpu_features()
    return [name for name, need in VARIANTS.items() if all(f in have for f in need)]


# libgomp's idle workers spin for GOMP_SPINCOUNT iterations (300000 by default,
# milliseconds) before sleeping; numpy's OpenBLAS keeps its own pool, so a long
# spin after each of our regions steals a core from the next BLAS call on a
# 2-core machine. A short spin still covers the microseconds between decode
# kernels. Read by libgomp when it loads, i.e. before our first import; a
# value set by the user wins.
_GOMP_SPINCOUNT = "20000"


def load_variant(name: str) -> ModuleType | None:
    """Import the compiled kernels of one variant; None if it was not built."""
    if name not in VARIANTS:
        raise ValueError(f"unknown kernel variant {name!r}; known: {', '.join(VARIANTS)}")
    os.environ.setdefault("GOMP_SPINCOUNT", _GOMP_SPINCOUNT)
    try:
        return importlib.import_module(f"onespeech.kernels._kernels_{name}")
    except ImportError:
        return None


def select_variant() -> ModuleType | None:
    """The compiled kernels to use: $ONESPEECH_KERNELS if set (e.g. "generic"), else the best built.

    Returns None when no compiled variant is importable (ops then uses numpy).
    """
    forced = os.environ.get(ENV_VAR, "").strip().lower()
    supported = supported_variants()
    if forced and forced != "auto":
        if forced not in VARIANTS:
            warnings.warn(f"{ENV_VAR}={forced!r} is not a kernel variant ({', '.join(VARIANTS)}, auto); "
                          "using the best supported one", stacklevel=2)
        elif forced not in supported:
            warnings.warn(f"{ENV_VAR}={forced!r} is not supported by this CPU; using the best supported one",
                          stacklevel=2)
        else:
            # the forced variant, then (if this process cannot run its build) the ones below it
            supported = supported[supported.index(forced):]
    for name in supported:
        module = load_variant(name)
        if module is None:
            if name == forced:
                break  # a forced variant that was not built: no compiled kernels
            continue
        if module.RUNNABLE:
            return module
        if name == forced:
            warnings.warn(f"{ENV_VAR}={forced}: this process cannot run that build here (for amx: the OS did not "
                          "grant this process the AMX tile state); using the best other variant", stacklevel=2)
    return None
