"""Streams group records byte for byte as Kafka 4.4 writes them.

The hex fixtures below are what Kafka 4.4's own generated classes (kafka-group-coordinator-4.4.0.jar,
org.apache.kafka.coordinator.group.generated.*) produced with this program, compiled and run with
Java 17 against ~/.cache/kbroker-bench/kafka-4.4.0/lib/* (``javac -cp "$LIB/*"
StreamsRecordBytes.java && java -cp "$LIB/*:." StreamsRecordBytes``); each output line is
"<name> <hex>"::

    import org.apache.kafka.common.protocol.ApiMessage;
    import org.apache.kafka.common.protocol.MessageUtil;
    import org.apache.kafka.coordinator.group.generated.*;
    import java.util.List;

    public class StreamsRecordBytes {
        static String hex(byte[] b) { StringBuilder s = new StringBuilder(); for (byte x : b) s.append(String.format("%02x", x)); return s.toString(); }
        static void key(String name, short type, ApiMessage key) { System.out.println(name + " " + hex(MessageUtil.toCoordinatorTypePrefixedBytes(key))); }
        static void value(String name, ApiMessage value) { System.out.println(name + " " + hex(MessageUtil.toVersionPrefixedBytes((short) 0, value))); }
        public static void main(String[] args) {
            key("metadata_key", (short) 17, new StreamsGroupMetadataKey().setGroupId("app"));
            key("member_key", (short) 19, new StreamsGroupMemberMetadataKey().setGroupId("app").setMemberId("m1"));
            key("target_metadata_key", (short) 20, new StreamsGroupTargetAssignmentMetadataKey().setGroupId("app"));
            key("target_member_key", (short) 21, new StreamsGroupTargetAssignmentMemberKey().setGroupId("app").setMemberId("m1"));
            key("current_key", (short) 22, new StreamsGroupCurrentMemberAssignmentKey().setGroupId("app").setMemberId("m1"));
            key("topology_key", (short) 23, new StreamsGroupTopologyKey().setGroupId("app"));
            value("metadata_plain", new StreamsGroupMetadataValue().setEpoch(5).setMetadataHash(-1234567890123L));
            value("metadata_tagged", new StreamsGroupMetadataValue().setEpoch(5).setMetadataHash(42L).setValidatedTopologyEpoch(3)
                .setLastAssignmentConfigs(List.of(new StreamsGroupMetadataValue.LastAssignmentConfig().setKey("num.standby.replicas").setValue("1")))
                .setStoredDescriptionTopologyEpoch(-2).setFailedDescriptionTopologyEpoch(7));
            value("member_full", new StreamsGroupMemberMetadataValue().setInstanceId(null).setRackId("rack-a").setClientId("c").setClientHost("/10.0.0.1")
                .setRebalanceTimeoutMs(300000).setTopologyEpoch(2).setProcessId("p-1")
                .setUserEndpoint(new StreamsGroupMemberMetadataValue.Endpoint().setHost("h").setPort(65535))
                .setClientTags(List.of(new StreamsGroupMemberMetadataValue.KeyValue().setKey("zone").setValue("z1"))));
            value("member_no_endpoint", new StreamsGroupMemberMetadataValue().setInstanceId("i").setRackId(null).setClientId("c").setClientHost("h")
                .setTopologyEpoch(0).setProcessId("p").setUserEndpoint(null).setClientTags(List.of()));
            value("target_metadata", new StreamsGroupTargetAssignmentMetadataValue().setAssignmentEpoch(9).setAssignmentTimestamp(1700000000000L));
            value("target_member", new StreamsGroupTargetAssignmentMemberValue()
                .setActiveTasks(List.of(new StreamsGroupTargetAssignmentMemberValue.TaskIds().setSubtopologyId("0").setPartitions(List.of(0, 2))))
                .setStandbyTasks(List.of(new StreamsGroupTargetAssignmentMemberValue.TaskIds().setSubtopologyId("1").setPartitions(List.of(1))))
                .setWarmupTasks(List.of()));
            value("current", new StreamsGroupCurrentMemberAssignmentValue().setMemberEpoch(4).setPreviousMemberEpoch(3).setState((byte) 1)
                .setActiveTasks(List.of(new StreamsGroupCurrentMemberAssignmentValue.TaskIds().setSubtopologyId("0").setPartitions(List.of(0, 1)).setAssignmentEpochs(List.of(3, 4))))
                .setStandbyTasks(List.of(new StreamsGroupCurrentMemberAssignmentValue.TaskIds().setSubtopologyId("1").setPartitions(List.of(2))))
                .setWarmupTasks(List.of())
                .setActiveTasksPendingRevocation(List.of(new StreamsGroupCurrentMemberAssignmentValue.TaskIds().setSubtopologyId("0").setPartitions(List.of(5))))
                .setStandbyTasksPendingRevocation(List.of()).setWarmupTasksPendingRevocation(List.of()));
            value("topology", new StreamsGroupTopologyValue().setEpoch(1).setSubtopologies(List.of(
                new StreamsGroupTopologyValue.Subtopology().setSubtopologyId("0").setSourceTopics(List.of("in")).setSourceTopicRegex(List.of())
                    .setStateChangelogTopics(List.of(new StreamsGroupTopologyValue.TopicInfo().setName("app-store-changelog").setPartitions(0).setReplicationFactor((short) 0)
                        .setTopicConfigs(List.of(new StreamsGroupTopologyValue.TopicConfig().setKey("cleanup.policy").setValue("compact")))))
                    .setRepartitionSinkTopics(List.of("app-rep"))
                    .setRepartitionSourceTopics(List.of())
                    .setCopartitionGroups(List.of(new StreamsGroupTopologyValue.CopartitionGroup().setSourceTopics(List.of((short) 0)).setSourceTopicRegex(List.of()).setRepartitionSourceTopics(List.of()))),
                new StreamsGroupTopologyValue.Subtopology().setSubtopologyId("1").setSourceTopics(List.of()).setSourceTopicRegex(List.of())
                    .setStateChangelogTopics(List.of()).setRepartitionSinkTopics(List.of())
                    .setRepartitionSourceTopics(List.of(new StreamsGroupTopologyValue.TopicInfo().setName("app-rep").setPartitions(4).setReplicationFactor((short) 3).setTopicConfigs(List.of())))
                    .setCopartitionGroups(List.of()))));
        }
    }
"""

