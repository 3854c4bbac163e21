"""The versions whose tops kbroker raised to Kafka 4.4's, each new version's behaviour over TCP.

Every expectation here was checked against a real Kafka 4.4 node with the same requests:
Produce v13, OffsetCommit v10 and OffsetFetch v10 name topics by ID (KIP-516, KIP-848) and answer
UNKNOWN_TOPIC_ID for an ID no topic has (the zero UUID included); Fetch v18 carries the
follower's high watermark (KIP-1166), which a broker ignores; ListOffsets v11 takes -6
(EARLIEST_PENDING_UPLOAD, KIP-1023), -1 without tiered storage; Metadata v13 has a top-level
error code (KIP-1102), none in an answer.

Issue 34 raised the rest to Kafka 4.4's tops, each answer here diffed against a Kafka 4.4 node's
to the same raw request: DescribeGroups v6 (KIP-1043: GROUP_ID_NOT_FOUND with "Group g not
found." or "Group g is not a classic group."), ConsumerGroupDescribe v1 (KIP-1099: MemberType),
DescribeCluster v2 (KIP-1073: IncludeFencedBrokers, IsFenced), DescribeLogDirs v5 (KIP-1066:
IsCordoned, false without cordoned.log.dirs), ListTransactions v2 (KIP-1152: a regular
expression the whole transactional id matches; INVALID_REGULAR_EXPRESSION alone for a bad one),
WriteTxnMarkers v2 (KIP-1228: a TV2 marker's epoch must be above an open transaction's) and
AddRaftVoter v1 (AckWhenCommitted; a static quorum refuses it in Kafka's words). The Kafka tools
that send them get what they get from Kafka.

InitProducerId stays at 5, as the top a Kafka 4.4 node lists with its defaults: its spec marks v6
(KIP-939's two-phase commit) latestVersionUnstable, and the node drops the connection on any v6
request ("Received request for disabled api with key 22 (INIT_PRODUCER_ID) and version 6"),
whatever its flags, as kbroker does. (With unstable.api.versions.enable=true it answers v6; those
answers are pinned in tests/unit/test_kafka44_schemas.py against kbroker's handler.)

Then the three kio 0.6.5 has no schema for (protocol/schema/), each diffed the same way: ApiVersions
v5 (KIP-1242: REBOOTSTRAP_REQUIRED for another cluster or node, INVALID_REQUEST for one of the two
alone, byte for byte), DeleteGroups v3 (a null ErrorMessage per group) and TxnOffsetCommit v6
(KIP-1319: topic IDs, UNKNOWN_TOPIC_ID; GROUP_ID_NOT_FOUND and STALE_MEMBER_EPOCH where v5 says
ILLEGAL_GENERATION).

The streams group APIs (KIP-1071) are listed at v0-1 as Kafka 4.4 lists them, and KIP-1331's
StreamsGroupTopologyDescriptionUpdate at v0; their v1 and its v0 (protocol/schema/ too) are diffed in
tests/integration/test_streams_groups_wire.py and tests/unit/test_streams_groups_v1.py.
"""

from __future__ import annotations

import datetime
import socket
import struct
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.add_partitions_to_txn.v3 import request as add_partitions_v3
from kio.schema.add_raft_voter.v1 import request as add_raft_voter_v1
from kio.schema.api_versions.v3 import request as api_versions_v3
from kio.schema.consumer_group_describe.v1 import request as consumer_group_describe_v1
from kio.schema.consumer_group_heartbeat.v1 import request as consumer_group_heartbeat_v1
from kio.schema.describe_cluster.v2 import request as describe_cluster_v2
from kio.schema.describe_groups.v5 import request as describe_groups_v5
from kio.schema.describe_groups.v6 import request as describe_groups_v6
from kio.schema.describe_log_dirs.v5 import request as describe_log_dirs_v5
from kio.schema.fetch.v18 import request as fetch_v18
from kio.schema.find_coordinator.v4 import request as find_coordinator_v4
from kio.schema.init_producer_id.v5 import request as init_producer_id_v5
from kio.schema.init_producer_id.v6 import request as init_producer_id_v6
from kio.schema.list_transactions.v2 import request as list_transactions_v2
from kio.schema.list_offsets.v11 import request as list_offsets_v11
from kio.schema.metadata.v13 import request as metadata_v13
from kio.schema.offset_commit.v10 import request as offset_commit_v10
from kio.schema.offset_fetch.v10 import request as offset_fetch_v10
from kio.schema.produce.v11 import request as produce_v11
from kio.schema.produce.v13 import request as produce_v13
from kio.schema.txn_offset_commit.v5 import request as txn_offset_commit_v5
from kio.schema.write_txn_markers.v2 import request as write_txn_markers_v2
from kio.static.primitive import i8, i16, i32, i64

from benchmarks.apache_kafka import TOOL_JVM_OPTS
from broker.wire_client import encode_request, recv_exact
from protocol.records import build_batch
from protocol.schema.api_versions.v5 import request as api_versions_v5
from protocol.schema.delete_groups.v3 import request as delete_groups_v3
from protocol.schema.txn_offset_commit.v6 import request as txn_offset_commit_v6
from tests.integration.conftest import BrokerProcess, StartBroker
from tests.kafka_tools import kafka_tool
from tests.integration.helpers import create_topic, unique_topic, wait_for
from tests.integration.wire import request

