"""The build hook's directive set and variant table (the compile itself is exercised by installing)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

HOOK = Path(__file__).resolve().parents[1] / "hatch_build.py"


def _hook():
    spec = importlib.util.spec_from_file_location("onespeech_kernels_hatch_build", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_directives_checks_off_unless_debug(monkeypatch) -> None:
    hook = _hook()
    monkeypatch.delenv("ONESPEECH_KERNELS_DEBUG", raising=False)
    d = hook._directives()
    assert d["language_level"] == 3 and d["cdivision"] is True
    assert not (d["boundscheck"] or d["wraparound"] or d["initializedcheck"])
    monkeypatch.setenv("ONESPEECH_KERNELS_DEBUG", "1")
    d = hook._directives()
    assert d["boundscheck"] and d["wraparound"] and d["initializedcheck"]


def test_no_fast_math_and_generic_has_no_isa_flags() -> None:
    hook = _hook()
    assert hook.X86_VARIANTS["generic"] == []
    flags = [f for fl in hook.X86_VARIANTS.values() for f in fl] + hook.COMMON_FLAGS
    assert not any("fast-math" in f or f in ("-Ofast", "-funsafe-math-optimizations") for f in flags)
    assert "generic" in hook._variants("unix")
