"""The benchmarks run our packages from this source tree and time our compiled kernels.

`source_paths` names the distributions' source directories (for ``sys.path`` or a
worker's ``PYTHONPATH``); they shadow an installed copy. A tree that was never built
in place has no compiled kernels, and `require_compiled_kernels` refuses to time the
numpy fallback instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def source_paths(*names: str) -> list[str]:
    """``packages/onespeech-<name>/src`` for each name (e.g. "kernels")."""
    return [str(ROOT / "packages" / f"onespeech-{name}" / "src") for name in names]


def require_compiled_kernels() -> None:
    """Exit (status 1, the reason on stderr) when no compiled kernel variant loads."""
    import onespeech.kernels

    if onespeech.kernels.info()["variant"] != "numpy":
        return
    where = Path(onespeech.kernels.__file__).parent
    sys.exit(f"{Path(sys.argv[0]).stem}: no compiled kernels load from {where}, so ours would be the numpy "
             "fallback; build them in place with `pip install -e packages/onespeech-kernels`")
