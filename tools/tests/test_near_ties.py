"""The near-tie rule on synthetic reference margins (onespeech_tools.near_ties)."""

from __future__ import annotations

import numpy as np
import pytest

from onespeech_tools.near_ties import (
    RELATIVE_BOUND,
    STEPS_PER_TIE,
    ReferenceSteps,
    Suite,
    Tie,
    compare_classes,
    compare_greedy,
    forced_outcomes,
)

END = (151643, 151645)


def reference(ids: list[int], runner_up: list[int], relative: list[float], scale: float = 20.0) -> ReferenceSteps:
    """Steps with the given ids, runner-ups and margins relative to a max |logit| of ``scale``."""
    return ReferenceSteps.from_arrays(
        np.stack([ids, runner_up], axis=-1), np.asarray(relative) * scale, np.full(len(ids), scale)
    )


def never_forced(ids):
    raise AssertionError("teacher forcing was not expected")


def test_identical_ids_need_no_rule() -> None:
    ref = reference([5, 6, 7], [1, 1, 1], [0.1, 1e-6, 0.2])
    verdict = compare_greedy("c", ref, [5, 6, 7], never_forced)
    assert verdict.ok and verdict.compared == 3 and not verdict.ties and not verdict.teacher_forced


def test_a_real_tie_passes_and_continues_teacher_forced() -> None:
    ref = reference([5, 6, 7, 8], [1, 9, 1, 1], [0.1, 1.6e-6, 0.2, 0.3])
    calls = []

    def forced(ids):
        calls.append(list(ids))
        return [5, 9, 7, 8]  # our argmax after each prefix of the reference's ids

    # the free run went its own way after taking the runner-up 9 at step 1
    verdict = compare_greedy("ko", ref, [5, 9, 3, 3], forced)
    assert verdict.ok, verdict.failure
    assert calls == [[5, 6, 7, 8]] and verdict.teacher_forced and verdict.compared == 4
    (tie,) = verdict.ties
    assert (tie.case, tie.step, tie.reference_id, tie.runner_up_id, tie.ours) == ("ko", 1, 6, 9, 9)
    assert tie.relative_margin == pytest.approx(1.6e-6)
    assert "ko step 1" in str(tie) and "1.60e-06" in str(tie)


def test_later_steps_are_compared_as_before_after_a_tie() -> None:
    ref = reference([5, 6, 7, 8], [1, 9, 1, 1], [0.1, 1e-6, 0.2, 0.3])
    verdict = compare_greedy("c", ref, [5, 9, 3], lambda ids: [5, 9, 7, 4])
    assert not verdict.ok and verdict.compared == 4
    assert "step 3" in verdict.failure and "ours 4, reference 8" in verdict.failure


def test_a_claimed_tie_at_the_bound_fails() -> None:
    ref = reference([5, 6], [1, 9], [0.1, RELATIVE_BOUND])
    verdict = compare_greedy("c", ref, [5, 9], never_forced)
    assert not verdict.ok and "not below the near-tie bound" in verdict.failure
    # just below the bound it is a tie
    ref = reference([5, 6], [1, 9], [0.1, RELATIVE_BOUND * 0.999])
    assert compare_greedy("c", ref, [5, 9], lambda ids: [5, 9]).ok


def test_a_third_id_is_never_a_tie() -> None:
    ref = reference([5, 6], [1, 9], [0.1, 0.0])
    verdict = compare_greedy("c", ref, [5, 4], never_forced)
    assert not verdict.ok and "ours 4, reference 6" in verdict.failure


def test_end_ids_agree_with_each_other_and_early_ends_fail() -> None:
    ref = reference([5, 151645], [1, 1], [0.1, 0.2])
    assert compare_greedy("c", ref, [5, 151643], never_forced, END).ok
    verdict = compare_greedy("c", reference([5, 6, 7], [1, 1, 1], [0.1, 0.1, 0.1]), [5], never_forced, END)
    assert not verdict.ok and "ours ended" in verdict.failure
    # ours ending at a near-tie with an end token: a tie, then forced
    ref = reference([5, 6, 7], [1, 151643, 1], [0.1, 1e-7, 0.1])
    verdict = compare_greedy("c", ref, [5, 151645], lambda ids: [5, 151645, 7], END)
    assert verdict.ok and len(verdict.ties) == 1


def test_a_cluster_of_ties_fails_the_suite() -> None:
    suite = Suite()
    # one tie per STEPS_PER_TIE compared steps is allowed
    ids = list(range(10, 10 + STEPS_PER_TIE))
    ref = reference(ids, [1] * len(ids), [1e-6] + [0.1] * (len(ids) - 1))
    suite.add(compare_greedy("a", ref, [1] + ids[1:], lambda forced: [1] + ids[1:]))
    assert suite.ok, suite.report()
    # the same ties in fewer steps are a cluster
    ref = reference([5, 6, 7, 8], [1, 2, 3, 4], [1e-6, 1e-6, 1e-6, 0.1])
    suite.add(compare_greedy("b", ref, [1, 6, 7, 8], lambda forced: [1, 2, 3, 8]))
    assert suite.verdicts[-1].ok and len(suite.ties) == 4
    assert not suite.ok and "4 near-ties in 260 compared steps" in suite.report()


def test_aligner_slots_follow_the_same_rule() -> None:
    ref = reference([3, 4, 5, 6], [2, 9, 2, 2], [0.1, 1e-5, 0.1, 2e-4])
    verdict = compare_classes("en", ref, [3, 9, 5, 6])
    assert verdict.ok and [t.step for t in verdict.ties] == [1] and verdict.compared == 4
    verdict = compare_classes("en", ref, [3, 9, 5, 2])
    assert not verdict.ok and "step 3" in verdict.failure
    assert not compare_classes("en", ref, [3, 4]).ok


def test_observation_arrays_are_read_by_prefix() -> None:
    arrays = {"windowed_step_top2_ids": np.array([[1, 2]]), "windowed_step_margin": np.array([0.5]),
              "windowed_step_max_abs": np.array([10.0])}  # fmt: skip
    steps = ReferenceSteps.from_observation(arrays, "windowed_step")
    assert steps.ids == (1,) and steps.runner_up == (2,) and steps.relative_margin(0) == 0.05
    with pytest.raises(KeyError, match="rerun the oracle"):
        ReferenceSteps.from_observation(arrays, "step")
    with pytest.raises(ValueError, match="one entry per step"):
        ReferenceSteps((1, 2), (3,), (0.1,), (1.0,))


def test_forced_outcomes_agree_tie_or_say_why_per_step() -> None:
    """Teacher-forced BF16 choices against FP32: each step agrees, is a tie, or is a miss with its margin."""
    ref = reference([5, 6, 7, END[0]], [1, 2, 3, 4], [0.1, 1e-6, 0.02, 0.3])
    out = forced_outcomes("c", ref, [5, 2, 9, END[1]], END)
    assert out[0] is None and out[3] is None  # same id; two end ids agree
    assert isinstance(out[1], Tie) and out[1].ours == 2  # the runner-up at a near-tie
    assert isinstance(out[2], str) and "c step 2: ours 9, reference 7" in out[2] and "margin 2.00e-02" in out[2]
    with pytest.raises(ValueError, match="3 choices for 4 reference steps"):
        forced_outcomes("c", ref, [5, 6, 7], END)
