"""Bad Raft input at a real controller listener: a Kafka error or a closed connection, never a
crashed node, a lost vote or a diverged log.

One combined node that is the only voter of its quorum, reached on its controller listener. Each
request comes from a node that should not be heard: the wrong cluster, a stale or future epoch,
a voter that is not one, a truncated or oversized frame. After each, the node still leads its
epoch and a topic created before is still there.
"""

from __future__ import annotations

import socket
import struct
import uuid
from typing import Any, Iterator

import pytest
from kio.index import load_response_schema
from kio.schema.begin_quorum_epoch.v1.request import BeginQuorumEpochRequest
from kio.schema.begin_quorum_epoch.v1.request import PartitionData as BeginPartition
from kio.schema.begin_quorum_epoch.v1.request import TopicData as BeginTopic
from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest
from kio.schema.describe_quorum.v2.request import PartitionData as DescribePartition
from kio.schema.describe_quorum.v2.request import TopicData as DescribeTopic
from kio.schema.end_quorum_epoch.v1.request import EndQuorumEpochRequest
from kio.schema.end_quorum_epoch.v1.request import PartitionData as EndPartition
from kio.schema.end_quorum_epoch.v1.request import TopicData as EndTopic
from kio.schema.errors import ErrorCode
from kio.schema.vote.v2.request import PartitionData as VotePartition
from kio.schema.vote.v2.request import TopicData as VoteTopic
from kio.schema.vote.v2.request import VoteRequest
from kio.serial import entity_reader
from kio.static.primitive import i32, i64

from broker import wire_client
from tests.cluster.cluster import KafkaCluster
from tests.integration.helpers import create_topic, unique_topic

METADATA = "__cluster_metadata"
IO_TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(tmp_path_factory.mktemp("raft-bad-input"), combined=1)
    try:
        yield c.start()
    finally:
        c.close()


def controller(node: KafkaCluster) -> str:
    return node.controller_bootstrap(1)


def describe(node: KafkaCluster) -> Any:
    request = DescribeQuorumRequest(topics=(DescribeTopic(topic_name=METADATA, partitions=(DescribePartition(partition_index=i32(0)),)),))
    response = wire_client.request(controller(node), request)
    assert response.error_code == ErrorCode.none
    return response.topics[0].partitions[0]


def vote(cluster_id: str | None, candidate: int, epoch: int, *, last_epoch: int = 0, last_offset: int = 0, pre_vote: bool = False, topic: str = METADATA) -> VoteRequest:
    partition = VotePartition(
        partition_index=i32(0),
        replica_epoch=i32(epoch),
        replica_id=i32(candidate),
        replica_directory_id=uuid.uuid4(),
        voter_directory_id=uuid.UUID(int=0),
        last_offset_epoch=i32(last_epoch),
        last_offset=i64(last_offset),
        pre_vote=pre_vote,
    )
    return VoteRequest(cluster_id=cluster_id, voter_id=i32(1), topics=(VoteTopic(topic_name=topic, partitions=(partition,)),))


def error_of(response: Any) -> ErrorCode:
    """The top-level error, else the one partition's."""
    if response.error_code != ErrorCode.none:
        return response.error_code
    return response.topics[0].partitions[0].error_code


@pytest.fixture
def steady(node: KafkaCluster) -> Iterator[tuple[int, str]]:
    """Before: the node leads and a topic exists. After: it still leads the same epoch, with the topic."""
    before = describe(node)
    assert before.leader_id == 1
    topic = unique_topic("kept")
    create_topic(node.bootstrap, topic)
    yield int(before.leader_epoch), topic
    after = describe(node)
    assert (after.leader_id, after.leader_epoch) == (1, before.leader_epoch)
    assert after.high_watermark >= before.high_watermark
    assert node.nodes[1].running
    create_topic(node.bootstrap, unique_topic("after"))


def test_a_vote_from_another_cluster_is_refused(node: KafkaCluster, steady: tuple[int, str]) -> None:
    epoch, _ = steady
    assert error_of(wire_client.request(controller(node), vote("another-cluster-id", 2, epoch + 1))) == ErrorCode.inconsistent_cluster_id


def test_a_vote_from_a_node_that_is_not_a_voter_is_not_granted(node: KafkaCluster, steady: tuple[int, str]) -> None:
    epoch, _ = steady
    response = wire_client.request(controller(node), vote(node.cluster_id, 7, epoch + 1, last_epoch=epoch + 1, last_offset=1 << 40))
    partition = response.topics[0].partitions[0] if response.topics else None
    assert error_of(response) != ErrorCode.none or (partition is not None and not partition.vote_granted)