NONE, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID = 0, 3, 100
COORDINATOR_ERRORS = (14, 15, 16)  # load in progress, not available, not coordinator
# Kafka 4.4's BrokerApiVersionsCommand against a 4.4 node, for the APIs whose tops kbroker raised.
# InitProducerId (22): 5, v6 being latestVersionUnstable in 4.4 (listed only with unstable.api.versions.enable).
KAFKA_44_TOPS = {0: 13, 1: 18, 2: 11, 3: 13, 8: 10, 9: 10, 15: 6, 18: 5, 22: 5, 27: 2, 28: 6, 35: 5, 42: 3, 60: 2, 66: 2, 69: 1, 80: 1}
# KIP-932's share APIs as Kafka 4.4's BrokerApiVersionsCommand lists them on a node with its defaults
# (whatever share.version is): ShareGroupHeartbeat/Describe, ShareFetch/Acknowledge, the share
# coordinator's five state APIs and the share group offsets APIs.
KAFKA_44_SHARE_RANGES = {76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2), 83: (0, 0), 84: (0, 0), 85: (0, 1), 86: (0, 0), 87: (0, 1), 90: (0, 1), 91: (0, 0), 92: (0, 0)}
# KIP-1071's StreamsGroupHeartbeat and StreamsGroupDescribe as Kafka 4.4's BrokerApiVersionsCommand
# lists them on a node with its defaults (whatever streams.version): v0-1, v1 being KIP-1331's; and
# KIP-1331's StreamsGroupTopologyDescriptionUpdate v0, which both refuse without a topology
# description plugin (Kafka's default).
KAFKA_44_STREAMS_RANGES = {88: (0, 1), 89: (0, 1), 93: (0, 0)}
GROUP_ID_NOT_FOUND, INVALID_PRODUCER_EPOCH, UNSUPPORTED_VERSION, INVALID_REGULAR_EXPRESSION = 69, 47, 35, 128
SECOND = datetime.timedelta(seconds=1)


def topic_id(bootstrap: str, name: str) -> uuid.UUID:
    answer = request(bootstrap, metadata_request(metadata_v13.MetadataRequestTopic(topic_id=None, name=name)))
    assert answer.error_code == NONE
    assert answer.topics[0].topic_id is not None
    return answer.topics[0].topic_id


def metadata_request(*topics: metadata_v13.MetadataRequestTopic) -> metadata_v13.MetadataRequest:
    return metadata_v13.MetadataRequest(topics=topics, allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def produce_to(topic: uuid.UUID | None, *partitions: int) -> produce_v13.TopicProduceData:
    batch = build_batch([(b"k", f"v{topic}".encode(), (), int(time.time() * 1000))])
    return produce_v13.TopicProduceData(topic_id=topic, partition_data=tuple(produce_v13.PartitionProduceData(index=i32(p), records=batch) for p in partitions))


def errors_by_topic(topics: tuple) -> dict[uuid.UUID | None, dict[int, int]]:  # type: ignore[type-arg]
    return {t.topic_id: {p.index if hasattr(p, "index") else p.partition_index: p.error_code for p in getattr(t, "partition_responses", None) or t.partitions} for t in topics}


@pytest.fixture(scope="module")
def topic(module_broker: BrokerProcess) -> tuple[str, uuid.UUID]:
    name = unique_topic("v44")
    create_topic(module_broker.bootstrap, name, partitions=2)
    return name, topic_id(module_broker.bootstrap, name)


def test_tops_match_kafka_44(module_broker: BrokerProcess) -> None:
    answer = request(module_broker.bootstrap, api_versions_v3.ApiVersionsRequest(client_software_name="test", client_software_version="1"))
    tops = {int(k.api_key): int(k.max_version) for k in answer.api_keys}
    assert {key: tops[key] for key in KAFKA_44_TOPS} == KAFKA_44_TOPS


@pytest.mark.parametrize("kafka_44_ranges", [KAFKA_44_SHARE_RANGES, KAFKA_44_STREAMS_RANGES], ids=["share", "streams"])
def test_group_apis_are_listed_as_kafka_44_lists_them(module_broker: BrokerProcess, kafka_44_ranges: dict[int, tuple[int, int]]) -> None:
    answer = request(module_broker.bootstrap, api_versions_v3.ApiVersionsRequest(client_software_name="test", client_software_version="1"))
    ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}
    assert {key: ranges.get(key) for key in kafka_44_ranges} == kafka_44_ranges


def test_produce_v13_by_topic_id_and_read_back_with_fetch_v18(module_broker: BrokerProcess, topic: tuple[str, uuid.UUID]) -> None:
    bs, (_, tid) = module_broker.bootstrap, topic
    stranger = uuid.uuid4()
    answer = request(bs, produce_v13.ProduceRequest(transactional_id=None, acks=i16(-1), timeout=5 * SECOND, topic_data=(produce_to(tid, 0, 1, 7), produce_to(stranger, 0), produce_to(None, 0))))
    # The topics are named as they were asked for: the zero UUID comes back as the zero UUID.
    assert errors_by_topic(answer.responses) == {tid: {0: NONE, 1: NONE, 7: UNKNOWN_TOPIC_OR_PARTITION}, stranger: {0: UNKNOWN_TOPIC_ID}, None: {0: UNKNOWN_TOPIC_ID}}
    base = {p.index: p.base_offset for p in answer.responses[0].partition_responses}
    assert base[0] >= 0 and base[1] >= 0

    # KIP-1166's tagged high watermark is what a KRaft follower sends; a broker reads past it.
    partition = fetch_v18.FetchPartition(partition=i32(0), fetch_offset=i64(base[0]), partition_max_bytes=i32(1 << 20), high_watermark=i64(0))
    fetched = request(
        bs,
        fetch_v18.FetchRequest(
            max_wait=SECOND / 10, min_bytes=i32(1), topics=(fetch_v18.FetchTopic(topic_id=tid, partitions=(partition,)),), forgotten_topics_data=()
        ),
    )
    assert fetched.error_code == NONE
    data = fetched.responses[0].partitions[0]
    assert (fetched.responses[0].topic_id, data.error_code, data.high_watermark) == (tid, NONE, base[0] + 1)
    assert f"v{tid}".encode() in data.records


