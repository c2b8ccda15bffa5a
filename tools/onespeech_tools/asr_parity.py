"""One Qwen3-ASR parity comparison: our recognizer on an oracle case, judged by the near-tie rule.

Shared by the parity tests (packages/onespeech-qwen3/tests/test_parity_tiny.py) and
``qwen-reproduce``. An oracle case (``tools/oracles/qwen3-asr/oracle_asr.py``) records
up to three greedy runs of the reference, each with its per-step top-2 ids, margins and
largest absolute logits; ``RUNS`` names them and the arrays that hold them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from onespeech_tools.near_ties import ReferenceSteps, Tie, Verdict, compare_greedy, forced_outcomes

if TYPE_CHECKING:
    from onespeech.qwen3.recognizer import ChunkRecognition, Qwen3Recognizer

EOS_IDS = (151643, 151645)

# run -> (its greedy ids, the prefix of its per-step arrays, the encoder attention it used)
RUNS = {
    "full": ("tokens", "step", "full"),
    "min_new": ("tokens_min_new", "min_new_step", "full"),  # EOS masked until `steps` ids (after an early end)
    "windowed": ("windowed_tokens", "windowed_step", "windowed"),  # the 104-token block-diagonal encoder mask
}


def pcm_and_mel(arrays: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The PCM the reference saw and our log-mel of it, as one input of any length (the
    reference does not chunk its 60 s case)."""
    from onespeech.features.mel import log_mel

    pcm = np.ascontiguousarray(arrays["pcm"], dtype=np.float32)
    return pcm, log_mel(pcm, max_seconds=max(30.0, pcm.shape[0] / 16000 + 1))


def observed_runs(arrays: Mapping[str, np.ndarray]) -> list[str]:
    """The runs an oracle case recorded, in ``RUNS`` order."""
    return [run for run, (tokens, _, _) in RUNS.items() if tokens in arrays]


@dataclass(frozen=True)
class CaseRun:
    """Our recognition of one case's run and its verdict under the near-tie rule."""

    result: ChunkRecognition
    verdict: Verdict


def compare_run(recognizer: Qwen3Recognizer, case: Mapping[str, Any], arrays: Mapping[str, np.ndarray],
                steps: int, run: str) -> CaseRun:  # fmt: skip
    """Recognize the case's PCM as the reference's ``run`` did and judge our greedy ids.

    ``recognizer`` must use the run's encoder attention (``RUNS[run][2]``). Our ids
    are compared with the reference's step by step; at the first near-tie we resolved
    the other way the comparison continues teacher-forced from the reference's ids.
    """
    tokens, prefix, _ = RUNS[run]
    pcm, mel = pcm_and_mel(arrays)
    min_new = steps if run == "min_new" else 0
    result = recognizer.recognize(pcm, case["language"], steps, mel=mel, keep_first_logits=True,
                                  min_new_tokens=min_new)  # fmt: skip
    reference = ReferenceSteps.from_observation(arrays, prefix)
    if list(reference.ids) != [int(t) for t in arrays[tokens]]:
        raise ValueError(f"{case['name']}: the recorded top-1 ids of run {run!r} are not its greedy ids")
    ours = list(result.generation.ids) + ([EOS_IDS[-1]] if result.generation.finished else [])

    def teacher_forced(ids: list[int]) -> list[int]:
        forced = recognizer.recognize(pcm, case["language"], steps, mel=mel, forced_ids=ids, min_new_tokens=min_new)
        return list(forced.generation.ids)

    label = case["name"] if run == "full" else f"{case['name']} ({run})"
    return CaseRun(result, compare_greedy(label, reference, ours, teacher_forced, EOS_IDS))


@dataclass(frozen=True)
class ForcedBf16:
    """A BF16 case teacher-forced with the FP32 reference's ids.

    ``agree`` maps "ours" and "reference" (the reference's BF16 run) to how many steps
    agree with the FP32 reference and the near-ties among them; ``misses`` maps them to
    the steps that disagree, each with the FP32 reference's top-2 margin there (logits).
    """

    result: ChunkRecognition
    agree: dict[str, tuple[int, tuple[Tie, ...]]]
    steps: int
    misses: dict[str, list[tuple[int, float]]]


