"""Admin APIs that stock clients rarely send, spoken on the wire: DescribeLogDirs,
OffsetForLeaderEpoch, all-topics Metadata; and a broker started from a server.properties file."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions
from kio.schema.create_acls.v3 import request as create_acls_v3
from kio.schema.delete_acls.v3 import request as delete_acls_v3
from kio.schema.describe_acls.v3 import request as describe_acls_v3
from kio.schema.describe_log_dirs.v1 import request as dld_v1
from kio.schema.describe_log_dirs.v4 import request as dld_v4
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v1 import request as metadata_v1
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.offset_for_leader_epoch.v4 import request as ofle_v4

from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import create_topic, produce_acked, unique_topic
from tests.integration.wire import request


@pytest.mark.parametrize("module", [dld_v1, dld_v4], ids=["v1", "v4"])
def test_describe_log_dirs_reports_partition_sizes(module_broker: BrokerProcess, module) -> None:  # type: ignore[no-untyped-def]
    topic = unique_topic("dirs")
    create_topic(module_broker.bootstrap, topic, partitions=2)
    produce_acked(module_broker.bootstrap, topic, [b"x" * 100] * 10, partition=1)
    body = module.DescribeLogDirsRequest(topics=(module.DescribableLogDirTopic(topic=topic, partitions=(0, 1)),))
    response = request(module_broker.bootstrap, body)
    [result] = response.results
    assert result.error_code == ErrorCode.none and Path(result.log_dir) == module_broker.data_dir
    [described] = [t for t in result.topics if t.name == topic]
    sizes = {p.partition_index: p.partition_size for p in described.partitions}
    assert sizes[0] == 0 and sizes[1] >= 1000, sizes


@pytest.mark.parametrize("module", [metadata_v1, metadata_v12], ids=["v1", "v12"])
def test_all_topics_metadata_follows_every_change(module_broker: BrokerProcess, module) -> None:  # type: ignore[no-untyped-def]
    # The all-topics answer is encoded once per metadata change: a new topic or new partitions
    # must show in the next one, and the same request twice gets the same answer.
    def all_topics() -> dict[str, int]:
        response = request(module_broker.bootstrap, module.MetadataRequest(topics=None, **extra))
        return {t.name: len(t.partitions) for t in response.topics}

    extra = {"allow_auto_topic_creation": False, "include_topic_authorized_operations": False} if module is metadata_v12 else {}
    topic = unique_topic("all-topics")
    before = all_topics()
    assert topic not in before and all_topics() == before
    create_topic(module_broker.bootstrap, topic, partitions=2)
    assert all_topics()[topic] == 2
    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap})
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(15)
    assert all_topics()[topic] == 5


def test_offset_for_leader_epoch(module_broker: BrokerProcess) -> None:
    topic = unique_topic("epochs")
    create_topic(module_broker.bootstrap, topic)
    produce_acked(module_broker.bootstrap, topic, [b"a", b"b", b"c"])

    def ask(leader_epoch: int, current_leader_epoch: int = -1, partition: int = 0):  # type: ignore[no-untyped-def]
        part = ofle_v4.OffsetForLeaderPartition(partition=partition, current_leader_epoch=current_leader_epoch, leader_epoch=leader_epoch)
        body = ofle_v4.OffsetForLeaderEpochRequest(replica_id=-1, topics=(ofle_v4.OffsetForLeaderTopic(topic=topic, partitions=(part,)),))
        [t] = request(module_broker.bootstrap, body).topics
        [p] = t.partitions
        return p.error_code, p.leader_epoch, p.end_offset

    assert ask(0) == (ErrorCode.none, 0, 3), "epoch 0 ends at the log end"
    assert ask(7) == (ErrorCode.none, -1, -1), "an epoch above the leader's is unknown: UNDEFINED_EPOCH_OFFSET"
    assert ask(0, current_leader_epoch=5)[0] == ErrorCode.unknown_leader_epoch
    assert ask(0, partition=9)[0] == ErrorCode.unknown_topic_or_partition


def test_start_from_a_server_properties_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data)
    props = tmp_path / "server.properties"
    props.write_text(
        "# a comment, then Kafka's names\n"
        f"listeners=PLAINTEXT://127.0.0.1:{broker.port}\n"
        f"log.dirs={data}\n"
        "num.partitions=3\n"
        "log.flush.interval.messages=1\n"
    )
    broker.config_file = props
    broker.start()
    try:
        topic = unique_topic("props")
        produce_acked(broker.bootstrap, topic, [b"v"])  # auto-created with num.partitions
        metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(topic, timeout=10)
        assert len(metadata.topics[topic].partitions) == 3
    finally:
        broker.stop()


def test_acl_apis_without_an_authorizer_answer_security_disabled_as_kafka(module_broker: BrokerProcess) -> None:
    """Kafka's answers and messages with no authorizer configured (kafka-acls.sh --list, --add and
    --remove print the same first line against Kafka 4.4 and kbroker)."""
    described = request(
        module_broker.bootstrap,
        describe_acls_v3.DescribeAclsRequest(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1, permission_type=1
        ),
    )
    assert (described.error_code, described.error_message, described.resources) == (ErrorCode.security_disabled, "No Authorizer is configured on the broker", ())
    creation = create_acls_v3.AclCreation(resource_type=2, resource_name="t", resource_pattern_type=3, principal="User:alice", host="*", operation=3, permission_type=3)
    created = request(module_broker.bootstrap, create_acls_v3.CreateAclsRequest(creations=(creation, creation)))
    assert [(r.error_code, r.error_message) for r in created.results] == [(ErrorCode.security_disabled, "No Authorizer is configured.")] * 2
    acl_filter = delete_acls_v3.DeleteAclsFilter(
        resource_type_filter=2, resource_name_filter="t", pattern_type_filter=3, principal_filter=None, host_filter=None, operation=1, permission_type=1
    )
    deleted = request(module_broker.bootstrap, delete_acls_v3.DeleteAclsRequest(filters=(acl_filter,)))
    assert [(r.error_code, r.error_message, r.matching_acls) for r in deleted.filter_results] == [(ErrorCode.security_disabled, "No Authorizer is configured.", ())]