def test_acks_0_produce_v13_to_an_unknown_topic_id_closes_the_connection(module_broker: BrokerProcess) -> None:
    # No response can carry UNKNOWN_TOPIC_ID, so the connection goes, as for any failed acks=0 produce.
    with pytest.raises(ConnectionError):
        request(module_broker.bootstrap, produce_v13.ProduceRequest(transactional_id=None, acks=i16(0), timeout=5 * SECOND, topic_data=(produce_to(uuid.uuid4(), 0),)))


def test_metadata_v13_top_level_error_code(module_broker: BrokerProcess, topic: tuple[str, uuid.UUID]) -> None:
    (name, tid), stranger = topic, uuid.uuid4()
    answer = request(module_broker.bootstrap, metadata_request(metadata_v13.MetadataRequestTopic(topic_id=tid, name=None), metadata_v13.MetadataRequestTopic(topic_id=stranger, name=None)))
    assert answer.error_code == NONE
    assert [(t.topic_id, t.name, t.error_code) for t in answer.topics] == [(tid, name, NONE), (stranger, None, UNKNOWN_TOPIC_ID)]


def test_list_offsets_v11_earliest_pending_upload(module_broker: BrokerProcess, topic: tuple[str, uuid.UUID]) -> None:
    name, _ = topic
    partition = list_offsets_v11.ListOffsetsPartition(partition_index=i32(0), current_leader_epoch=i32(-1), timestamp=i64(-6))
    answer = request(
        module_broker.bootstrap,
        list_offsets_v11.ListOffsetsRequest(replica_id=i32(-1), isolation_level=i8(0), topics=(list_offsets_v11.ListOffsetsTopic(name=name, partitions=(partition,)),), timeout=SECOND),
    )
    got = answer.topics[0].partitions[0]
    assert (got.error_code, got.timestamp, got.offset, got.leader_epoch) == (NONE, -1, -1, -1)


def commit_v10(bootstrap: str, group: str, topics: tuple[offset_commit_v10.OffsetCommitRequestTopic, ...]) -> offset_commit_v10.OffsetCommitResponse:
    body = offset_commit_v10.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=i32(-1), member_id="", group_instance_id=None, topics=topics)
    answer = None

    def committed() -> bool:
        nonlocal answer
        answer = request(bootstrap, body)
        return all(p.error_code not in COORDINATOR_ERRORS for t in answer.topics for p in t.partitions)

    assert wait_for(committed, timeout_s=30)
    return answer  # type: ignore[return-value]


def commit_topic(tid: uuid.UUID | None, *offsets: tuple[int, int]) -> offset_commit_v10.OffsetCommitRequestTopic:
    return offset_commit_v10.OffsetCommitRequestTopic(
        topic_id=tid,
        partitions=tuple(
            offset_commit_v10.OffsetCommitRequestPartition(partition_index=i32(p), committed_offset=i64(o), committed_leader_epoch=i32(-1), committed_metadata="m") for p, o in offsets
        ),
    )


def fetch_v10(bootstrap: str, group: str, topics: tuple[offset_fetch_v10.OffsetFetchRequestTopics, ...] | None) -> offset_fetch_v10.OffsetFetchResponseGroup:
    group_request = offset_fetch_v10.OffsetFetchRequestGroup(group_id=group, member_id=None, member_epoch=i32(-1), topics=topics)
    answer = request(bootstrap, offset_fetch_v10.OffsetFetchRequest(groups=(group_request,), require_stable=False))
    assert answer.groups[0].error_code == NONE
    return answer.groups[0]


def test_offset_commit_and_fetch_v10_by_topic_id(module_broker: BrokerProcess, topic: tuple[str, uuid.UUID]) -> None:
    bs, (_, tid), stranger, group = module_broker.bootstrap, topic, uuid.uuid4(), unique_topic("v44-group")
    assert wait_for(lambda: request(bs, find_coordinator_v4.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,))).coordinators[0].error_code == NONE)

    committed = commit_v10(bs, group, (commit_topic(tid, (0, 5), (1, 7)), commit_topic(stranger, (0, 1)), commit_topic(None, (0, 1))))
    assert errors_by_topic(committed.topics) == {tid: {0: NONE, 1: NONE}, stranger: {0: UNKNOWN_TOPIC_ID}, None: {0: UNKNOWN_TOPIC_ID}}

    asked = (offset_fetch_v10.OffsetFetchRequestTopics(topic_id=tid, partition_indexes=(i32(0), i32(1))), offset_fetch_v10.OffsetFetchRequestTopics(topic_id=stranger, partition_indexes=(i32(0),)))
    fetched = fetch_v10(bs, group, asked)
    assert [(t.topic_id, [(p.partition_index, p.committed_offset, p.error_code) for p in t.partitions]) for t in fetched.topics] == [
        (tid, [(0, 5, NONE), (1, 7, NONE)]),
        (stranger, [(0, -1, UNKNOWN_TOPIC_ID)]),
    ]
    # All the group's offsets, their topics named by ID.
    every = fetch_v10(bs, group, None)
    assert [(t.topic_id, sorted((p.partition_index, p.committed_offset) for p in t.partitions)) for t in every.topics] == [(tid, [(0, 5), (1, 7)])]


