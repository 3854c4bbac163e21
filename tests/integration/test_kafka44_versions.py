"""The versions whose tops kbroker raised to Kafka 4.4's, each new version's behaviour over TCP.

Every expectation here was checked against a real Kafka 4.4 node with the same requests:
Produce v13, OffsetCommit v10 and OffsetFetch v10 name topics by ID (KIP-516, KIP-848) and answer
UNKNOWN_TOPIC_ID for an ID no topic has (the zero UUID included); Fetch v18 carries the
follower's high watermark (KIP-1166), which a broker ignores; ListOffsets v11 takes -6
(EARLIEST_PENDING_UPLOAD, KIP-1023), -1 without tiered storage; Metadata v13 has a top-level
error code (KIP-1102), none in an answer.
"""

from __future__ import annotations

import datetime
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from kio.schema.api_versions.v3 import request as api_versions_v3
from kio.schema.fetch.v18 import request as fetch_v18
from kio.schema.find_coordinator.v4 import request as find_coordinator_v4
from kio.schema.list_offsets.v11 import request as list_offsets_v11
from kio.schema.metadata.v13 import request as metadata_v13
from kio.schema.offset_commit.v10 import request as offset_commit_v10
from kio.schema.offset_fetch.v10 import request as offset_fetch_v10
from kio.schema.produce.v13 import request as produce_v13
from kio.static.primitive import i8, i16, i32, i64

from benchmarks.apache_kafka import TOOL_JVM_OPTS
from protocol.records import build_batch
from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import create_topic, unique_topic, wait_for
from tests.integration.wire import request

NONE, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID = 0, 3, 100
COORDINATOR_ERRORS = (14, 15, 16)  # load in progress, not available, not coordinator
# Kafka 4.4's BrokerApiVersionsCommand against a 4.4 node, for the APIs whose tops kbroker raised.
KAFKA_44_TOPS = {0: 13, 1: 18, 2: 11, 3: 13, 8: 10, 9: 10}
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
