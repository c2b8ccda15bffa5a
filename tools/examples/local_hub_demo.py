"""The model lifecycle end to end against a Hub served from 127.0.0.1.

The catalogued Qwen models pin the published weights' digests, which cannot be
downloaded here, so this demo serves a generated tiny checkpoint under a catalog
entry of its own (``Demo/Qwen3-ASR-tiny``) and drives the real commands on a fresh
cache, printing what each one prints:

    probe (fresh cache) -> qwen-fetch --convert (download, verify, convert, install)
    -> probe -> greedy ids from the installed FP32 files -> a BF16 load (converts
    from the cached publisher files, never downloads) -> probe

    python tools/examples/local_hub_demo.py [--keep DIR]

Needs the shared data (tokenizer files, a clip) found as the tests find it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO, REVISION = "Demo/Qwen3-ASR-tiny", "d" * 40


def show(title: str, argv: list[str], env: dict[str, str]) -> None:
    print(f"\n$ {' '.join(argv)}    # {title}", flush=True)
    subprocess.run(argv, env=env, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="work here and keep the files (default: a temporary folder)")
    args = parser.parse_args()

    from onespeech_tools.catalogs import write_entry
    from onespeech_tools.checkpoints import make_checkpoint
    from onespeech_tools.data import shared_data_or_skip
    from onespeech_tools.hub_server import HubServer

    data = shared_data_or_skip("the tokenizer files and a speech clip")

    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        repo, catalog, home = work / "published", work / "catalog", work / "home"
        make_checkpoint(repo, "tiny", seed=0, data_dir=data)
        write_entry(catalog, repo, REPO, REVISION)
        server = HubServer().start()
        server.add_repo(REPO, REVISION, repo)
        env = {**os.environ, "ONESPEECH_HOME": str(home)}
        for var in ("ONESPEECH_OFFLINE", "HF_HUB_OFFLINE", "HF_ENDPOINT"):
            env.pop(var, None)
        cli = [sys.executable, "-m", "onespeech_tools.cli"]
        try:
            show("a fresh cache", [*cli, "probe", "--catalog-dir", str(catalog)], env)
            show("download, verify, convert, install", [*cli, "qwen-fetch", REPO, "--catalog-dir", str(catalog),
                 "--endpoint", server.endpoint, "--convert", "-q"], env)  # fmt: skip
            show("after the fetch", [*cli, "probe", "--catalog-dir", str(catalog), "--verify"], env)
        finally:
            server.stop()
        print(f"\nserver log: {len(server.requests)} requests, e.g. {server.requests[0].path}")
        clip = data / "audio" / "jfk.flac"
        for precision in ("FLOAT32", "BFLOAT16"):
            code = (
                "from onespeech.features import load_audio; "
                "from onespeech.qwen3 import Precision, Qwen3Recognizer, Qwen3Options; "
                "from onespeech.kernels.resolve import resolve; "
                f"d = resolve({REPO!r}, Precision.{precision}, catalog_dir={str(catalog)!r}, offline=True); "
                f"r = Qwen3Recognizer.load(d, Qwen3Options(precision=Precision.{precision})); "
                f"print('runtime:', d); print('ids:', r.generate(load_audio({str(clip)!r}), 'en', 8))"
            )
            show(f"{precision}, offline (the server is gone; random weights: the ids mean nothing)",
                 [sys.executable, "-c", code], env)  # fmt: skip
        show("after loading BF16", [*cli, "probe", "--catalog-dir", str(catalog)], env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