def test_replica_verification_tool_fetches_v18(module_broker: BrokerProcess, topic: tuple[str, uuid.UUID], kafka_lib: Path) -> None:
    """kafka-replica-verification.sh sends Fetch v18 without asking for versions first."""
    name, _ = topic
    command = [
        "java", *TOOL_JVM_OPTS, "-cp", f"{kafka_lib}/*", "org.apache.kafka.tools.ReplicaVerificationTool",
        "--broker-list", module_broker.bootstrap, "--topics-include", name, "--report-interval-ms", "1000",
    ]  # fmt: skip
    tool = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert tool.stdout is not None
        # It reports the replicas' lag once per interval while its fetches succeed, and runs until stopped.
        report = ""
        deadline = time.monotonic() + 120
        while "max lag is" not in report and time.monotonic() < deadline and tool.poll() is None:
            report = tool.stdout.readline()
        assert "max lag is 0" in report, report
    finally:
        tool.kill()
        tool.wait()
    assert not [e for e in module_broker.log_events() if e.get("event") == "connection.closed_bad_request" and e.get("api_key") == 1]


# -- issue 34: the rest of Kafka 4.4's tops ------------------------------------------------------------------


def find_coordinator(bootstrap: str, key: str, key_type: int) -> None:
    assert wait_for(lambda: request(bootstrap, find_coordinator_v4.FindCoordinatorRequest(key_type=i8(key_type), coordinator_keys=(key,))).coordinators[0].error_code == NONE, timeout_s=30)


@pytest.fixture(scope="module")
def groups(module_broker: BrokerProcess, topic: tuple[str, uuid.UUID]) -> tuple[str, str]:
    """A classic group with only committed offsets (Empty) and a consumer group with one member."""
    bs, (name, _) = module_broker.bootstrap, topic
    simple, consumer = unique_topic("v44-simple"), unique_topic("v44-consumer")
    find_coordinator(bs, simple, 0)
    commit = offset_commit_v10.OffsetCommitRequest(
        group_id=simple, generation_id_or_member_epoch=i32(-1), member_id="", group_instance_id=None, topics=(commit_topic(topic[1], (0, 1)),)
    )
    assert wait_for(lambda: request(bs, commit).topics[0].partitions[0].error_code == NONE, timeout_s=30)
    find_coordinator(bs, consumer, 0)
    join_consumer_group(bs, consumer, name)
    return simple, consumer


def join_consumer_group(bootstrap: str, group: str, topic_name: str) -> None:
    heartbeat = consumer_group_heartbeat_v1.ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=str(uuid.uuid4()), member_epoch=i32(0), rebalance_timeout=30 * SECOND, subscribed_topic_names=(topic_name,), topic_partitions=()
    )
    assert request(bootstrap, heartbeat).error_code == NONE


def test_describe_groups_v6_says_group_id_not_found(module_broker: BrokerProcess, groups: tuple[str, str]) -> None:
    simple, consumer = groups
    asked = ("nope", "", simple, consumer)

    def described(module) -> dict[str, tuple[object, ...]]:  # type: ignore[no-untyped-def]
        answer = request(module_broker.bootstrap, module.DescribeGroupsRequest(groups=asked, include_authorized_operations=False))
        return {g.group_id: (g.error_code, getattr(g, "error_message", "-"), g.group_state) for g in answer.groups}

    # Kafka orders the groups by their coordinator partitions; the answers are the same.
    assert described(describe_groups_v6) == {
        "nope": (GROUP_ID_NOT_FOUND, "Group nope not found.", "Dead"),
        "": (GROUP_ID_NOT_FOUND, "Group  not found.", "Dead"),
        simple: (NONE, None, "Empty"),
        consumer: (GROUP_ID_NOT_FOUND, f"Group {consumer} is not a classic group.", "Dead"),
    }
    # v5 describes a Dead group instead.
    assert described(describe_groups_v5) == {"nope": (NONE, "-", "Dead"), "": (NONE, "-", "Dead"), simple: (NONE, "-", "Empty"), consumer: (NONE, "-", "Dead")}


def test_consumer_group_describe_v1_member_type(module_broker: BrokerProcess, topic: tuple[str, uuid.UUID], groups: tuple[str, str]) -> None:
    simple, consumer = groups
    join_consumer_group(module_broker.bootstrap, consumer, topic[0])
    answer = request(module_broker.bootstrap, consumer_group_describe_v1.ConsumerGroupDescribeRequest(group_ids=(consumer, "nope", simple), include_authorized_operations=False))
    by_id = {g.group_id: g for g in answer.groups}
    assert {g: (by_id[g].error_code, by_id[g].error_message) for g in ("nope", simple)} == {
        "nope": (GROUP_ID_NOT_FOUND, "Group nope not found."),
        simple: (GROUP_ID_NOT_FOUND, f"Group {simple} is not a consumer group."),
    }
    members = by_id[consumer].members
    assert members and all(m.member_type == 1 and m.subscribed_topic_regex == "" for m in members)


