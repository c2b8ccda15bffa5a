"""The bounded-case harness itself: the caps it promises are in force."""

from __future__ import annotations

import os

import pytest


def test_value_comes_back(run_case) -> None:
    assert run_case("result = args['n'] + 1", args={"n": 41}).expect_ok() == 42


def test_exception_comes_back_with_its_bases(run_case) -> None:
    result = run_case("raise FileNotFoundError('nope')")
    result.expect_error("OSError", match="^nope$")
    assert result.error == "FileNotFoundError"


def test_memory_cap_turns_a_huge_allocation_into_memory_error(run_case) -> None:
    run_case("bytearray(512 * 1024 * 1024)", memory_mb=256).expect_error("MemoryError")


def test_time_limit_fails_the_test(run_case) -> None:
    with pytest.raises(pytest.fail.Exception, match="longer than 1 s"):
        run_case("import time\ntime.sleep(30)", timeout_s=1)


def test_cpu_cap_is_the_time_limit_on_every_cpu(run_case) -> None:
    soft, hard = run_case("import resource\nresult = resource.getrlimit(resource.RLIMIT_CPU)", timeout_s=5).expect_ok()
    assert (soft, hard) == (5 * len(os.sched_getaffinity(0)) + 1, 5 * len(os.sched_getaffinity(0)) + 2)


def test_a_case_over_its_cpu_time_fails_the_test(run_case) -> None:
    # the harness's own cap cannot be reached before the wall clock by fewer threads than
    # CPUs; a lower cap set inside the case shows how going over it is reported
    with pytest.raises(pytest.fail.Exception, match="more CPU time than its limit"):
        run_case("import resource\nresource.setrlimit(resource.RLIMIT_CPU, (1, 2))\nwhile True:\n    pass",
                 timeout_s=30)
