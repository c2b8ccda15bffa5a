"""Hatch build hook: compile the Cython kernels once per instruction set, in place.

`_kernels.pyx` is copied to `_kernels_<variant>.pyx` for each variant this
platform can target (x86-64: generic, avx2, avx512, avx512bf16 where the
compiler knows AVX512_BF16, and amx where it knows AMX-BF16; elsewhere:
generic), each
copy is cythonized with one directive set (sklearn's: language_level 3,
boundscheck / wraparound / initializedcheck off unless ONESPEECH_KERNELS_DEBUG=1,
cdivision on) and compiled with its ISA flags and moved next to the sources (atomically), so editable
installs import them from the source tree and wheels ship them as artifacts.
OpenMP is probed with a tiny program first; without it the kernels build and
run sequentially, with a loud warning. No -ffast-math: parity needs IEEE order.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PACKAGE = "onespeech.kernels"
SRC = Path("src/onespeech/kernels")
TEMPLATE = "_kernels.pyx"

# ISA flags per variant (GCC/Clang); the C header derives its vector width
# from the macros these flags define
X86_VARIANTS = {
    "generic": [],
    "avx2": ["-mavx2", "-mfma", "-mf16c"],
    "avx512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx2", "-mfma", "-mf16c"],
    # avx512 plus VDPBF16PS for the bf16 x bf16 GEMM and VPDPBUSD for the int8 products (every CPU with
    # AVX512_BF16 has AVX512_VNNI); built only where the compiler knows them
    "avx512bf16": ["-mavx512bf16", "-mavx512vnni", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx2", "-mfma",
                   "-mf16c"],
    # avx512bf16 plus AMX tiles (TDPBF16PS) for the same GEMM; built only where the compiler knows them
    "amx": ["-mamx-tile", "-mamx-bf16", "-mavx512bf16", "-mavx512vnni", "-mavx512f", "-mavx512bw", "-mavx512vl",
            "-mavx2", "-mfma", "-mf16c"],
}
# a variant is built only if this compiles with its flags (older compilers lack -mavx512bf16, -mamx-bf16)
ISA_PROBE = {
    "avx512bf16": "#include <immintrin.h>\n"
                  "__m512 f(__m512 a, __m512i b) { return _mm512_dpbf16_ps(a, (__m512bh)b, (__m512bh)b); }\n"
                  "__m512i g(__m512i a, __m512i b) { return _mm512_dpbusd_epi32(a, a, b); }\n",
    "amx": "#include <immintrin.h>\nvoid f(void) { _tile_zero(0); _tile_dpbf16ps(0, 1, 2); _tile_release(); }\n",
}
# -fno-math-errno lets sqrtf compile to one instruction; results are unchanged
COMMON_FLAGS = ["-fno-math-errno"]

OPENMP_PROBE = r"""
#include <omp.h>
#include <stdio.h>
int main(void) {
    int n = 0;
    #pragma omp parallel reduction(+:n)
    n += 1;
    printf("%d\n", n > 0 && omp_get_max_threads() > 0);
    return 0;
}
"""


def _directives() -> dict[str, Any]:
    debug = os.environ.get("ONESPEECH_KERNELS_DEBUG", "") == "1"
    return {
        "language_level": 3,
        "boundscheck": debug,
        "wraparound": debug,
        "initializedcheck": debug,
        "cdivision": True,
        "embedsignature": True,
    }


def _new_compiler():
    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.sysconfig import customize_compiler

    cc = new_compiler()
    customize_compiler(cc)
    return cc


def _openmp_flags(compiler_type: str) -> list[str]:
    """Compile and link a tiny OpenMP program; return the flags that worked, else []."""
    flag = "/openmp" if compiler_type == "msvc" else "-fopenmp"
    if os.environ.get("ONESPEECH_KERNELS_NO_OPENMP", "") == "1":
        return []
    cc = _new_compiler()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe_openmp.c"
        src.write_text(OPENMP_PROBE)
        try:
            objs = cc.compile([str(src)], output_dir=tmp, extra_postargs=[flag])
            cc.link_executable(objs, "probe_openmp", output_dir=tmp, extra_postargs=[flag])
        except Exception as e:  # any compiler/linker failure means "no OpenMP"
            message = (
                f"\n{'*' * 72}\nonespeech-kernels: OpenMP is NOT available ({flag} failed: {e}).\n"
                "The kernels will build and run on ONE thread; install an OpenMP runtime\n"
                f"(e.g. libgomp / libomp) and reinstall for multi-threaded kernels.\n{'*' * 72}\n"
            )
            warnings.warn(message, stacklevel=1)
            print(message, file=sys.stderr)
            return []
    return [flag]


def _compiles(source: str, flags: list[str]) -> bool:
    """Whether the compiler builds ``source`` with ``flags`` (an instruction-set probe)."""
    cc = _new_compiler()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe_isa.c"
        src.write_text(source)
        try:
            cc.compile([str(src)], output_dir=tmp, extra_postargs=flags)
        except Exception:  # any compiler failure means "not supported"
            return False
    return True


def _variants(compiler_type: str) -> dict[str, list[str]]:
    machine = platform.machine().lower()
    if compiler_type != "msvc" and machine in ("x86_64", "amd64", "i686", "x86"):
        variants = {}
        for name, flags in X86_VARIANTS.items():
            if name in ISA_PROBE and not _compiles(ISA_PROBE[name], flags):
                print(f"onespeech-kernels: the compiler cannot build {name} ({' '.join(flags)}); skipped",
                      file=sys.stderr)
                continue
            variants[name] = flags
        return variants
    return {"generic": []}


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def build_extensions(root: Path) -> list[Path]:
    """Cythonize and compile every variant in place; return the built files."""
    from Cython.Build import cythonize
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    compiler_type = _new_compiler().compiler_type
    omp = _openmp_flags(compiler_type)
    src_dir = root / SRC
    template = (src_dir / TEMPLATE).read_text()
    common = [] if compiler_type == "msvc" else COMMON_FLAGS
    extensions = []
    for variant, isa in _variants(compiler_type).items():
        pyx = src_dir / f"_kernels_{variant}.pyx"
        _write_if_changed(pyx, f"# generated from {TEMPLATE} by hatch_build.py; edit the template\n" + template)
        extensions.append(
            Extension(
                f"{PACKAGE}._kernels_{variant}",
                [str(pyx.relative_to(root))],
                include_dirs=[str(SRC)],
                depends=[str(SRC / name) for name in ("_kernels_impl.h", "_gemm_impl.h", "_bf16dp_impl.h",
                                                     "_bf16amx_impl.h", "_int8_impl.h", "_batch_gemv_impl.h",
                                                     TEMPLATE)],
                extra_compile_args=common + isa + omp,
                extra_link_args=omp,
            )
        )
    modules = cythonize(extensions, compiler_directives=_directives(), quiet=True)
    dist = Distribution({"ext_modules": modules, "package_dir": {"": "src"}, "script_name": "hatch_build.py"})
    cmd = build_ext(dist)
    cmd.build_temp = str(root / "build" / "temp")
    cmd.build_lib = str(root / "build" / "lib")
    cmd.ensure_finalized()
    cmd.run()
    built = []
    for ext in modules:
        # install next to the sources by rename, never by rewriting in place:
        # processes that have the old library mapped keep their copy intact
        name = cmd.get_ext_filename(ext.name)
        target = root / "src" / name
        tmp = target.with_name(target.name + ".tmp")
        shutil.copyfile(root / "build" / "lib" / name, tmp)
        os.replace(tmp, target)
        built.append(target)
    return built


class CustomBuildHook(BuildHookInterface):
    """Build the kernels before hatchling collects the files (wheel and editable)."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        root = Path(self.root)
        cwd = os.getcwd()
        os.chdir(root)  # extension sources are given relative to the project root
        try:
            built = build_extensions(root)
        finally:
            os.chdir(cwd)
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        build_data["artifacts"].extend(str(p.relative_to(root)).replace(os.sep, "/") for p in built)

    def clean(self, versions: list[str]) -> None:
        src_dir = Path(self.root) / SRC
        for pattern in ("_kernels_*.pyx", "_kernels_*.c", "_kernels_*.so", "_kernels_*.pyd"):
            for p in src_dir.glob(pattern):
                p.unlink()
        shutil.rmtree(Path(self.root) / "build" / "temp", ignore_errors=True)
