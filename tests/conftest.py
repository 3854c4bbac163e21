"""Suite-wide hooks and fixtures: fixtures can ask whether the test they served failed; Kafka's own jars."""

from __future__ import annotations

from pathlib import Path
from typing import Generator

import pytest

from benchmarks.apache_kafka import fetch_jars


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    # Kept on the item as rep_setup / rep_call / rep_teardown for fixture teardowns to read.
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def kafka_lib() -> Path:
    """Apache Kafka 4.4's jars (its Java client and tools), fetched from Maven Central on first use."""
    return fetch_jars()
