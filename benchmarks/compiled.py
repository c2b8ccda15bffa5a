"""The benchmarks time our compiled kernels; this refuses to time the numpy fallback instead.

The scripts import the packages from the source tree, which shadows an installed copy;
a tree that was never built in place (a non-editable install) has no compiled kernels.
"""

from __future__ import annotations

import sys
from pathlib import Path


def require_compiled_kernels(script: str) -> None:
    """Exit (status 1, the reason on stderr) when no compiled kernel variant loads."""
    import onespeech.kernels

    if onespeech.kernels.info()["variant"] != "numpy":
        return
    where = Path(onespeech.kernels.__file__).parent
    sys.exit(f"{script}: no compiled kernels load from {where}, so ours would be the numpy fallback; "
             "build them in place with `pip install -e packages/onespeech-kernels`")
