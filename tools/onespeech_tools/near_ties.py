"""Parity at the reference's near-ties: where either of two ids counts as agreement.

Greedy parity means our ids equal the reference's, with one exception. At a step where
the reference's own top-2 margin is below the logits tolerance parity already accepts
(``RELATIVE_BOUND`` = 1e-4 of the largest absolute logit at that step), the reference's
choice is set by its summation order, not by the model: either id counts as agreement.
If ours took the other one, the comparison continues teacher-forced from the
reference's id and every later step is compared as before. Every such step is reported.

A comparison fails at a step whose id is neither the reference's nor, at a near-tie,
its runner-up; and at a "tie" claimed at a margin at or above the bound. A suite fails
when ties are more frequent than one per ``STEPS_PER_TIE`` compared steps: a real
defect shows up as a cluster of ties. The aligner's timestamp classes follow the same
rule per slot (each slot is its own argmax, so there is nothing to continue).

The reference's per-step top-2 ids, margins and largest absolute logits come from the
oracles (``tools/oracles/qwen3-asr``); the rule and its evidence are in docs/qwen3.md.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

RELATIVE_BOUND = 1e-4  # the logits tolerance: max |ours - reference| / max |reference|
STEPS_PER_TIE = 256  # at most one tie per this many compared steps, over a suite


@dataclass(frozen=True)
class ReferenceSteps:
    """The reference's choice at each step (or slot), its runner-up and its margin.

    Attributes
    ----------
    ids : the reference's ids (its greedy choice, top-1)
    runner_up : its second-best id at each step
    margin : top-1 minus top-2 score at each step
    max_abs : the largest absolute (finite) score at each step
    """

    ids: tuple[int, ...]
    runner_up: tuple[int, ...]
    margin: tuple[float, ...]
    max_abs: tuple[float, ...]

    def __post_init__(self) -> None:
        lengths = {len(self.ids), len(self.runner_up), len(self.margin), len(self.max_abs)}
        if len(lengths) != 1:
            raise ValueError(f"ids, runner_up, margin and max_abs need one entry per step; got lengths {sorted(lengths)}")

    @classmethod
    def from_arrays(cls, top2_ids: np.ndarray, margin: np.ndarray, max_abs: np.ndarray) -> ReferenceSteps:
        """From an oracle's ``*_top2_ids`` (n, 2), ``*_margin`` (n,) and ``*_max_abs`` (n,)."""
        top2 = np.asarray(top2_ids, dtype=np.int64).reshape(-1, 2)
        return cls(
            ids=tuple(int(i) for i in top2[:, 0]),
            runner_up=tuple(int(i) for i in top2[:, 1]),
            margin=tuple(float(m) for m in np.asarray(margin, dtype=np.float64)),
            max_abs=tuple(float(m) for m in np.asarray(max_abs, dtype=np.float64)),
        )

    @classmethod
    def from_observation(cls, arrays: Mapping[str, np.ndarray], prefix: str = "step") -> ReferenceSteps:
        """From an oracle's case arrays: ``prefix`` is e.g. "step", "windowed_step", "slot"."""
        names = [f"{prefix}_top2_ids", f"{prefix}_margin", f"{prefix}_max_abs"]
        missing = [name for name in names if name not in arrays]
        if missing:
            raise KeyError(f"the observations lack {', '.join(missing)}; rerun the oracle (tools/oracles/run.py)")
        return cls.from_arrays(*(arrays[name] for name in names))

    def relative_margin(self, step: int) -> float:
        scale = self.max_abs[step]
        return self.margin[step] / scale if scale > 0 else float("inf")

    def is_near_tie(self, step: int) -> bool:
        """Whether the reference's margin at ``step`` is below the bound (strictly)."""
        return self.margin[step] < RELATIVE_BOUND * self.max_abs[step]


@dataclass(frozen=True)
class Tie:
    """One step where ours took the reference's runner-up at a near-tie."""

    case: str
    step: int
    relative_margin: float  # the reference's (top1 - top2) / max |logit| at that step
    reference_id: int
    runner_up_id: int
    ours: int  # the id we chose (the runner-up)

    def __str__(self) -> str:
        return (f"{self.case} step {self.step}: reference margin {self.relative_margin:.2e} of max |logit|, "
                f"reference {self.reference_id}, runner-up {self.runner_up_id}, ours {self.ours}")  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    """One case's comparison under the rule.

    Attributes
    ----------
    compared : steps compared (up to and including a failing step)
    ties : near-ties where ours took the runner-up
    failure : why the case fails, or None
    teacher_forced : whether the comparison continued teacher-forced after a tie
    """

    case: str
    compared: int
    ties: tuple[Tie, ...] = ()
    failure: str | None = None
    teacher_forced: bool = False

    @property
    def ok(self) -> bool:
        return self.failure is None


def _judge_step(case: str, step: int, ours: int, reference: ReferenceSteps, same: Callable[[int, int], bool]) -> Tie | str | None:
    """None (agreement), a Tie, or the failure message for one step."""
    want = reference.ids[step]
    if same(ours, want):
        return None
    relative = reference.relative_margin(step)
    if not same(ours, reference.runner_up[step]):
        return (f"{case} step {step}: ours {ours}, reference {want} (runner-up {reference.runner_up[step]}, "
                f"margin {relative:.2e} of max |logit|)")  # fmt: skip
    if not reference.is_near_tie(step):
        return (f"{case} step {step}: ours took the runner-up {ours} over the reference's {want} at a margin of "
                f"{relative:.2e} of max |logit|, not below the near-tie bound {RELATIVE_BOUND:.0e}")  # fmt: skip
    return Tie(case, step, relative, want, reference.runner_up[step], ours)


