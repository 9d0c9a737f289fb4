"""Registers the pytest marks of transformers' common tests (see ``transformers_sources.marks``) before this folder's
test modules import them: an unregistered mark is an error under strict_markers (a warning without it). Here, not in
tests/conftest.py, so that only a run that collects these tests reads the transformers sdist."""

from __future__ import annotations

import pytest

from tests.conformance.transformers_sources import marks


def pytest_configure(config: pytest.Config) -> None:
    for line in marks():
        config.addinivalue_line("markers", line)
