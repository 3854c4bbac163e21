"""metadata.version at Kafka 4.4's levels, driven by Apache Kafka 4.4's own kafka-features
(org.apache.kafka.tools.FeatureCommand) against kbroker: what it describes on a fresh node, and a
node formatted at 4.0 (`kbroker storage format --release-version 4.0`) upgraded level by level to
4.4-IV2, with the downgrades Kafka refuses refused in Kafka's words and the ones it allows allowed.

Every expected line below is what the same command printed against a single Kafka 4.4 node in the
same state (formatted by Kafka 4.4's kafka-storage with no release version, or with
--release-version 4.0), the epochs masked. All the tool runs share one JVM (tests/kafka_tools.py).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.integration.conftest import BrokerProcess
from tests.integration.test_features import await_finalized, finalized
from tests.integration.test_storage_tool import CLUSTER, combined_node, kbroker, write_config
from tests.kafka_tools import kafka_tool
from tests.ports import free_port

FEATURES = "org.apache.kafka.tools.FeatureCommand"
DEPRECATED = " `metadata` flag is deprecated and may be removed in a future release."
ALL_FAILED = "The update failed for all features since the following feature had an error: "


def kafka_features(lib: Path, bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return kafka_tool(lib, FEATURES, "--bootstrap-server", bootstrap, *args)


def describe_line(name: str, low: str, high: str, level: str) -> str:
    """A line of Kafka 4.4's `kafka-features describe`, its epoch masked."""
    return f"Feature: {name:<40}  SupportedMinVersion: {low:<15}  SupportedMaxVersion: {high:<15}  FinalizedVersionLevel: {level:<15}  Epoch: N"


def described(lib: Path, bootstrap: str) -> list[str]:
    done = kafka_features(lib, bootstrap, "describe")
    assert done.returncode == 0, done.stderr
    return [re.sub(r"Epoch: \d+$", "Epoch: N", line) for line in done.stdout.splitlines()]


def ok(done: subprocess.CompletedProcess[str], *lines: str) -> None:
    assert (done.returncode, done.stdout.splitlines()) == (0, list(lines)), done.stderr


def refused(done: subprocess.CompletedProcess[str], *lines: str) -> None:
    assert (done.returncode, done.stdout.splitlines()) == (1, list(lines)), done.stderr
    failed = len([line for line in lines if line != DEPRECATED])  # all or nothing: every feature fails
    assert done.stderr.strip().endswith(f"{failed} out of {failed} operation(s) failed."), done.stderr


def test_kafka_features_on_a_fresh_node(broker: BrokerProcess, kafka_lib: Path) -> None:
    """A node formatted with no release version starts at 4.4-IV2 with Kafka 4.4's defaults for the
    features kbroker implements; 4.5-IV0 needs unstable.feature.versions.enable, and no downgrade
    below 4.4-IV2 is allowed (4.4-IV2 added UnregisterControllerRecord)."""
    bs = broker.bootstrap
    assert described(kafka_lib, bs) == [
        describe_line("eligible.leader.replicas.version", "0", "1", "1"),
        describe_line("group.version", "0", "1", "1"),
        describe_line("kraft.version", "0", "1", "0"),
        describe_line("metadata.version", "3.3-IV3", "4.4-IV2", "4.4-IV2"),
        describe_line("share.version", "0", "2", "2"),
        describe_line("streams.version", "0", "1", "1"),
        describe_line("transaction.version", "0", "2", "2"),
    ]
    supports = ALL_FAILED + "Invalid update version 34 for feature metadata.version. Local controller 1 only supports versions 7-33"
    refused(kafka_features(kafka_lib, bs, "upgrade", "--metadata", "4.5-IV0"), DEPRECATED, f"Could not upgrade metadata.version to 34. {supports}")
    refused(kafka_features(kafka_lib, bs, "upgrade", "--feature", "metadata.version=34"), f"Could not upgrade metadata.version to 34. {supports}")
    refused(
        kafka_features(kafka_lib, bs, "downgrade", "--metadata", "4.4-IV1"),
        DEPRECATED,
        "Could not downgrade metadata.version to 32. " + ALL_FAILED + "Unsupported metadata.version downgrade from 33 to 32. "
        "Refusing to perform the requested downgrade because it might delete metadata information.",
    )
    refused(
        kafka_features(kafka_lib, bs, "downgrade", "--metadata", "4.4-IV1", "--unsafe"),
        DEPRECATED,
        "Could not downgrade metadata.version to 32. " + ALL_FAILED + "Unsupported metadata.version downgrade from 33 to 32. "
        "Unsafe metadata downgrade is not supported in this version.",
    )
    assert finalized(bs)[0]["metadata.version"] == 33


@pytest.fixture
def node_at_4_0(tmp_path: Path) -> Iterator[BrokerProcess]:
    node = BrokerProcess(tmp_path / "data1")
    node.config_file = write_config(tmp_path / "server.properties", combined_node(tmp_path, client_port=node.port, controller_port=free_port()))
    formatted = kbroker("storage", "format", "-t", CLUSTER, "-c", str(node.config_file), "--release-version", "4.0")
    assert formatted.returncode == 0, formatted.stderr
    node.start()
    yield node
    node.kill()


