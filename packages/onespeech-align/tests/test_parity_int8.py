"""INT8 aligner quality: slot agreement with FP32 against the reference under torch's dynamic int8 quantization.

``tools/oracles/qwen3-asr/oracle_aligner_int8.py`` (``tox -e oracle``) ran the reference
aligner on the FP32 oracle's checkpoint with every nn.Linear under ``quantize_dynamic``
and recorded its argmax slot at every ``<timestamp>`` position (``aligner/<size>-int8``).
Each slot of ours-INT8 and of that run either agrees with the FP32 reference's slot (an
FP32 near-tie agrees either way) or misses; ours fails only if it misses significantly
more often on the paired slots (one-sided sign test p < 0.05), as for the recognizer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from onespeech.align import Qwen3AlignerOptions, Qwen3ForcedAligner
from onespeech_tools.asr_parity import INT8_SIGNIFICANCE, paired_misses
from onespeech_tools.near_ties import ReferenceSteps, forced_outcomes

SIZES = ["tiny", pytest.param("0.6b", marks=[
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("ONESPEECH_FULL_SIZE") != "1",
                       reason="full-size run (several GiB): set ONESPEECH_FULL_SIZE=1 and hold the machine lock"),
])]  # fmt: skip


def _cases(folder: Path) -> list[dict]:
    if not (folder / "cases.json").is_file():
        pytest.skip(f"needs {folder}/cases.json (run `tox -e oracle`, or tools/oracles/qwen3-asr/oracle_aligner.py "
                    f"--int8 --size {folder.name.removesuffix('-int8')} after the FP32 run)")  # fmt: skip
    return list(json.loads((folder / "cases.json").read_text(encoding="utf-8")))


@pytest.mark.parametrize("size", SIZES)
def test_int8_slots_miss_fp32_no_more_often_than_the_reference_int8(oracle_observations: Path, size: str) -> None:
    fp32_dir, int8_dir = oracle_observations / "aligner" / size, oracle_observations / "aligner" / f"{size}-int8"
    fp32_cases = {c["name"]: c for c in _cases(fp32_dir)}
    cases = [c for c in _cases(int8_dir) if c["name"] in fp32_cases]
    named = fp32_dir / "checkpoint.txt"
    checkpoint = Path(named.read_text(encoding="utf-8").strip()) if named.is_file() else fp32_dir / "checkpoint"
    misses: list[tuple[str, str, int, float]] = []
    slots = 0
    rows = []
    with Qwen3ForcedAligner.load(checkpoint, Qwen3AlignerOptions(precision="int8", threads=2)) as aligner:
        for case in cases:
            fp32 = dict(np.load(fp32_dir / f"{case['name']}.npz"))
            int8 = dict(np.load(int8_dir / f"{case['name']}.npz"))
            got = aligner.timestamp_logits(fp32["pcm"], case["units"])
            np.testing.assert_array_equal(got.input_ids, fp32["input_ids"], err_msg=case["name"])
            reference = ReferenceSteps.from_observation(fp32, "slot")
            runs = {"ours": got.logits.argmax(axis=-1).tolist(), "reference": int8["slots"].tolist()}
            for label, choices in runs.items():
                outcomes = forced_outcomes(f"{case['name']} ({label}-INT8)", reference, choices)
                misses.extend((case["name"], label, i, reference.margin[i]) for i, o in enumerate(outcomes)
                              if isinstance(o, str))  # fmt: skip
            error = {label: float(np.mean(np.abs(logits - fp32["timestamp_logits"])))
                     for label, logits in (("ours", got.logits), ("reference", int8["timestamp_logits"]))}  # fmt: skip
            rows.append(f"{case['name']}: {len(reference.ids)} slots, mean |logits - FP32| ours {error['ours']:.3e}, "
                        f"reference {error['reference']:.3e}")  # fmt: skip
            slots += len(reference.ids)
    paired = paired_misses(misses)
    rows.append(f"{slots} slots; missed by ours alone {paired.ours_only}, by the reference's INT8 alone "
                f"{paired.reference_only}, by both {paired.both}; one-sided sign test p = {paired.p_ours_worse:.3f}")
    print("\n" + "\n".join(rows))
    assert slots > 0
    assert paired.p_ours_worse >= INT8_SIGNIFICANCE, "\n".join(rows)
