"""The forced-aligner oracle with every nn.Linear under torch's dynamic int8 quantization (issue 38's INT8 criterion).

Runs ``oracle_aligner.py --int8`` on the tiny checkpoint the FP32 aligner oracle
generated (name order runs that one first), writing OUT/aligner/tiny-int8/.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

if __name__ == "__main__":
    script = Path(__file__).with_name("oracle_aligner.py")
    raise SystemExit(subprocess.run([sys.executable, str(script), *sys.argv[1:], "--int8"]).returncode)
