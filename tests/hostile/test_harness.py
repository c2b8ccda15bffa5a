"""The bounded-case harness itself: the caps it promises are in force."""

from __future__ import annotations

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
