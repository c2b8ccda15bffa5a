"""Build the release wheels: ``python -m onespeech_tools.wheels --out dist`` (from the checkout's root).

onespeech-kernels becomes one binary wheel holding every kernel variant this compiler can
build (the package picks one at import); on Linux it is repaired by ``auditwheel`` to a
manylinux tag, which also copies the OpenMP runtime into the wheel so that it installs
where none is present. The other five distributions are pure Python wheels. Each wheel is
built from the source tree in an isolated build environment (pip's default), so what ends
up in ``--out`` is what a release uploads.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PURE = ("onespeech-tokenizer", "onespeech-features", "onespeech-qwen3", "onespeech-align", "onespeech-speech")
BINARY = "onespeech-kernels"


def build_wheel(project: Path, out: Path) -> Path:
    """Build one distribution's wheel into ``out``; return its path."""
    before = set(out.glob("*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
                    "-w", str(out), str(project)], check=True)
    built = sorted(set(out.glob("*.whl")) - before)
    if len(built) != 1:
        raise RuntimeError(f"building {project.name} gave {len(built)} new wheels in {out}, expected one")
    return built[0]


def repair(wheel: Path, out: Path) -> Path:
    """The manylinux wheel of a linux_* binary wheel (auditwheel), or the wheel itself elsewhere."""
    if not sys.platform.startswith("linux"):
        return Path(shutil.copy2(wheel, out))
    before = set(out.glob("*.whl"))
    subprocess.run([sys.executable, "-m", "auditwheel", "repair", "--wheel-dir", str(out), str(wheel)], check=True)
    repaired = sorted(set(out.glob("*.whl")) - before)
    if len(repaired) != 1 or "manylinux" not in repaired[0].name:
        raise RuntimeError(f"auditwheel gave {[p.name for p in repaired]} for {wheel.name}, expected one manylinux wheel")
    return repaired[0]


def build_all(out: Path, root: Path) -> list[Path]:
    """Every distribution's release wheel in ``out`` (emptied of older onespeech wheels first)."""
    missing = [name for name in (*PURE, BINARY) if not (root / "packages" / name / "pyproject.toml").is_file()]
    if missing:
        raise FileNotFoundError(f"{root} is not a OneSpeech checkout: no packages/{missing[0]}/pyproject.toml")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("onespeech_*.whl"):
        old.unlink()
    wheels = [build_wheel(root / "packages" / name, out) for name in PURE]
    with tempfile.TemporaryDirectory() as raw:
        wheels.append(repair(build_wheel(root / "packages" / BINARY, Path(raw)), out))
    return wheels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m onespeech_tools.wheels", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the checkout (default: the current folder)")
    parser.add_argument("--out", type=Path, default=Path("dist"), help="where the wheels go (default dist/)")
    args = parser.parse_args(argv)
    for wheel in build_all(args.out.resolve(), args.root.resolve()):
        print(wheel.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
