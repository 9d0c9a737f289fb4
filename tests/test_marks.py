"""The mark rules of tests/marks.py, run on small test files in a pytester session."""

from __future__ import annotations

import pytest

RULES = ("-p", "tests.marks", "-p", "no:cacheprovider")

TESTS = '''
import subprocess
import time

import pytest
import torch


def test_spawns_unmarked():
    subprocess.run(["true"], check=True)


@pytest.mark.multiprocess
def test_spawns_marked():
    subprocess.run(["true"], check=True)


def test_compiles_unmarked():
    torch.compile(lambda x: x + 1)  # wrapping is enough: nothing is compiled until it is called


@pytest.mark.compile
def test_compiles_marked():
    torch.compile(lambda x: x + 1)


def test_slow_unmarked():
    time.sleep(1.2)


@pytest.mark.slow
def test_slow_marked():
    time.sleep(1.2)


def test_spawn_caught_by_the_test_still_fails():
    try:
        subprocess.run(["false"], check=True)
    except subprocess.CalledProcessError:
        pass
'''


@pytest.mark.multiprocess
@pytest.mark.compile
def test_a_test_without_the_mark_its_calls_need_fails_naming_the_mark(pytester):
    pytester.makepyfile(test_rules=TESTS)
    result = pytester.runpytest(*RULES, "-o", "unmarked_time_budget=1")
    result.assert_outcomes(passed=3, failed=4)
    result.stdout.fnmatch_lines([
        "*_ test_spawns_unmarked _*",
        "the test starts a process or a process group without @pytest.mark.multiprocess",
        "*_ test_compiles_unmarked _*",
        "the test calls torch.compile, * without @pytest.mark.compile",
        "*_ test_slow_unmarked _*",
        "the test took *, over the 1 s a test without @pytest.mark.slow may take",
        "*_ test_spawn_caught_by_the_test_still_fails _*",
        "the test starts a process or a process group without @pytest.mark.multiprocess",
    ])


def test_the_calls_are_restored_after_each_test(pytester):
    pytester.makepyfile(test_rules="""
import subprocess
import torch

ORIGINALS = (subprocess.Popen._execute_child, torch.compile)


def test_watched_while_running():
    assert (subprocess.Popen._execute_child.__wrapped__, torch.compile.__wrapped__) == ORIGINALS


def test_wrapped_once_not_once_more_per_test():
    assert (subprocess.Popen._execute_child.__wrapped__, torch.compile.__wrapped__) == ORIGINALS
""")
    result = pytester.runpytest(*RULES)
    result.assert_outcomes(passed=2)


def test_tests_under_e2e_are_marked_e2e(pytester):
    e2e = pytester.mkdir("e2e")
    (e2e / "test_job.py").write_text("def test_job():\n    pass\n")
    pytester.makepyfile(test_unit="def test_unit():\n    pass\n")
    result = pytester.runpytest(*RULES, "-m", "e2e", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["e2e/test_job.py::test_job", "*1/2 tests collected (1 deselected)*"])
