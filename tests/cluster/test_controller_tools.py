"""Kafka 4.4's tools against a controller listener of a kbroker cluster (three combined nodes):
kafka-features.sh --bootstrap-controller describe (Admin.describeFeatures sends ApiVersions to a
controller) prints what --bootstrap-server describe prints, and kafka-cluster.sh
unregister-controller (UnregisterController, API 94) removes a stopped controller's registration,
which DescribeCluster sent to a controller then leaves out."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_combined_cluster import describe_controllers
from tests.kafka_tools import kafka_tool

TIMEOUT_S = 30.0
FEATURES = "org.apache.kafka.tools.FeatureCommand"
CLUSTER_TOOL = "org.apache.kafka.tools.ClusterTool"
EPOCH = re.compile(r"\s+Epoch: (\d+)$")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(tmp_path_factory.mktemp("controller-tools"), combined=3)
    try:
        yield c.start()
    finally:
        c.close()


def ran(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def described(lib: Path, *bootstrap: str) -> tuple[list[str], list[int]]:
    """FeatureCommand describe's lines without their Epoch, and the epochs."""
    lines = ran(kafka_tool(lib, FEATURES, *bootstrap, "describe")).splitlines()
    epochs = [int(m.group(1)) for m in map(EPOCH.search, lines) if m]
    return [EPOCH.sub("", line) for line in lines], epochs


def test_features_describe_through_a_controller_prints_what_a_broker_prints(cluster: KafkaCluster, kafka_lib: Path) -> None:
    by_controller, controller_epochs = described(kafka_lib, "--bootstrap-controller", cluster.controller_bootstrap(1))
    by_broker, broker_epochs = described(kafka_lib, "--bootstrap-server", cluster.bootstrap)
    assert by_controller == by_broker
    assert any(line.startswith("Feature: metadata.version") and "FinalizedVersionLevel: 4.4-IV2" in line for line in by_controller)
    # A controller's epoch is the offset its levels were last replayed at, a broker's its latest
    # offset (Kafka 4.4's FeaturesPublisher and KRaftMetadataCache): the first is never ahead.
    assert len(set(controller_epochs)) == 1 and len(set(broker_epochs)) == 1
    assert 0 <= controller_epochs[0] <= broker_epochs[0]


def test_kafka_cluster_unregister_controller(cluster: KafkaCluster, kafka_lib: Path) -> None:
    every = {c.node_id for c in cluster.controllers}

    def listed(asked: int) -> set[int]:
        return {b.broker_id for b in describe_controllers(cluster.controller_bootstrap(asked)).brokers}

    wait_until("every controller registered", lambda: listed(1) == every or None, TIMEOUT_S)
    # A live controller registers again once its registration is gone: unregister a stopped one.
    cluster.nodes[3].stop()
    at_controller = ("--bootstrap-controller", cluster.controller_bootstrap(1))
    out = ran(kafka_tool(kafka_lib, CLUSTER_TOOL, "unregister-controller", *at_controller, "--id", "3"))
    assert out.strip() == "Controller 3 is no longer registered."
    for asked in (1, 2):
        wait_until(f"controller {asked} no longer lists controller 3", lambda: listed(asked) == every - {3} or None, TIMEOUT_S)
    # Again, through a broker, which forwards it to the active controller.
    again = kafka_tool(kafka_lib, CLUSTER_TOOL, "unregister-controller", "--bootstrap-server", cluster.bootstrap, "--id", "3")
    assert again.returncode != 0 and "Controller ID 3 is not currently registered." in again.stdout + again.stderr
