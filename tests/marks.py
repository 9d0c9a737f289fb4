"""The test marks, applied by rule and enforced (a pytest plugin, loaded by tests/conftest.py).

* ``e2e``: every test in a folder named e2e (tests/e2e/: whole jobs run end to end), marked at collection.
* ``multiprocess``: the test starts a process (``subprocess``, ``multiprocessing``, dataloader or ``datasets`` workers,
  a warm process of ``tests/warm_processes.py``) or a ``torch.distributed`` process group.
* ``compile``: the test traces with dynamo: ``torch.compile``, ``torch._dynamo.explain``, ``torch.export.export`` or
  ``torch.onnx.export``.
* ``slow``: the test takes over about 10 s; an unmarked one whose call phase takes longer than the
  ``unmarked_time_budget`` ini option fails.

While a test runs, the calls above are watched; a test that makes one without its mark fails, naming the mark.
Fixtures are not watched: a module or session fixture belongs to no single test.
"""

from __future__ import annotations

import functools
import multiprocessing.process
import platform
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
import torch._dynamo
import torch.distributed
import torch.export
import torch.onnx

from tests.warm_processes import WarmPython

E2E_FOLDER = "e2e"
WHAT_NEEDS_A_MARK = {
    "multiprocess": "starts a process or a process group",
    "compile": "calls torch.compile, torch._dynamo.explain, torch.export or torch.onnx.export",
}


def watched_calls() -> list[tuple[object, str, str]]:
    """(owner, attribute, mark) of every call that needs a mark."""
    calls = [
        (subprocess.Popen, "_execute_child", "multiprocess"),
        (multiprocessing.process.BaseProcess, "start", "multiprocess"),
        (WarmPython, "_request", "multiprocess"),
        (torch.distributed, "init_process_group", "multiprocess"),
        (torch, "compile", "compile"),
        (torch._dynamo, "explain", "compile"),
        (torch.export, "export", "compile"),
        (torch.onnx, "export", "compile"),
    ]
    try:  # datasets' worker pools use the `multiprocess` fork of multiprocessing
        import multiprocess.process

        calls.append((multiprocess.process.BaseProcess, "start", "multiprocess"))
    except ImportError:
        pass
    return calls


@contextmanager
def watching() -> Iterator[set[str]]:
    """Yield the set of marks that the calls made inside the block need."""
    needed: set[str] = set()
    originals = []
    for owner, name, mark in watched_calls():
        original = getattr(owner, name)

        def watched(*args, _original=original, _mark=mark, **kwargs):
            needed.add(_mark)
            return _original(*args, **kwargs)

        setattr(owner, name, functools.wraps(original)(watched))
        originals.append((owner, name, original))
    try:
        yield needed
    finally:
        for owner, name, original in reversed(originals):
            setattr(owner, name, original)


def pytest_configure(config: pytest.Config) -> None:
    # platform.processor() runs `uname -p` once per process and caches the answer: run it here, not in whichever test
    # asks first, so that the multiprocess rule does not depend on the order of the tests.
    platform.processor()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "unmarked_time_budget",
        "seconds the call phase of a test without the slow mark may take (3x the 10 s slow line: noisy CI stays green)",
        default="30",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_FOLDER in item.path.relative_to(config.rootpath).parts[:-1]:
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    start = time.perf_counter()
    with watching() as needed:
        result = yield
    seconds = time.perf_counter() - start
    missing = sorted(mark for mark in needed if item.get_closest_marker(mark) is None)
    if missing:
        pytest.fail("; ".join(f"the test {WHAT_NEEDS_A_MARK[mark]} without @pytest.mark.{mark}" for mark in missing),
                    pytrace=False)
    budget = float(item.config.getini("unmarked_time_budget"))
    if seconds > budget and item.get_closest_marker("slow") is None:
        pytest.fail(f"the test took {seconds:.1f} s, over the {budget:g} s a test without @pytest.mark.slow may take",
                    pytrace=False)
    return result
