"""Collects the hostile cases' classes and prints the per-op count table at the end of the run."""

from __future__ import annotations

import pytest

_RESULTS: list = []


@pytest.fixture
def hostile_results() -> list:
    return _RESULTS


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not _RESULTS:
        return
    from .summary import render

    terminalreporter.section("hostile inputs: classes per op")
    terminalreporter.write_line(render(_RESULTS))
