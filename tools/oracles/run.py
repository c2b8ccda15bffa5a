"""Run every reference oracle: ``python tools/oracles/run.py --out DIR``.

Each oracle is a ``tools/oracles/<group>/oracle_<name>.py`` script that takes
``--out DIR`` and writes its observations under ``DIR/<name>/``; an oracle that
compares against a committed fixture exits non-zero on drift, and one without the
shared data exits 77 (skipped; the tests that need its observations then skip,
naming them). This runs them in name order and fails if any fails.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SKIP_STATUS = 77  # onespeech_tools.data.SKIP_STATUS; this runner imports nothing of ours


def _name(script: Path) -> str:
    return script.stem.removeprefix("oracle_")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path, help="folder for observations")
    parser.add_argument("names", nargs="*", help="run only these oracles")
    args = parser.parse_args()
    scripts = sorted(HERE.glob("*/oracle_*.py"), key=lambda s: s.name)
    if args.names:
        scripts = [s for s in scripts if _name(s) in args.names]
    failed, skipped = [], []
    for script in scripts:
        print(f"== oracle {_name(script)}", flush=True)
        result = subprocess.run([sys.executable, str(script), "--out", str(args.out)])
        if result.returncode == SKIP_STATUS:
            skipped.append(_name(script))
        elif result.returncode != 0:
            failed.append(_name(script))
    if failed:
        print(f"oracles failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    if skipped:
        print(f"oracles skipped (no shared data): {', '.join(skipped)}")
    print(f"{len(scripts) - len(skipped)} oracles ran; observations in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
