"""INT8 quality: ours against the reference under torch's dynamic int8 quantization (issue 38's criterion).

Observations come from ``tools/oracles/qwen3-asr/oracle_asr_int8.py`` (``tox -e oracle``) in
``$ONESPEECH_ORACLE_DIR/asr/<size>-int8``: the float32 reference with every nn.Linear under
``quantize_dynamic`` (int8), teacher-forced with the FP32 oracle's greedy ids, its argmax
recorded at every step. Ours-INT8 is fed the same ids; each step either agrees with the
FP32 id (an FP32 near-tie agrees either way) or misses. Ours fails only if it misses
significantly more often than the reference's INT8 on the paired steps (one-sided sign
test p < 0.05, ``onespeech_tools.asr_parity.int8_agreement``).

The tiny checkpoint runs in the default suite; 0.6B and 1.7B are the same test, marked
slow, on the oracle's checkpoint (hard links in ``<observations>/asr/<size>-int8/ours``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from onespeech.qwen3.recognizer import Precision, Qwen3Options, Qwen3Recognizer
from onespeech_tools.asr_parity import int8_agreement

SIZES = ["tiny", pytest.param("0.6b", marks=pytest.mark.slow), pytest.param("1.7b", marks=pytest.mark.slow)]


def _index(folder: Path) -> dict:
    path = folder / "cases.json"
    if not path.is_file():
        size = folder.name.removesuffix("-int8")
        flags = f"--size {size} --dtype int8 after the FP32 oracle" if folder.name != size else f"--size {size}"
        pytest.skip(f"needs {path} (run `tox -e oracle`, or tools/oracles/qwen3-asr/oracle_asr.py {flags})")
    return json.loads(path.read_text(encoding="utf-8"))


def _checkpoint(folder: Path, index: dict, shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if index["size"] == "tiny":
        from onespeech_tools.checkpoints import make_checkpoint

        directory = tmp_path_factory.mktemp("parity-tiny-int8")
        make_checkpoint(directory, "tiny", seed=index["seed"], data_dir=shared_data)
    else:
        source = Path(index["checkpoint"]["path"])
        if not (source / "config.json").is_file():
            pytest.skip(f"the oracle's checkpoint {source} is gone; rerun the oracle")
        directory = folder / "ours"  # converted here, never in the oracle's checkpoint
        directory.mkdir(exist_ok=True)
        for item in source.iterdir():
            if item.is_file() and not (directory / item.name).exists():
                try:
                    os.link(item, directory / item.name)
                except OSError:  # another file system
                    shutil.copyfile(item, directory / item.name)
    sizes = {name: info["bytes"] for name, info in index["checkpoint"]["files"].items()}
    assert {name: (directory / name).stat().st_size for name in sizes} == sizes, "not the oracle's checkpoint"
    return directory


@pytest.mark.parametrize("size", SIZES)
def test_int8_misses_fp32_no_more_often_than_the_reference_int8(
    size: str, oracle_observations: Path, shared_data: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    fp32_dir, int8_dir = oracle_observations / "asr" / size, oracle_observations / "asr" / f"{size}-int8"
    _index(fp32_dir)
    index = _index(int8_dir)
    checkpoint = _checkpoint(int8_dir, index, shared_data, tmp_path_factory)
    made: dict[str | None, Qwen3Recognizer] = {}

    def recognizer_for(context: str | None) -> Qwen3Recognizer:
        if context not in made:
            options = Qwen3Options(context=context, threads=2, precision=Precision.INT8, max_new_tokens=index["steps"])
            made[context] = Qwen3Recognizer.load(checkpoint, options)
        return made[context]

    try:
        verdict = int8_agreement(recognizer_for, fp32_dir, int8_dir)
    finally:
        for recognizer in made.values():
            recognizer.close()
    print(f"\nINT8 {size}: {verdict.report()}")
    assert verdict.steps > 0
    assert verdict.ok, verdict.report()