def compare_greedy(
    case: str,
    reference: ReferenceSteps,
    ours: Sequence[int],
    teacher_forced: Callable[[Sequence[int]], Sequence[int]],
    end_ids: Collection[int] = (),
) -> Verdict:
    """Compare our greedy ids with the reference's under the near-tie rule.

    Parameters
    ----------
    case : name used in the report
    reference : the reference's steps; its ids end with its end token if it ended
    ours : our free-running ids, with an end token appended if ours ended
    teacher_forced : called (once, at the first tie ours resolved the other way) with the
        reference's ids; returns our argmax after each prefix of them (one per id)
    end_ids : ids that all mean "end" (any of them agrees with any other)
    """
    ends = frozenset(int(i) for i in end_ids)

    def same(a: int, b: int) -> bool:
        return a == b or (a in ends and b in ends)

    choices = [int(i) for i in ours]
    forced = False
    ties: list[Tie] = []
    for step in range(len(reference.ids)):
        if step >= len(choices):
            return Verdict(case, step + 1, tuple(ties), f"{case} step {step}: ours ended, the reference went on "
                           f"with {reference.ids[step]}", forced)  # fmt: skip
        outcome = _judge_step(case, step, choices[step], reference, same)
        if isinstance(outcome, str):
            return Verdict(case, step + 1, tuple(ties), outcome, forced)
        if outcome is not None:
            ties.append(outcome)
            if not forced:
                # from here on ours continues from the reference's id, as the reference did
                choices = [int(i) for i in teacher_forced(list(reference.ids))]
                if len(choices) != len(reference.ids):
                    raise ValueError(f"teacher forcing gave {len(choices)} ids for {len(reference.ids)} forced")
                forced = True
    if not forced and len(choices) > len(reference.ids):
        step = len(reference.ids)
        return Verdict(case, step + 1, tuple(ties), f"{case} step {step}: ours went on with {choices[step]} after "
                       "the reference's last step", forced)  # fmt: skip
    return Verdict(case, len(reference.ids), tuple(ties), None, forced)


def compare_classes(case: str, reference: ReferenceSteps, ours: Sequence[int]) -> Verdict:
    """Independent per-slot classes (the aligner's timestamps) under the same rule."""
    if len(ours) != len(reference.ids):
        return Verdict(case, 0, (), f"{case}: {len(ours)} slots, the reference has {len(reference.ids)}")
    ties: list[Tie] = []
    failures: list[str] = []
    for slot, choice in enumerate(int(i) for i in ours):
        outcome = _judge_step(case, slot, choice, reference, lambda a, b: a == b)
        if isinstance(outcome, Tie):
            ties.append(outcome)
        elif isinstance(outcome, str):
            failures.append(outcome)
    return Verdict(case, len(ours), tuple(ties), "; ".join(failures) or None)


def forced_outcomes(
    case: str, reference: ReferenceSteps, choices: Sequence[int], end_ids: Collection[int] = ()
) -> list[Tie | str | None]:
    """Per teacher-forced step: None (agrees), a Tie (the runner-up at a near-tie), or why it disagrees."""
    if len(choices) != len(reference.ids):
        raise ValueError(f"{case}: {len(choices)} choices for {len(reference.ids)} reference steps")
    ends = frozenset(int(i) for i in end_ids)
    return [_judge_step(case, step, choice, reference, lambda a, b: a == b or (a in ends and b in ends))
            for step, choice in enumerate(int(i) for i in choices)]  # fmt: skip


@dataclass
class Suite:
    """The verdicts of one parity suite and the suite-wide tie rate."""

    verdicts: list[Verdict] = field(default_factory=list)

    def add(self, verdict: Verdict) -> Verdict:
        self.verdicts.append(verdict)
        return verdict

    @property
    def compared(self) -> int:
        return sum(v.compared for v in self.verdicts)

    @property
    def ties(self) -> list[Tie]:
        return [t for v in self.verdicts for t in v.ties]

    @property
    def failures(self) -> list[str]:
        failures = [v.failure for v in self.verdicts if v.failure is not None]
        if len(self.ties) * STEPS_PER_TIE > self.compared:
            failures.append(f"{len(self.ties)} near-ties in {self.compared} compared steps: more than one per "
                            f"{STEPS_PER_TIE} (a cluster of ties is a defect, not summation order)")  # fmt: skip
        return failures

    @property
    def ok(self) -> bool:
        return not self.failures

    def report(self) -> str:
        """The tie list and the verdict, one line each."""
        lines = [f"near-ties: {len(self.ties)} in {self.compared} compared steps "
                 f"(bound {RELATIVE_BOUND:.0e} of max |logit|, at most 1 per {STEPS_PER_TIE})"]  # fmt: skip
        lines += [f"  tie: {tie}" for tie in self.ties]
        lines += [f"  FAIL: {failure}" for failure in self.failures]
        return "\n".join(lines)
