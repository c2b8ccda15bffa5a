"""Run the benchmarks: ``python benchmarks/run.py [name ...]``.

Each ``benchmarks/bench_<name>.py`` is a script that measures ours and the anchor
in the same run and prints one table per configuration. Benchmarks are never tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SKIP_STATUS = 77  # onespeech_tools.data.SKIP_STATUS: the shared data is not on this machine


def main(argv: list[str]) -> int:
    scripts = sorted(HERE.glob("bench_*.py"))
    if argv:
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in argv]
    status = 0
    for script in scripts:
        print(f"== benchmark {script.stem.removeprefix('bench_')}", flush=True)
        returncode = subprocess.run([sys.executable, str(script)]).returncode
        if returncode != SKIP_STATUS:
            status |= returncode
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
