"""Suite-wide hooks: fixtures can ask whether the test they served failed."""

from __future__ import annotations

from typing import Generator

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    # Kept on the item as rep_setup / rep_call / rep_teardown for fixture teardowns to read.
    setattr(item, f"rep_{report.when}", report)
    return report