from __future__ import annotations

import pytest

from broker.group.coordinator_records import CoordinatorRecordError, UnknownRecordType
from broker.group.streams_group_records import (
    CopartitionGroup,
    Endpoint,
    KeyValue,
    LastAssignmentConfig,
    StreamsGroupCurrentMemberAssignmentKey,
    StreamsGroupCurrentMemberAssignmentValue,
    StreamsGroupMemberMetadataKey,
    StreamsGroupMemberMetadataValue,
    StreamsGroupMetadataKey,
    StreamsGroupMetadataValue,
    StreamsGroupTargetAssignmentMemberKey,
    StreamsGroupTargetAssignmentMemberValue,
    StreamsGroupTargetAssignmentMetadataKey,
    StreamsGroupTargetAssignmentMetadataValue,
    StreamsGroupTopologyKey,
    StreamsGroupTopologyValue,
    StreamsTopicConfig,
    StreamsTopicInfo,
    Subtopology,
    TaskIds,
    TaskIdsWithEpochs,
    decode_record,
    encode_key,
    encode_value,
)

KAFKA = {
    "metadata_key": "00110003617070",
    "member_key": "0013000361707000026d31",
    "target_metadata_key": "00140003617070",
    "target_member_key": "0015000361707000026d31",
    "current_key": "0016000361707000026d31",
    "topology_key": "00170003617070",
    "metadata_plain": "000000000005fffffee08e04fb3500",
    "metadata_tagged": "000000000005000000000000002a04000400000003011902156e756d2e7374616e6462792e7265706c696361730231000204fffffffe030400000007",
    "member_full": "000000077261636b2d6102630a2f31302e302e302e31000493e00000000204702d31010268ffff0002057a6f6e65037a310000",
    "member_no_endpoint": "000002690002630268ffffffff000000000270ff0100",
    "target_metadata": "0000000000090100080000018bcfe56800",
    "target_member": "0000020230030000000000000002000202310200000001000100",
    "current": "000000000004000000030102023003000000000000000101000903000000030000000402023102000000020001020230020000000500010100",
    "topology": "0000000000010302300203696e0102146170702d73746f72652d6368616e67656c6f67000000000000020f636c65616e75702e706f6c69637908636f6d70616374000002086170702d72657001020200000101000002310101010102086170702d7265700000000400030100010000",
}

KEYS = {
    "metadata_key": StreamsGroupMetadataKey(group_id="app"),
    "member_key": StreamsGroupMemberMetadataKey(group_id="app", member_id="m1"),
    "target_metadata_key": StreamsGroupTargetAssignmentMetadataKey(group_id="app"),
    "target_member_key": StreamsGroupTargetAssignmentMemberKey(group_id="app", member_id="m1"),
    "current_key": StreamsGroupCurrentMemberAssignmentKey(group_id="app", member_id="m1"),
    "topology_key": StreamsGroupTopologyKey(group_id="app"),
}