def test_describe_cluster_v2(module_broker: BrokerProcess) -> None:
    for include_fenced in (False, True):
        body = describe_cluster_v2.DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=i8(1), include_fenced_brokers=include_fenced)
        answer = request(module_broker.bootstrap, body)
        assert answer.error_code == NONE
        assert [(b.broker_id, b.port, b.is_fenced) for b in answer.brokers] == [(1, module_broker.port, False)]
    wrong = request(module_broker.bootstrap, describe_cluster_v2.DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=i8(2), include_fenced_brokers=True))
    assert (wrong.error_code, wrong.error_message, wrong.endpoint_type, wrong.cluster_id, wrong.controller_id) == (
        114,
        "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER",
        1,
        "",
        -1,
    )


def test_describe_log_dirs_v5_is_cordoned(module_broker: BrokerProcess, topic: tuple[str, uuid.UUID]) -> None:
    name, _ = topic
    answer = request(module_broker.bootstrap, describe_log_dirs_v5.DescribeLogDirsRequest(topics=(describe_log_dirs_v5.DescribableLogDirTopic(topic=name, partitions=(i32(0),)),)))
    (result,) = answer.results
    assert (answer.error_code, result.error_code, result.is_cordoned, result.topics[0].name) == (NONE, NONE, False, name)
    assert result.total_bytes > 0 and result.usable_bytes > 0


@pytest.fixture(scope="module")
def transactional_ids(module_broker: BrokerProcess) -> tuple[str, ...]:
    run = uuid.uuid4().hex[:8]
    ids = (f"alpha-{run}", f"alpha2-{run}", f"beta-{run}")
    for tid in ids:
        init_producer(module_broker.bootstrap, tid)
    return ids


def init_producer(bootstrap: str, transactional_id: str | None) -> tuple[int, int]:
    if transactional_id is not None:
        find_coordinator(bootstrap, transactional_id, 1)
    body = init_producer_id_v5.InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout=60 * SECOND, producer_id=i64(-1), producer_epoch=i16(-1))
    answer = None

    def initialized() -> bool:
        nonlocal answer
        answer = request(bootstrap, body)
        return answer.error_code == NONE

    assert wait_for(initialized, timeout_s=30)
    return answer.producer_id, answer.producer_epoch  # type: ignore[union-attr]


def test_list_transactions_v2_by_pattern(module_broker: BrokerProcess, transactional_ids: tuple[str, ...]) -> None:
    alpha, alpha2, beta = transactional_ids
    run = alpha.split("-")[1]

    def listed(pattern: str | None) -> tuple[int, list[str]]:
        body = list_transactions_v2.ListTransactionsRequest(state_filters=(), producer_id_filters=(), duration_filter=i64(-1), transactional_id_pattern=pattern)
        answer = request(module_broker.bootstrap, body)
        return answer.error_code, sorted(t.transactional_id for t in answer.transaction_states if t.transactional_id.endswith(run))

    assert listed(None) == listed("") == (NONE, [alpha, alpha2, beta])
    assert listed("alpha.*") == (NONE, [alpha, alpha2])
    assert listed("alpha") == (NONE, [])  # the whole id must match
    assert listed(f"(?i)ALPHA-{run}") == (NONE, [alpha])
    assert listed(f"(alpha|beta)-{run}") == (NONE, [alpha, beta])
    assert listed("[") == (INVALID_REGULAR_EXPRESSION, [])


def test_kafka_transactions_tool_lists_by_pattern(module_broker: BrokerProcess, transactional_ids: tuple[str, ...], kafka_lib: Path) -> None:
    """kafka-transactions.sh list --transactional-id-pattern sends ListTransactions v2."""
    alpha, alpha2, beta = transactional_ids
    run = alpha.split("-")[1]
    done = kafka_tool(kafka_lib, "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", module_broker.bootstrap, "list", "--transactional-id-pattern", f"alpha.*-{run}")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()[1:]]
    assert sorted(row[0] for row in rows) == [alpha, alpha2] and all(row[3] == "Empty" for row in rows)
    refused = kafka_tool(kafka_lib, "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", module_broker.bootstrap, "list", "--transactional-id-pattern", "[")
    assert "INVALID_REGULAR_EXPRESSION" in refused.stdout + refused.stderr


def test_write_txn_markers_v2_tv2_epoch_check(module_broker: BrokerProcess, topic: tuple[str, uuid.UUID]) -> None:
    """A transaction open on the partition at epoch E: a TV2 marker at E is a late one (refused),
    an older-version marker at E closes it, and then a TV2 marker at E is a retry (accepted)."""
    bs, (name, _) = module_broker.bootstrap, topic
    tid = unique_topic("v44-txn")
    init_producer(bs, tid)
    producer_id, epoch = init_producer(bs, tid)  # epoch 1: "below" is an epoch too
    added = request(
        bs,
        add_partitions_v3.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid,
            v3_and_below_producer_id=producer_id,
            v3_and_below_producer_epoch=i16(epoch),
            v3_and_below_topics=(add_partitions_v3.AddPartitionsToTxnTopic(name=name, partitions=(i32(0),)),),
        ),
    )
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == NONE
    batch = build_batch([(b"k", b"txn", (), int(time.time() * 1000))], producer_id=producer_id, producer_epoch=epoch, base_sequence=0, is_transactional=True)
    data = produce_v11.TopicProduceData(name=name, partition_data=(produce_v11.PartitionProduceData(index=i32(0), records=batch),))
    produced = request(bs, produce_v11.ProduceRequest(transactional_id=tid, acks=i16(-1), timeout=5 * SECOND, topic_data=(data,)))
    assert produced.responses[0].partition_responses[0].error_code == NONE

    def marker(marker_epoch: int, transaction_version: int) -> int:
        topics = (write_txn_markers_v2.WritableTxnMarkerTopic(name=name, partition_indexes=(i32(0),)),)
        entry = write_txn_markers_v2.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=i16(marker_epoch), transaction_result=False, topics=topics, coordinator_epoch=i32(0), transaction_version=i8(transaction_version)
        )
        answer = request(bs, write_txn_markers_v2.WriteTxnMarkersRequest(markers=(entry,)))
        return int(answer.markers[0].topics[0].partitions[0].error_code)

    assert marker(epoch, 2) == INVALID_PRODUCER_EPOCH
    assert marker(epoch, 0) == NONE
    assert marker(epoch, 2) == NONE
    assert marker(epoch - 1, 2) == INVALID_PRODUCER_EPOCH
    assert marker(epoch + 1, 2) == NONE


