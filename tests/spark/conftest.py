"""One SparkSession (local[2]) and one kbroker process for every Spark test.

A Spark session takes 5-11 s to start: the tests share it, each with its own topics. The
broker does not create topics on demand, so a test names every topic it uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from pyspark.sql import SparkSession

from spark_jobs.session import local_session
from tests.integration.conftest import BrokerProcess, retire


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("spark-broker") / "data", {"auto.create.topics.enable": "false"}).start()
    yield broker
    retire(broker)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = local_session("kbroker-tests")
    yield session
    session.stop()


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    return tmp_path / "checkpoint"
