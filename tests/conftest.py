"""Suite-wide hooks and fixtures: fixtures can ask whether the test they served failed; Kafka's own
jars, and its JVMs started with the JIT that starts fastest; Hypothesis without its per-example deadline."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Generator

import pytest
from hypothesis import settings

from benchmarks.apache_kafka import SHORT_LIVED_JVM_OPTS_ENV, fetch_jars

# A property test asserts what the code does, not how fast: on a busy 2-core machine an example
# of a codec test took 303 ms against Hypothesis's default 200 ms deadline and failed the run.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

# The brokers, tools and clients tests start (hundreds of interpreters) load the repository's
# modules from __pycache__ (gitignored) rather than compiling them each time: about 0.4 s of CPU a
# broker start, where the environment says not to write bytecode (PYTHONDONTWRITEBYTECODE).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# Kafka's nodes, formats and tools started by tests compile with C1 only: a node's start takes about
# half the CPU time, and what a test makes them do is short and light.
os.environ.setdefault(SHORT_LIVED_JVM_OPTS_ENV, "-XX:TieredStopAtLevel=1")


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