def bf16_forced_agreement(recognizer: Qwen3Recognizer, case: Mapping[str, Any], bf16: Mapping[str, np.ndarray],
                          fp32: Mapping[str, np.ndarray], steps: int) -> ForcedBf16 | None:  # fmt: skip
    """How often ours-BF16 and the reference's BF16 agree with the FP32 reference when its ids are fed.

    ``bf16`` and ``fp32`` are the case's arrays from the reference's bfloat16 and float32
    runs; the bfloat16 oracle fed the FP32 greedy ids (``forced_ids``) and recorded its
    argmax at each step. A step at an FP32 near-tie agrees with either id (and is a
    tie), for both runs alike. None when the observations predate teacher forcing.
    """
    return forced_agreement(recognizer, case, bf16, fp32, steps, "BF16")


def forced_agreement(recognizer: Qwen3Recognizer, case: Mapping[str, Any], reduced: Mapping[str, np.ndarray],
                     fp32: Mapping[str, np.ndarray], steps: int, precision: str) -> ForcedBf16 | None:  # fmt: skip
    """`bf16_forced_agreement` for any reduced-precision run (``precision``: "BF16", "INT8", in labels)."""
    if "forced_ids" not in reduced:
        return None
    forced_ids = [int(t) for t in reduced["forced_ids"]]
    fp32_steps = ReferenceSteps.from_observation(fp32, "step")
    if list(fp32_steps.ids) != forced_ids:
        raise ValueError(f"{case['name']}: the {precision} run forced other ids than the FP32 reference's")
    pcm, mel = pcm_and_mel(reduced)
    result = recognizer.recognize(pcm, case["language"], steps, mel=mel, forced_ids=forced_ids)
    runs = {"ours": list(result.generation.ids), "reference": [int(t) for t in reduced["forced_argmax"]]}
    outcomes = {label: forced_outcomes(f"{case['name']} ({label}-{precision})", fp32_steps, choices, EOS_IDS)
                for label, choices in runs.items()}  # fmt: skip
    agree = {label: (sum(not isinstance(o, str) for o in out), tuple(o for o in out if isinstance(o, Tie)))
             for label, out in outcomes.items()}  # fmt: skip
    misses = {label: [(step, fp32_steps.margin[step]) for step, o in enumerate(out) if isinstance(o, str)]
              for label, out in outcomes.items()}  # fmt: skip
    return ForcedBf16(result, agree, len(forced_ids), misses)


@dataclass(frozen=True)
class PairedMisses:
    """Where two BF16 runs leave the FP32 id, step by step (the same forced steps).

    ``ours_only`` and ``reference_only`` count the discordant steps, ``both`` the
    steps both runs miss. ``p_ours_worse`` is the one-sided sign test on the
    discordant steps: the chance, were both runs equally likely to miss each of
    them, that ours would miss at least ``ours_only`` of them alone. A count can
    differ by a few steps when one product's summation order changes; this says
    whether such a difference is more than that.
    """

    ours_only: int
    reference_only: int
    both: int
    p_ours_worse: float


def paired_misses(misses: list[tuple[str, str, int, float]]) -> PairedMisses:
    """Pair the (case, run, step, margin) misses of the "ours" and "reference" runs."""
    runs: dict[str, set[tuple[str, int]]] = {"ours": set(), "reference": set()}
    for case, run, step, _ in misses:
        if run not in runs:
            raise ValueError(f"run {run!r} is neither 'ours' nor 'reference'")
        runs[run].add((case, step))
    ours, reference = runs["ours"], runs["reference"]
    a, b = len(ours - reference), len(reference - ours)
    p = sum(math.comb(a + b, i) for i in range(a, a + b + 1)) / 2 ** (a + b)
    return PairedMisses(a, b, len(ours & reference), p)


#: The INT8 verdict's level: ours fails if the one-sided sign test gives p below it.
INT8_SIGNIFICANCE = 0.05