def test_a_stale_epoch_vote_is_fenced(node: KafkaCluster, steady: tuple[int, str]) -> None:
    epoch, _ = steady
    response = wire_client.request(controller(node), vote(node.cluster_id, 1, max(epoch - 1, 0)))
    partition = response.topics[0].partitions[0]
    assert error_of(response) == ErrorCode.fenced_leader_epoch or not partition.vote_granted


def test_a_pre_vote_for_an_unknown_topic_is_an_error(node: KafkaCluster, steady: tuple[int, str]) -> None:
    epoch, _ = steady
    assert error_of(wire_client.request(controller(node), vote(node.cluster_id, 2, epoch, pre_vote=True, topic="not-the-metadata-topic"))) != ErrorCode.none


def test_begin_and_end_quorum_epoch_from_strangers_change_nothing(node: KafkaCluster, steady: tuple[int, str]) -> None:
    epoch, _ = steady
    begin = BeginQuorumEpochRequest(
        cluster_id=node.cluster_id,
        voter_id=i32(1),
        topics=(BeginTopic(topic_name=METADATA, partitions=(BeginPartition(partition_index=i32(0), voter_directory_id=uuid.UUID(int=0), leader_id=i32(9), leader_epoch=i32(epoch)),)),),
        leader_endpoints=(),
    )
    assert error_of(wire_client.request(controller(node), begin)) != ErrorCode.none
    end = EndQuorumEpochRequest(
        cluster_id=node.cluster_id,
        topics=(EndTopic(topic_name=METADATA, partitions=(EndPartition(partition_index=i32(0), leader_id=i32(9), leader_epoch=i32(max(epoch - 1, 0)), preferred_candidates=()),)),),
        leader_endpoints=(),
    )
    assert error_of(wire_client.request(controller(node), end)) != ErrorCode.none


@pytest.mark.parametrize("frame", [b"\x00\x00\x00\x08\x00\x34\x00\x02", struct.pack(">i", 1 << 30), struct.pack(">ihhi", 10, 52, 99, 1)], ids=["truncated-vote", "huge-length", "unknown-version"])
def test_malformed_frames_close_only_their_connection(node: KafkaCluster, steady: tuple[int, str], frame: bytes) -> None:
    host, port = controller(node).rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=IO_TIMEOUT_S) as sock:
        sock.sendall(frame)
        sock.shutdown(socket.SHUT_WR)
        try:
            assert sock.recv(1 << 16) == b""
        except ConnectionResetError:
            pass


# Found by the fuzzer (tests/fuzz/, on the controller listener): the Raft layer answered every
# Fetch in v17, whatever version the request was, and the bytes went out under the request's
# version: a v6 answer that no client can read. FUZZ_SEED=31, frames 1 (v6) and 49 (v14).
FETCH_V6 = bytes.fromhex(
    "0000006b0001000600000001000466757a7a0000000200000000c6f8c570000000010000000002000666757a7a2d61000000010000004b"
    "0000000000000001000000000000005000000001000666757a7a2d62000000010000003d8000000000000001000000000000000200000000"
)
FETCH_V14 = bytes.fromhex(
    "000000a20001000e00000031000466757a7a000000000100000000000000020000000000ffffffff000000010200000000000000000000"
    "0000000000000300000002000000310000000000000000000040027ffffffffffffffe000000010000000001ffffffff80000000000000"
    "0100000002ffffffffffffffff96638b10000002000000000000000000000000000000010400000000000000460000000000026101000101"
)


@pytest.mark.parametrize(("frame", "version"), [(FETCH_V6, 6), (FETCH_V14, 14)], ids=["v6", "v14"])
def test_a_fetch_is_answered_in_its_own_version(node: KafkaCluster, steady: tuple[int, str], frame: bytes, version: int) -> None:
    host, port = controller(node).rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=IO_TIMEOUT_S) as sock:
        sock.sendall(frame)
        (size,) = struct.unpack(">i", wire_client.recv_exact(sock, 4))
        answer = wire_client.recv_exact(sock, size)
    assert struct.unpack_from(">i", answer)[0] == struct.unpack_from(">i", frame, 8)[0]
    header_size = 5 if version >= 12 else 4
    # The whole answer reads in the request's version, to its last byte.
    response, size = entity_reader(load_response_schema(1, version))(memoryview(answer[header_size:]).toreadonly(), 0)
    assert size == len(answer) - header_size, response
