"""The Qwen3-ASR oracle with the reference computing in bfloat16 (issue 5 comparisons).

Runs ``oracle_asr.py --dtype bfloat16`` on the same seeded tiny checkpoint, writing
OUT/asr/tiny-bf16/; kept as its own oracle so ``tools/oracles/run.py`` runs both.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

if __name__ == "__main__":
    script = Path(__file__).with_name("oracle_asr.py")
    raise SystemExit(subprocess.run([sys.executable, str(script), *sys.argv[1:], "--dtype", "bfloat16"]).returncode)