@dataclass(frozen=True)
class Int8Agreement:
    """Ours-INT8 and the reference under torch's dynamic int8 quantization, each against FP32.

    ``agree``, ``logits_error`` and ``encoder_error`` map "ours" and "reference" to
    the teacher-forced steps agreeing with the FP32 reference's id (near-ties agree
    either way), the mean |first-step logits - FP32's| and the mean |encoder output -
    FP32's|, summed or averaged over the cases; ``paired`` pairs their misses.
    ``ok``: ours does not miss significantly more often (one-sided sign test
    p >= INT8_SIGNIFICANCE).
    """

    cases: int
    steps: int
    agree: dict[str, int]
    logits_error: dict[str, float]
    encoder_error: dict[str, float]
    ties: tuple[Tie, ...]
    misses: tuple[tuple[str, str, int, float], ...]
    paired: PairedMisses

    @property
    def ok(self) -> bool:
        return self.paired.p_ours_worse >= INT8_SIGNIFICANCE

    def report(self) -> str:
        o, r = "ours", "reference"
        return (
            f"{self.cases} cases, {self.steps} teacher-forced steps; agreeing with FP32: ours-INT8 {self.agree[o]}, "
            f"reference-INT8 {self.agree[r]} ({len(self.ties)} at FP32 near-ties)\n"
            f"mean |first-step logits - FP32|: ours {self.logits_error[o]:.3e}, reference {self.logits_error[r]:.3e}; "
            f"mean |encoder - FP32|: ours {self.encoder_error[o]:.3e}, reference {self.encoder_error[r]:.3e}\n"
            f"missed by ours alone {self.paired.ours_only}, by the reference's alone {self.paired.reference_only}, "
            f"by both {self.paired.both}; one-sided sign test that ours misses more often: "
            f"p = {self.paired.p_ours_worse:.3f} -> {'pass' if self.ok else 'FAIL'} (fails below {INT8_SIGNIFICANCE})"
        )


def _mean_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))))


def int8_agreement(recognizer_for: Callable[[str | None], Qwen3Recognizer], fp32_dir: Path, int8_dir: Path,
                   names: Sequence[str] | None = None) -> Int8Agreement:  # fmt: skip
    """Judge ours-INT8 by the paired test on the cases of ``int8_dir`` (``oracle_asr.py --dtype int8``).

    ``recognizer_for(context)`` gives an INT8 recognizer of the oracle's checkpoint
    with that context. Cases without teacher-forced observations are refused (rerun
    the INT8 oracle after the FP32 one).
    """
    import json

    index = json.loads((int8_dir / "cases.json").read_text(encoding="utf-8"))
    steps = int(index["steps"])
    agree = {"ours": 0, "reference": 0}
    logits: dict[str, list[float]] = {"ours": [], "reference": []}
    encoder: dict[str, list[float]] = {"ours": [], "reference": []}
    ties: list[Tie] = []
    misses: list[tuple[str, str, int, float]] = []
    total = 0
    cases = [c for c in index["cases"] if names is None or c["name"] in names]
    for case in cases:
        with np.load(int8_dir / f"{case['name']}.npz") as data:
            reduced = {key: data[key] for key in data.files}
        with np.load(fp32_dir / f"{case['name']}.npz") as data:
            fp32 = {key: data[key] for key in data.files}
        recognizer = recognizer_for(case["context"] or None)
        forced = forced_agreement(recognizer, case, reduced, fp32, steps, "INT8")
        if forced is None:
            raise ValueError(f"{int8_dir}: case {case['name']} has no teacher-forced run; rerun the INT8 oracle "
                             "after the FP32 one")  # fmt: skip
        total += forced.steps
        for label, (count, case_ties) in forced.agree.items():
            agree[label] += count
            ties.extend(case_ties)
            misses.extend((case["name"], label, step, margin) for step, margin in forced.misses[label])
        # the first step of a free run: its logits (teacher forcing keeps no logits)
        pcm, mel = pcm_and_mel(reduced)
        first = recognizer.recognize(pcm, case["language"], 1, mel=mel, keep_first_logits=True)
        if first.generation.first_logits is None:
            raise RuntimeError("the recognizer kept no first-step logits")
        logits["ours"].append(_mean_abs(first.generation.first_logits, fp32["first_logits"]))
        logits["reference"].append(_mean_abs(reduced["first_logits"], fp32["first_logits"]))
        encoder["ours"].append(_mean_abs(forced.result.audio_embeds, fp32["encoder_output"]))
        encoder["reference"].append(_mean_abs(reduced["encoder_output"], fp32["encoder_output"]))
    return Int8Agreement(
        len(cases), total, agree, {k: float(np.mean(v)) for k, v in logits.items()},
        {k: float(np.mean(v)) for k, v in encoder.items()}, tuple(ties), tuple(misses), paired_misses(misses),
    )  # fmt: skip