VALUES = {
    "metadata_plain": ("metadata_key", StreamsGroupMetadataValue(epoch=5, metadata_hash=-1234567890123)),
    "metadata_tagged": (
        "metadata_key",
        StreamsGroupMetadataValue(
            epoch=5,
            metadata_hash=42,
            validated_topology_epoch=3,
            last_assignment_configs=(LastAssignmentConfig(key="num.standby.replicas", value="1"),),
            stored_description_topology_epoch=-2,
            failed_description_topology_epoch=7,
        ),
    ),
    "member_full": (
        "member_key",
        StreamsGroupMemberMetadataValue(
            instance_id=None,
            rack_id="rack-a",
            client_id="c",
            client_host="/10.0.0.1",
            rebalance_timeout_ms=300000,
            topology_epoch=2,
            process_id="p-1",
            user_endpoint=Endpoint(host="h", port=65535),
            client_tags=(KeyValue(key="zone", value="z1"),),
        ),
    ),
    "member_no_endpoint": (
        "member_key",
        StreamsGroupMemberMetadataValue(instance_id="i", rack_id=None, client_id="c", client_host="h", topology_epoch=0, process_id="p", client_tags=()),
    ),
    "target_metadata": ("target_metadata_key", StreamsGroupTargetAssignmentMetadataValue(assignment_epoch=9, assignment_timestamp=1700000000000)),
    "target_member": (
        "target_member_key",
        StreamsGroupTargetAssignmentMemberValue(
            active_tasks=(TaskIds(subtopology_id="0", partitions=(0, 2)),),
            standby_tasks=(TaskIds(subtopology_id="1", partitions=(1,)),),
            warmup_tasks=(),
        ),
    ),
    "current": (
        "current_key",
        StreamsGroupCurrentMemberAssignmentValue(
            member_epoch=4,
            previous_member_epoch=3,
            state=1,
            active_tasks=(TaskIdsWithEpochs(subtopology_id="0", partitions=(0, 1), assignment_epochs=(3, 4)),),
            standby_tasks=(TaskIdsWithEpochs(subtopology_id="1", partitions=(2,)),),
            warmup_tasks=(),
            active_tasks_pending_revocation=(TaskIdsWithEpochs(subtopology_id="0", partitions=(5,)),),
            standby_tasks_pending_revocation=(),
            warmup_tasks_pending_revocation=(),
        ),
    ),
    "topology": (
        "topology_key",
        StreamsGroupTopologyValue(
            epoch=1,
            subtopologies=(
                Subtopology(
                    subtopology_id="0",
                    source_topics=("in",),
                    source_topic_regex=(),
                    state_changelog_topics=(
                        StreamsTopicInfo(name="app-store-changelog", partitions=0, replication_factor=0, topic_configs=(StreamsTopicConfig(key="cleanup.policy", value="compact"),)),
                    ),
                    repartition_sink_topics=("app-rep",),
                    repartition_source_topics=(),
                    copartition_groups=(CopartitionGroup(source_topics=(0,), source_topic_regex=(), repartition_source_topics=()),),
                ),
                Subtopology(
                    subtopology_id="1",
                    source_topics=(),
                    source_topic_regex=(),
                    state_changelog_topics=(),
                    repartition_sink_topics=(),
                    repartition_source_topics=(StreamsTopicInfo(name="app-rep", partitions=4, replication_factor=3, topic_configs=()),),
                    copartition_groups=(),
                ),
            ),
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(KEYS))
def test_keys_are_kafkas_bytes(name: str) -> None:
    assert encode_key(KEYS[name]).hex() == KAFKA[name]
    assert decode_record(bytes.fromhex(KAFKA[name]), None) == (KEYS[name], None)


@pytest.mark.parametrize("name", sorted(VALUES))
def test_values_are_kafkas_bytes(name: str) -> None:
    key_name, value = VALUES[name]
    assert encode_value(value).hex() == KAFKA[name]
    assert decode_record(bytes.fromhex(KAFKA[key_name]), bytes.fromhex(KAFKA[name])) == (KEYS[key_name], value)


def test_other_record_types_are_unknown_here() -> None:
    with pytest.raises(UnknownRecordType):
        decode_record(bytes.fromhex("00030003617070"), None)  # a consumer group record


def test_a_value_version_kafka_does_not_have_is_refused() -> None:
    with pytest.raises(CoordinatorRecordError):
        decode_record(bytes.fromhex(KAFKA["metadata_key"]), bytes.fromhex("0001" + KAFKA["metadata_plain"][4:]))


def test_truncated_and_trailing_bytes_are_refused() -> None:
    value = bytes.fromhex(KAFKA["member_full"])
    with pytest.raises(CoordinatorRecordError):
        decode_record(bytes.fromhex(KAFKA["member_key"]), value[:-3])
    with pytest.raises(CoordinatorRecordError):
        decode_record(bytes.fromhex(KAFKA["member_key"]), value + b"\x00")


def test_a_port_out_of_uint16_is_refused() -> None:
    value = StreamsGroupMemberMetadataValue(
        instance_id=None, rack_id=None, client_id="c", client_host="h", topology_epoch=0, process_id="p", user_endpoint=Endpoint(host="h", port=70000), client_tags=()
    )
    with pytest.raises(CoordinatorRecordError):
        encode_value(value)


def test_an_unknown_tag_of_a_later_version_is_skipped() -> None:
    # metadata_plain with one tagged field (tag 9, 2 bytes) Kafka 4.4 does not know.
    raw = bytes.fromhex(KAFKA["metadata_plain"][:-2] + "0109020000")
    assert decode_record(bytes.fromhex(KAFKA["metadata_key"]), raw) == (KEYS["metadata_key"], VALUES["metadata_plain"][1])
