"""The release wheels install and work where no compiler is reachable.

Runs in ``tox -e wheels``, which builds the wheels into ``dist/`` (``python -m
onespeech_tools.wheels``) and points ``ONESPEECH_WHEELS`` at them; elsewhere it skips. A
fresh virtual environment gets all six distributions from those wheels (their
dependencies as binary wheels from the package index) with ``CC=false`` and no C compiler
on ``PATH``, then transcribes a clip with the tiny checkpoints on the wheel's own compiled
kernels, and must give the document this process gives.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

WHEELS = os.environ.get("ONESPEECH_WHEELS")
if not WHEELS:
    pytest.skip("needs the release wheels: run `tox -e wheels` (it builds them and sets ONESPEECH_WHEELS)",
                allow_module_level=True)

DISTRIBUTIONS = ("onespeech_tokenizer", "onespeech_kernels", "onespeech_features", "onespeech_qwen3",
                 "onespeech_align", "onespeech_speech")
COMPILERS = ("cc", "gcc", "c++", "g++", "clang", "x86_64-linux-gnu-gcc")

TRANSCRIBE = """
import json, sys
from onespeech.kernels import cpu
from onespeech.speech import transcribe
variant = cpu.select_variant()
assert variant is not None, "no compiled kernels in the wheel"
clip, asr, aligner, vad = sys.argv[1:5]
document = transcribe(clip, asr, aligner=aligner, vad=vad, language="en", threads=1, max_new_tokens=64,
                      progress=False, speakers=False)
print(json.dumps({"variant": variant.__name__, "document": document.to_dict()}))
"""


def _wheels() -> dict[str, Path]:
    found = {}
    for name in DISTRIBUTIONS:
        matches = sorted(Path(WHEELS).glob(f"{name}-*.whl"))
        assert len(matches) == 1, f"expected one {name} wheel in {WHEELS}, found {[m.name for m in matches]}"
        found[name] = matches[0]
    return found


def test_only_the_kernels_are_binary_and_manylinux() -> None:
    wheels = _wheels()
    for name, wheel in wheels.items():
        if name == "onespeech_kernels":
            assert "manylinux" in wheel.name, wheel.name
        else:
            assert wheel.name.endswith("-py3-none-any.whl"), wheel.name


def test_install_without_a_compiler_and_transcribe(tmp_path: Path, runtime_dirs, vad_path: Path,  # type: ignore[no-untyped-def]
                                                  clips: dict[str, Path]) -> None:
    from onespeech.speech import transcribe

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # PATH holds the new environment only: no cc, gcc or clang can be found by a build
    env = {"PATH": str(venv / "bin"), "HOME": str(tmp_path), "CC": "false", "CXX": "false",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1"}
    for key in ("ONESPEECH_SPEAKER_MODEL", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "PIP_INDEX_URL",
                "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CONFIG_FILE"):
        if key in os.environ:
            env[key] = os.environ[key]
    assert not any(shutil.which(name, path=env["PATH"]) for name in COMPILERS)

    started = time.monotonic()
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--only-binary", ":all:",
                              *map(str, _wheels().values())], env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    assert install.returncode == 0, install.stderr[-4000:]
    print(f"installed the six wheels and their dependencies in {seconds:.1f} s")

    run = subprocess.run([str(python), "-c", TRANSCRIBE, str(clips["flac"]), str(runtime_dirs.asr),
                          str(runtime_dirs.aligner), str(vad_path)], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    answer = json.loads(run.stdout.splitlines()[-1])
    assert answer["variant"].startswith("onespeech.kernels._kernels_")

    here = transcribe(clips["flac"], runtime_dirs.asr, aligner=runtime_dirs.aligner, vad=vad_path, language="en",
                      threads=1, max_new_tokens=64, progress=False, speakers=False)
    assert here.text and answer["document"] == json.loads(json.dumps(here.to_dict()))
