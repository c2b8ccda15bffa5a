"""The portable (generic) variant on aarch64: the build hook builds it alone, with no x86 flags;
it compiles with Debian's cross compiler; and ``cpu.py`` picks it from an aarch64 CPU's features."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from onespeech.kernels import cpu

PACKAGE = Path(__file__).resolve().parents[1]
HOOK = PACKAGE / "hatch_build.py"
SRC = PACKAGE / "src" / "onespeech" / "kernels"
CROSS_GCC = "aarch64-linux-gnu-gcc"
# what numpy's table reports on an aarch64 CPU with the usual extensions
AARCH64_FEATURES = frozenset({"NEON", "NEON_FP16", "NEON_VFPV4", "ASIMD", "FPHP", "ASIMDHP", "ASIMDDP", "ASIMDFHM"})
X86_FLAG_PREFIXES = ("-mavx", "-mfma", "-mf16c", "-mamx", "-msse", "-march=x86", "-mtune=x86")


def _hook():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("onespeech_kernels_hatch_build_portable", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_hook_builds_only_the_generic_variant_on_aarch64(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _hook()
    monkeypatch.setattr(hook.platform, "machine", lambda: "aarch64")
    assert hook._variants("unix") == {"generic": []}
    assert not any(flag.startswith(X86_FLAG_PREFIXES) for flag in hook.COMMON_FLAGS)


def test_cpu_picks_generic_from_aarch64_features(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu, "cpu_features", lambda: AARCH64_FEATURES)
    monkeypatch.delenv(cpu.ENV_VAR, raising=False)
    assert cpu.supported_variants() == ["generic"]
    loaded: list[str] = []

    class Generic:
        RUNNABLE = True

    def load(name: str) -> object | None:
        loaded.append(name)
        return Generic() if name == "generic" else None

    monkeypatch.setattr(cpu, "load_variant", load)
    assert isinstance(cpu.select_variant(), Generic)
    assert loaded == ["generic"]  # no x86 variant is even tried


@pytest.mark.skipif(shutil.which(CROSS_GCC) is None,
                    reason=f"needs Debian's cross compiler ({CROSS_GCC}, package gcc-aarch64-linux-gnu; "
                           ".ci/run installs it)")
def test_generic_variant_compiles_for_aarch64(tmp_path: Path) -> None:
    cython = pytest.importorskip("Cython.Build", reason="needs Cython to translate the kernels")
    hook = _hook()
    pyx = tmp_path / "_kernels_generic.pyx"
    pyx.write_text((SRC / hook.TEMPLATE).read_text())
    for header in SRC.glob("_*_impl.h"):
        shutil.copy(header, tmp_path)
    cython.cythonize([str(pyx)], compiler_directives=hook._directives(), quiet=True)
    obj = tmp_path / "kernels.o"
    # the flags the hook gives the generic variant on aarch64 (the common ones and OpenMP, no ISA flags);
    # -O0: this checks that it compiles, and optimizing the whole module would take minutes
    command = [CROSS_GCC, "-c", "-O0", "-fPIC", *hook.COMMON_FLAGS, "-fopenmp",
               f"-I{sysconfig.get_paths()['include']}", f"-I{tmp_path}", str(tmp_path / "_kernels_generic.c"),
               "-o", str(obj)]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    header = obj.read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64