def test_add_raft_voter_v1_on_a_static_quorum(module_broker: BrokerProcess) -> None:
    listener = add_raft_voter_v1.Listener(name="CONTROLLER", host="127.0.0.1", port=i32(1))
    for ack_when_committed in (False, True):
        body = add_raft_voter_v1.AddRaftVoterRequest(
            cluster_id=None, timeout=5 * SECOND, voter_id=i32(7), voter_directory_id=uuid.uuid4(), listeners=(listener,), ack_when_committed=ack_when_committed
        )
        answer = request(module_broker.bootstrap, body)
        assert (answer.error_code, answer.error_message) == (UNSUPPORTED_VERSION, "Cluster doesn't support adding voter because the kraft.version feature is 0")


def test_kafka_tools_on_the_raised_versions(module_broker: BrokerProcess, topic: tuple[str, uuid.UUID], groups: tuple[str, str], kafka_lib: Path) -> None:
    """kafka-cluster list-endpoints --include-fenced-brokers (DescribeCluster v2), kafka-log-dirs
    (DescribeLogDirs v5), kafka-consumer-groups --describe (ConsumerGroupDescribe v1 and
    DescribeGroups v6) and kafka-broker-api-versions, each printing what it prints for Kafka 4.4."""
    bs, (name, _), (simple, consumer) = module_broker.bootstrap, topic, groups
    endpoints = kafka_tool(kafka_lib, "org.apache.kafka.tools.ClusterTool", "list-endpoints", "--bootstrap-server", bs, "--include-fenced-brokers")
    assert endpoints.returncode == 0, endpoints.stderr
    assert [line.split() for line in endpoints.stdout.splitlines()] == [
        ["ID", "HOST", "PORT", "RACK", "STATE", "ENDPOINT_TYPE"],
        ["1", "127.0.0.1", str(module_broker.port), "null", "unfenced", "broker"],
    ]

    dirs = kafka_tool(kafka_lib, "org.apache.kafka.tools.LogDirsCommand", "--bootstrap-server", bs, "--describe", "--topic-list", name)
    assert dirs.returncode == 0, dirs.stderr
    assert f'"partition":"{name}-0"' in dirs.stdout and '"error":null' in dirs.stdout

    join_consumer_group(bs, consumer, name)
    members = kafka_tool(kafka_lib, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server", bs, "--describe", "--group", consumer, "--members")
    assert members.returncode == 0, members.stderr
    assert any(line.split()[:1] == [consumer] for line in members.stdout.splitlines())
    offsets = kafka_tool(kafka_lib, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server", bs, "--describe", "--group", simple)
    assert offsets.returncode == 0, offsets.stderr
    assert f"Consumer group '{simple}' has no active members." in offsets.stderr
    assert [line.split()[:4] for line in offsets.stdout.splitlines() if line.startswith(simple)] == [[simple, name, "0", "1"]]
    missing = kafka_tool(kafka_lib, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server", bs, "--describe", "--group", "nope")
    assert "GroupIdNotFoundException: Group nope not found." in missing.stdout + missing.stderr

    versions = kafka_tool(kafka_lib, "org.apache.kafka.tools.BrokerApiVersionsCommand", "--bootstrap-server", bs)
    assert versions.returncode == 0, versions.stderr
    for api, top in (("ApiVersions(18)", 5), ("TxnOffsetCommit(28)", 6), ("DeleteGroups(42)", 3), ("DescribeGroups(15)", 6), ("WriteTxnMarkers(27)", 2), ("DescribeLogDirs(35)", 5), ("DescribeCluster(60)", 2), ("ListTransactions(66)", 2), ("ConsumerGroupDescribe(69)", 1), ("AddRaftVoter(80)", 1)):
        assert f"{api}: " in versions.stdout and f"to {top} [usable: {top}]" in versions.stdout.split(f"{api}: ")[1].split(",")[0], api
    # The streams group APIs, as the tool printed them for a Kafka 4.4 node.
    for line in ("StreamsGroupHeartbeat(88): 0 to 1 [usable: 1]", "StreamsGroupDescribe(89): 0 to 1 [usable: 1]", "StreamsGroupTopologyDescriptionUpdate(93): 0 [usable: 0]"):
        assert line in versions.stdout, line


# -- issue 34: the versions kio 0.6.5 has no schema for (protocol/schema/) -----------------------------------

INVALID_REQUEST, ILLEGAL_GENERATION, NON_EMPTY_GROUP, STALE_MEMBER_EPOCH, REBOOTSTRAP_REQUIRED = 42, 22, 68, 113, 129


def raw_api_versions_v5(bootstrap: str, cluster_id: str | None, node_id: int) -> bytes:
    """The response frame's bytes after its size and correlation id."""
    body = api_versions_v5.ApiVersionsRequest(client_software_name="test", client_software_version="1", cluster_id=cluster_id, node_id=i32(node_id))
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(encode_request(body, 3))
        (size,) = struct.unpack(">i", recv_exact(sock, 4))
        frame = recv_exact(sock, size)
    assert frame[:4] == struct.pack(">i", 3)
    return frame[4:]


def test_api_versions_v5_checks_the_cluster_and_node(module_broker: BrokerProcess) -> None:
    bs = module_broker.bootstrap
    cluster_id = request(bs, metadata_request()).cluster_id
    # Neither, or this very node: the whole answer, as v4's.
    for named in ((None, -1), (cluster_id, 1)):
        answer = request(bs, api_versions_v5.ApiVersionsRequest(client_software_name="test", client_software_version="1", cluster_id=named[0], node_id=i32(named[1])))
        assert answer.error_code == NONE and {int(k.api_key): int(k.max_version) for k in answer.api_keys}[18] == 5
    # Kafka 4.4's bytes: the error, an empty ApiKeys, ThrottleTimeMs 0, no tagged fields.
    for (named, error) in (
        (("XXXXXXXXXXXXXXXXXXXXXX", 1), REBOOTSTRAP_REQUIRED),  # another cluster
        ((cluster_id, 6), REBOOTSTRAP_REQUIRED),  # another node of this cluster
        ((cluster_id, -1), INVALID_REQUEST),  # one without the other
        ((None, 1), INVALID_REQUEST),
    ):
        assert raw_api_versions_v5(bs, *named) == struct.pack(">h", error) + bytes.fromhex("010000000000"), named
    # Older versions and the KIP-511 fallback (a version above 5) are answered as before.
    assert request(bs, api_versions_v3.ApiVersionsRequest(client_software_name="test", client_software_version="1")).error_code == NONE


def test_delete_groups_v3_error_message_is_null(module_broker: BrokerProcess, topic: tuple[str, uuid.UUID]) -> None:
    bs, (name, tid) = module_broker.bootstrap, topic
    simple, consumer = unique_topic("v44-delete-simple"), unique_topic("v44-delete-consumer")
    find_coordinator(bs, simple, 0)
    commit_v10(bs, simple, (commit_topic(tid, (0, 1)),))
    find_coordinator(bs, consumer, 0)
    join_consumer_group(bs, consumer, name)
    answer = request(bs, delete_groups_v3.DeleteGroupsRequest(groups_names=("nope", simple, consumer, "")))
    # Kafka orders the groups by their coordinator partitions; the answers are the same.
    assert {r.group_id: (r.error_code, r.error_message) for r in answer.results} == {
        "nope": (GROUP_ID_NOT_FOUND, None),
        simple: (NONE, None),
        consumer: (NON_EMPTY_GROUP, None),
        "": (GROUP_ID_NOT_FOUND, None),
    }


def txn_partitions(*parts: int) -> tuple[txn_offset_commit_v6.TxnOffsetCommitRequestPartition, ...]:
    return tuple(txn_offset_commit_v6.TxnOffsetCommitRequestPartition(partition_index=i32(p), committed_offset=i64(3), committed_leader_epoch=i32(-1), committed_metadata="m") for p in parts)


def txn_errors(answer: object) -> list[tuple[object, list[tuple[int, int]]]]:
    return [(t.topic_id if hasattr(t, "topic_id") else t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in answer.topics]  # type: ignore[attr-defined]


def settled(send):  # type: ignore[no-untyped-def]
    """``send()``'s answer once no partition says its coordinator is still loading or moving."""
    answer = None

    def done() -> bool:
        nonlocal answer
        answer = send()
        return all(p.error_code not in (*COORDINATOR_ERRORS, 51) for t in answer.topics for p in t.partitions)

    assert wait_for(done, timeout_s=30)
    return answer


def test_txn_offset_commit_v6_by_topic_id(module_broker: BrokerProcess, topic: tuple[str, uuid.UUID]) -> None:
    bs, (name, tid), stranger = module_broker.bootstrap, topic, uuid.uuid4()
    transactional_id, group, consumer = unique_topic("v44-toc"), unique_topic("v44-toc-group"), unique_topic("v44-toc-consumer")
    producer_id, epoch = init_producer(bs, transactional_id)
    find_coordinator(bs, group, 0)

    def v6(group_id: str, topics: tuple[tuple[uuid.UUID | None, tuple[int, ...]], ...], generation: int = -1, member: str = "") -> object:
        body = txn_offset_commit_v6.TxnOffsetCommitRequest(
            transactional_id=transactional_id, group_id=group_id, producer_id=producer_id, producer_epoch=i16(epoch), generation_id_or_member_epoch=i32(generation),
            member_id=member, group_instance_id=None,
            topics=tuple(txn_offset_commit_v6.TxnOffsetCommitRequestTopic(topic_id=t, partitions=txn_partitions(*parts)) for t, parts in topics),
        )  # fmt: skip
        return request(bs, body)

    def v5(group_id: str, topics: tuple[tuple[str, tuple[int, ...]], ...], generation: int = -1, member: str = "") -> object:
        body = txn_offset_commit_v5.TxnOffsetCommitRequest(
            transactional_id=transactional_id, group_id=group_id, producer_id=producer_id, producer_epoch=i16(epoch), generation_id=i32(generation),
            member_id=member, group_instance_id=None,
            topics=tuple(txn_offset_commit_v5.TxnOffsetCommitRequestTopic(name=t, partitions=tuple(txn_offset_commit_v5.TxnOffsetCommitRequestPartition(partition_index=i32(p), committed_offset=i64(3), committed_leader_epoch=i32(-1), committed_metadata="m") for p in parts)) for t, parts in topics),
        )  # fmt: skip
        return request(bs, body)

    # As Kafka 4.4, in its order: the partitions answered before the coordinator first (an unknown
    # partition, then IDs no topic has, the zero UUID included), then the coordinator's.
    mixed = settled(lambda: v6(group, ((tid, (0, 1, 7)), (stranger, (0,)), (None, (0,)))))
    assert txn_errors(mixed) == [(tid, [(7, UNKNOWN_TOPIC_OR_PARTITION), (0, NONE), (1, NONE)]), (stranger, [(0, UNKNOWN_TOPIC_ID)]), (None, [(0, UNKNOWN_TOPIC_ID)])]
    assert txn_errors(v6(group, ((stranger, (0, 1)),))) == [(stranger, [(0, UNKNOWN_TOPIC_ID), (1, UNKNOWN_TOPIC_ID)])]
    assert txn_errors(v6(group, ())) == []

    # A member of a group the coordinator does not know, and a consumer-group member at an epoch it
    # is not at: v6 says so, v5 says ILLEGAL_GENERATION.
    find_coordinator(bs, consumer, 0)
    member = str(uuid.uuid4())
    heartbeat = consumer_group_heartbeat_v1.ConsumerGroupHeartbeatRequest(
        group_id=consumer, member_id=member, member_epoch=i32(0), rebalance_timeout=30 * SECOND, subscribed_topic_names=(name,), topic_partitions=()
    )
    assert request(bs, heartbeat).error_code == NONE
    nobody = unique_topic("v44-toc-nogroup")
    find_coordinator(bs, nobody, 0)
    assert txn_errors(settled(lambda: v6(nobody, ((tid, (0,)),), 5, "m"))) == [(tid, [(0, GROUP_ID_NOT_FOUND)])]
    assert txn_errors(settled(lambda: v6(consumer, ((tid, (0,)),), 99, member))) == [(tid, [(0, STALE_MEMBER_EPOCH)])]
    assert txn_errors(settled(lambda: v5(nobody, ((name, (0,)),), 5, "m"))) == [(name, [(0, ILLEGAL_GENERATION)])]
    assert txn_errors(settled(lambda: v5(consumer, ((name, (0,)),), 99, member))) == [(name, [(0, ILLEGAL_GENERATION)])]
    # A partition or topic the metadata does not have, by name: answered before the coordinator.
    missing = unique_topic("v44-nosuch")
    assert txn_errors(settled(lambda: v5(group, ((name, (0, 7)), (missing, (0,)))))) == [(name, [(7, UNKNOWN_TOPIC_OR_PARTITION), (0, NONE)]), (missing, [(0, UNKNOWN_TOPIC_OR_PARTITION)])]


@pytest.mark.parametrize(("enable_2pc", "keep"), [(False, False), (True, False), (False, True), (True, True)])
def test_init_producer_id_v6_drops_the_connection_as_kafka_44_by_default(module_broker: BrokerProcess, enable_2pc: bool, keep: bool) -> None:
    bs, transactional_id = module_broker.bootstrap, unique_topic("v44-ipid")
    # v5 is answered (the coordinator found first), then v6 is not: Kafka 4.4 treats a version it
    # does not list as a request it cannot parse.
    producer_id, epoch = init_producer(bs, transactional_id)
    body = init_producer_id_v6.InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout=60 * SECOND, producer_id=i64(-1), producer_epoch=i16(-1), enable2_pc=enable_2pc, keep_prepared_txn=keep
    )
    with pytest.raises(ConnectionError):
        request(bs, body)
    # Nothing changed: the next v5 bumps the epoch by one.
    assert init_producer(bs, transactional_id) == (producer_id, epoch + 1)


def test_init_producer_id_v6_with_unstable_api_versions_answers_as_kafka_44(broker_factory: StartBroker) -> None:
    """unstable.api.versions.enable=true lists v6 and answers it as such a Kafka 4.4 node did: 2PC
    refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED (two.phase.commit off), KeepPreparedTxn with
    UNSUPPORTED_VERSION, neither as v5 (the epoch bumped)."""
    bs = broker_factory({"unstable.api.versions.enable": "true"}).bootstrap
    ranges = {k.api_key: k.max_version for k in request(bs, api_versions_v3.ApiVersionsRequest(client_software_name="t", client_software_version="1")).api_keys}
    assert ranges[22] == 6
    transactional_id = unique_topic("v44-ipid6")
    producer_id, epoch = init_producer(bs, transactional_id)

    def v6(enable_2pc: bool, keep: bool) -> Any:
        return request(bs, init_producer_id_v6.InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout=60 * SECOND, producer_id=i64(-1), producer_epoch=i16(-1), enable2_pc=enable_2pc, keep_prepared_txn=keep
        ))

    assert v6(True, False).error_code == 53 and v6(False, True).error_code == UNSUPPORTED_VERSION
    answer = v6(False, False)
    assert (answer.error_code, answer.producer_id, answer.producer_epoch, answer.ongoing_txn_producer_id) == (NONE, producer_id, epoch + 1, -1)
