"""group.version driven by Apache Kafka 4.4's own kafka-features against kbroker, and what it gates.

Every expected line and answer below is what a single Kafka 4.4 node answered in the same state
(formatted by its kafka-storage with no release version, or with --release-version 3.9), the epochs
masked: group.version is supported 0-1 and finalized 1 from 4.0-IV0 on (0 at 3.9); it moves up and
down freely (no dependency, no metadata at stake); at 0 ApiVersions still lists ConsumerGroupHeartbeat
and ConsumerGroupDescribe, and both answer UNSUPPORTED_VERSION (KafkaApis.isConsumerGroupProtocolEnabled).
"""

from __future__ import annotations

import datetime
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from kio.schema.api_versions.v3 import request as api_versions_v3
from kio.schema.consumer_group_describe.v0 import request as describe_v0
from kio.schema.consumer_group_heartbeat.v0 import request as heartbeat_v0
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_coordinator_v4
from kio.static.primitive import i8, i32

from tests.integration.conftest import BrokerProcess
from tests.integration.test_features import await_finalized
from tests.integration.test_metadata_version_44 import ALL_FAILED, describe_line, described, kafka_features, ok, refused
from tests.integration.test_storage_tool import CLUSTER, combined_node, kbroker, write_config
from tests.integration.wire import request
from tests.ports import free_port

CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69
WAIT_S = 30.0


def heartbeat(bs: str) -> Any:
    """A new member joining group g1: the first heartbeat a KIP-848 consumer sends."""
    return request(
        bs,
        heartbeat_v0.ConsumerGroupHeartbeatRequest(
            group_id="g1",
            member_id=str(uuid.uuid4()),
            member_epoch=i32(0),
            instance_id=None,
            rack_id=None,
            rebalance_timeout=datetime.timedelta(seconds=30),
            subscribed_topic_names=("t",),
            server_assignor=None,
            topic_partitions=(),
        ),
    )


def consumer_group_apis(bs: str) -> list[tuple[int, int, int]]:
    r = request(bs, api_versions_v3.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    return [(int(k.api_key), int(k.min_version), int(k.max_version)) for k in r.api_keys if k.api_key in (CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE)]


def assert_consumer_protocol_refused(bs: str) -> None:
    """Kafka 4.4 at group.version 0: both APIs still advertised, both answered UNSUPPORTED_VERSION with
    no message, every described group in request order."""
    assert [key for key, _, _ in consumer_group_apis(bs)] == [CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE]
    answer = heartbeat(bs)
    assert (answer.error_code, answer.error_message, answer.member_id, answer.member_epoch) == (ErrorCode.unsupported_version, None, None, 0)
    described_groups = request(bs, describe_v0.ConsumerGroupDescribeRequest(group_ids=("g1", "g2"), include_authorized_operations=False))
    assert [(g.group_id, g.error_code, g.error_message, g.group_state) for g in described_groups.groups] == [
        ("g1", ErrorCode.unsupported_version, None, ""),
        ("g2", ErrorCode.unsupported_version, None, ""),
    ]


def await_consumer_protocol(bs: str) -> None:
    """A heartbeat answered by the coordinator. FindCoordinator first, as a client does: it creates
    the offsets topic, which may still be on its way when the first heartbeats arrive."""
    request(bs, find_coordinator_v4.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=("g1",)))
    deadline = time.monotonic() + WAIT_S
    while (answer := heartbeat(bs)).error_code != ErrorCode.none:
        assert answer.error_code != ErrorCode.unsupported_version
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)
    assert answer.member_epoch > 0


def test_group_version_down_and_up_on_a_fresh_node(broker: BrokerProcess, kafka_lib: Path) -> None:
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
    await_consumer_protocol(bs)

    refused(
        kafka_features(kafka_lib, bs, "upgrade", "--feature", "group.version=2"),
        "Could not upgrade group.version to 2. " + ALL_FAILED + "Invalid update version 2 for feature group.version. Local controller 1 only supports versions 0-1",
    )
    ok(kafka_features(kafka_lib, bs, "upgrade", "--feature", "group.version=1"), "group.version was upgraded to 1.")
    # Kafka's tool itself refuses to lower a level with `upgrade`: nothing is sent.
    lowered = kafka_features(kafka_lib, bs, "upgrade", "--feature", "group.version=0")
    assert (lowered.returncode, lowered.stdout) == (1, "")
    assert "The upgradeType flag should be set to SAFE_DOWNGRADE or UNSAFE_DOWNGRADE when the provided maxVersionLevel:0 is < 1." in lowered.stderr
    ok(kafka_features(kafka_lib, bs, "downgrade", "--feature", "group.version=0", "--dry-run"), "group.version can be downgraded to 0.")
    ok(kafka_features(kafka_lib, bs, "downgrade", "--feature", "group.version=0"), "group.version was downgraded to 0.")
    await_finalized(bs, "group.version", 0)
    assert described(kafka_lib, bs)[1] == describe_line("group.version", "0", "1", "0")
    assert_consumer_protocol_refused(bs)

    ok(kafka_features(kafka_lib, bs, "upgrade", "--feature", "group.version=1", "--dry-run"), "group.version can be upgraded to 1.")
    ok(kafka_features(kafka_lib, bs, "upgrade", "--feature", "group.version=1"), "group.version was upgraded to 1.")
    await_finalized(bs, "group.version", 1)
    await_consumer_protocol(bs)
    ok(kafka_features(kafka_lib, bs, "disable", "--feature", "group.version"), "group.version was disabled.")
    await_finalized(bs, "group.version", 0)
    assert_consumer_protocol_refused(bs)
    ok(kafka_features(kafka_lib, bs, "upgrade", "--feature", "group.version=1"), "group.version was upgraded to 1.")
    await_finalized(bs, "group.version", 1)
    await_consumer_protocol(bs)


@pytest.fixture
def node_at_3_9(tmp_path: Path) -> Iterator[BrokerProcess]:
    node = BrokerProcess(tmp_path / "data1")
    # One node: the offsets topic must fit on it.
    props = combined_node(tmp_path, client_port=node.port, controller_port=free_port()) | {"offsets.topic.replication.factor": "1"}
    node.config_file = write_config(tmp_path / "server.properties", props)
    formatted = kbroker("storage", "format", "-t", CLUSTER, "-c", str(node.config_file), "--release-version", "3.9")
    assert formatted.returncode == 0, formatted.stderr
    node.start()
    yield node
    node.kill()


def test_a_node_formatted_at_3_9_starts_without_consumer_groups(node_at_3_9: BrokerProcess, kafka_lib: Path) -> None:
    """Kafka 4.4 formatted at 3.9 finalizes no group.version (GV_1 bootstraps from 4.0-IV0), so it
    refuses KIP-848 until group.version is upgraded, which needs no newer metadata.version."""
    bs = node_at_3_9.bootstrap
    assert described(kafka_lib, bs) == [
        describe_line("eligible.leader.replicas.version", "0", "1", "0"),
        describe_line("group.version", "0", "1", "0"),
        describe_line("kraft.version", "0", "1", "0"),
        describe_line("metadata.version", "3.3-IV3", "4.4-IV2", "3.9-IV0"),
        describe_line("share.version", "0", "2", "0"),
        describe_line("streams.version", "0", "1", "0"),
        describe_line("transaction.version", "0", "2", "0"),
    ]
    assert_consumer_protocol_refused(bs)
    ok(kafka_features(kafka_lib, bs, "upgrade", "--feature", "group.version=1"), "group.version was upgraded to 1.")
    await_finalized(bs, "group.version", 1)
    await_consumer_protocol(bs)
