"""The Qwen3-ASR oracle with every nn.Linear under torch's dynamic int8 quantization (issue 38's INT8 criterion).

Runs ``oracle_asr.py --dtype int8`` on the same seeded tiny checkpoint, writing
OUT/asr/tiny-int8/: the float32 reference with ``quantize_dynamic`` applied, its
free greedy run and, teacher-forced with the FP32 oracle's ids, its argmax at every
step. Kept as its own oracle so ``tools/oracles/run.py`` runs it after the FP32 one
(name order), whose ids it forces.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

if __name__ == "__main__":
    script = Path(__file__).with_name("oracle_asr.py")
    raise SystemExit(subprocess.run([sys.executable, str(script), *sys.argv[1:], "--dtype", "int8"]).returncode)