def test_kafka_features_upgrades_a_node_formatted_at_4_0(node_at_4_0: BrokerProcess, kafka_lib: Path) -> None:
    bs = node_at_4_0.bootstrap
    # Kafka 4.4 formatted at 4.0 finalizes transaction.version 2 and group.version 1, not
    # eligible.leader.replicas.version (its default from 4.1-IV0 on), share.version (4.2-IV0) or
    # streams.version (4.2-IV1).
    assert described(kafka_lib, bs) == [
        describe_line("eligible.leader.replicas.version", "0", "1", "0"),
        describe_line("group.version", "0", "1", "1"),
        describe_line("kraft.version", "0", "1", "0"),
        describe_line("metadata.version", "3.3-IV3", "4.4-IV2", "4.0-IV3"),
        describe_line("share.version", "0", "2", "0"),
        describe_line("streams.version", "0", "1", "0"),
        describe_line("transaction.version", "0", "2", "2"),
    ]

    # --release-version sends every production feature at its 4.4 default: Kafka 4.4 answers "<feature>
    # can be upgraded to <level>." for all seven.
    release_44 = [("eligible.leader.replicas.version", 1), ("group.version", 1), ("kraft.version", 1), ("metadata.version", 33), ("share.version", 2), ("streams.version", 1), ("transaction.version", 2)]
    ok(kafka_features(kafka_lib, bs, "upgrade", "--release-version", "4.4", "--dry-run"), *(f"{f} can be upgraded to {level}." for f, level in release_44))
    assert finalized(bs)[0]["metadata.version"] == 25

    ok(kafka_features(kafka_lib, bs, "upgrade", "--metadata", "4.3", "--dry-run"), DEPRECATED, "metadata.version can be upgraded to 30.")
    # Level by level through 4.1-IV0 .. 4.3-IV0 (Kafka's tool, --feature: no deprecation line).
    for level in range(26, 31):
        ok(kafka_features(kafka_lib, bs, "upgrade", "--feature", f"metadata.version={level}"), f"metadata.version was upgraded to {level}.")
        await_finalized(bs, "metadata.version", level)
    ok(kafka_features(kafka_lib, bs, "upgrade", "--metadata", "4.4-IV0"), DEPRECATED, "metadata.version was upgraded to 31.")
    await_finalized(bs, "metadata.version", 31)
    # 4.4-IV0 changed nothing in the metadata: back to 4.3-IV0 is allowed. 4.3-IV0 did (cordoned log
    # dirs in RegisterBrokerRecord v4): below it is refused.
    ok(kafka_features(kafka_lib, bs, "downgrade", "--metadata", "4.3-IV0"), DEPRECATED, "metadata.version was downgraded to 30.")
    await_finalized(bs, "metadata.version", 30)
    refused(
        kafka_features(kafka_lib, bs, "downgrade", "--metadata", "4.2"),
        DEPRECATED,
        "Could not downgrade metadata.version to 29. " + ALL_FAILED + "Unsupported metadata.version downgrade from 30 to 29. "
        "Refusing to perform the requested downgrade because it might delete metadata information.",
    )
    ok(kafka_features(kafka_lib, bs, "upgrade", "--metadata", "4.4"), DEPRECATED, "metadata.version was upgraded to 33.")
    await_finalized(bs, "metadata.version", 33)

    # The features kbroker implements, by name, as Kafka's tool sends them.
    ok(kafka_features(kafka_lib, bs, "upgrade", "--feature", "eligible.leader.replicas.version=1"), "eligible.leader.replicas.version was upgraded to 1.")
    await_finalized(bs, "eligible.leader.replicas.version", 1)
    no_share = ALL_FAILED + "Invalid update version 3 for feature share.version. Local controller 1 only supports versions 0-2"
    refused(
        kafka_features(kafka_lib, bs, "upgrade", "--feature", "transaction.version=2", "--feature", "share.version=3"),
        f"Could not upgrade share.version to 3. {no_share}",
        f"Could not upgrade transaction.version to 2. {no_share}",
    )
    ok(kafka_features(kafka_lib, bs, "upgrade", "--feature", "share.version=2"), "share.version was upgraded to 2.")
    await_finalized(bs, "share.version", 2)
    ok(kafka_features(kafka_lib, bs, "upgrade", "--feature", "streams.version=1"), "streams.version was upgraded to 1.")
    await_finalized(bs, "streams.version", 1)
    assert described(kafka_lib, bs) == [
        describe_line("eligible.leader.replicas.version", "0", "1", "1"),
        describe_line("group.version", "0", "1", "1"),
        describe_line("kraft.version", "0", "1", "0"),
        describe_line("metadata.version", "3.3-IV3", "4.4-IV2", "4.4-IV2"),
        describe_line("share.version", "0", "2", "2"),
        describe_line("streams.version", "0", "1", "1"),
        describe_line("transaction.version", "0", "2", "2"),
    ]

    # The levels are in the metadata log: a restart keeps them.
    node_at_4_0.restart()
    assert finalized(bs)[0] == {"metadata.version": 33, "eligible.leader.replicas.version": 1, "group.version": 1, "share.version": 2, "streams.version": 1, "transaction.version": 2}
