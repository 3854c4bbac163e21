"""`kbroker metadata-quorum`: what kafka-metadata-quorum.sh shows and does, over the wire.

`describe --status` and `describe --replication` print DescribeQuorum's answer in the tool's
own layout; `add-controller` and `remove-controller` send AddRaftVoter / RemoveRaftVoter
(KIP-853). A broker forwards DescribeQuorum to the active controller; with
--bootstrap-controller the request goes to that controller, and on to the quorum leader (found
through DescribeCluster) when it is not the leader itself.
"""

from __future__ import annotations

import base64
import datetime
import time
import uuid
from typing import Any, Sequence, TextIO

from kio.schema.add_raft_voter.v0.request import AddRaftVoterRequest
from kio.schema.add_raft_voter.v0.request import Listener as AddVoterListener
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest, PartitionData, TopicData
from kio.schema.errors import ErrorCode
from kio.schema.remove_raft_voter.v0.request import RemoveRaftVoterRequest
from kio.static.primitive import i8, i32, u16

from broker import wire_client

METADATA_TOPIC = "__cluster_metadata"
VOTER_CHANGE_TIMEOUT_MS = 30000
BROKER_ENDPOINT_TYPE = 1
CONTROLLER_ENDPOINT_TYPE = 2


class QuorumCommandError(Exception):
    """What the tool prints on stderr before exiting 1."""


def _active_controller(bootstrap_controller: str) -> str | None:
    """The quorum leader's controller endpoint, from a controller's DescribeCluster (KIP-919)."""
    response = wire_client.request(bootstrap_controller, DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=i8(CONTROLLER_ENDPOINT_TYPE)), client_id="kbroker-metadata-quorum")
    for node in response.brokers:
        if node.broker_id == response.controller_id:
            return f"{node.host}:{node.port}"
    return None


def _describe(bootstrap: str) -> tuple[Any, Any]:
    request = DescribeQuorumRequest(topics=(TopicData(topic_name=METADATA_TOPIC, partitions=(PartitionData(partition_index=i32(0)),)),))
    response = wire_client.request(bootstrap, request, client_id="kbroker-metadata-quorum")
    if response.error_code == ErrorCode.none and response.topics and response.topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower:
        # Only the leader describes the quorum: a controller that is not it tells where it is.
        leader = _active_controller(bootstrap)
        if leader is not None and leader != bootstrap:
            response = wire_client.request(leader, request, client_id="kbroker-metadata-quorum")
    if response.error_code != ErrorCode.none:
        raise QuorumCommandError(f"DescribeQuorum failed: {response.error_code.name} {response.error_message or ''}".rstrip())
    partition = response.topics[0].partitions[0]
    if partition.error_code != ErrorCode.none:
        raise QuorumCommandError(f"DescribeQuorum failed: {partition.error_code.name} {partition.error_message or ''}".rstrip())
    return response, partition


def _endpoints(response: Any, node_id: int) -> list[str]:
    for node in response.nodes:
        if node.node_id == node_id:
            return [f"{lst.name}://{lst.host}:{lst.port}" for lst in node.listeners]
    return []


def _replica_json(response: Any, replicas: Sequence[Any]) -> str:
    parts = []
    for r in replicas:
        directory = "null" if r.replica_directory_id in (None, uuid.UUID(int=0)) else f'"{r.replica_directory_id}"'
        text = f'{{"id": {r.replica_id}, "directoryId": {directory}'
        endpoints = _endpoints(response, r.replica_id)
        if endpoints:
            text += ", \"endpoints\": [" + ", ".join(f'"{e}"' for e in endpoints) + "]"
        parts.append(text + "}")
    return "[" + ", ".join(parts) + "]"


def _leader_state(partition: Any) -> Any:
    for voter in partition.current_voters:
        if voter.replica_id == partition.leader_id:
            return voter
    raise QuorumCommandError(f"the quorum has no leader (leader id {partition.leader_id}, epoch {partition.leader_epoch})")


def describe_status(bootstrap: str, out: TextIO, *, controller: bool = False) -> None:
    """``controller``: ``bootstrap`` is a controller, which answers DescribeCluster for the
    controller endpoints only (a broker endpoint type is MISMATCHED_ENDPOINT_TYPE, as in Kafka)."""
    endpoint_type = CONTROLLER_ENDPOINT_TYPE if controller else BROKER_ENDPOINT_TYPE
    cluster = wire_client.request(bootstrap, DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=i8(endpoint_type)), client_id="kbroker-metadata-quorum")
    if cluster.error_code != ErrorCode.none:
        raise QuorumCommandError(f"DescribeCluster failed: {ErrorCode(cluster.error_code).name} {cluster.error_message or ''}".rstrip())
    response, partition = _describe(bootstrap)
    leader = _leader_state(partition)
    slowest = min(partition.current_voters, key=lambda v: v.log_end_offset)
    max_lag = leader.log_end_offset - slowest.log_end_offset
    if slowest is leader:
        max_lag_time = 0
    elif leader.last_caught_up_timestamp >= 0 and slowest.last_caught_up_timestamp >= 0:
        max_lag_time = leader.last_caught_up_timestamp - slowest.last_caught_up_timestamp
    else:
        max_lag_time = -1
    rows = [
        ("ClusterId", cluster.cluster_id),
        ("LeaderId", partition.leader_id),
        ("LeaderEpoch", partition.leader_epoch),
        ("HighWatermark", partition.high_watermark),
        ("MaxFollowerLag", max_lag),
        ("MaxFollowerLagTimeMs", max_lag_time),
        ("CurrentVoters", _replica_json(response, partition.current_voters)),
        ("CurrentObservers", _replica_json(response, partition.observers)),
    ]
    for name, value in rows:
        out.write(f"{name + ':':<24}{value}\n")


def _timestamp(value: int, human_readable: bool, now_ms: int) -> str:
    if value < 0:
        return "-1"
    return f"{max(now_ms - value, 0)} ms ago" if human_readable else str(value)


def describe_replication(bootstrap: str, human_readable: bool, out: TextIO) -> None:
    _, partition = _describe(bootstrap)
    leader = _leader_state(partition)
    now_ms = time.time_ns() // 1_000_000
    rows: list[list[str]] = []

    def add(replicas: Sequence[Any], status: str) -> None:
        for r in replicas:
            directory = r.replica_directory_id or uuid.UUID(int=0)
            rows.append([
                str(r.replica_id),
                _kafka_uuid(directory),
                str(r.log_end_offset),
                str(leader.log_end_offset - r.log_end_offset),
                _timestamp(r.last_fetch_timestamp, human_readable, now_ms),
                _timestamp(r.last_caught_up_timestamp, human_readable, now_ms),
                status,
            ])

    add([leader], "Leader")
    add([v for v in partition.current_voters if v.replica_id != partition.leader_id], "Follower")
    add(partition.observers, "Observer")
    print_table(["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"], rows, out)


def _kafka_uuid(value: uuid.UUID) -> str:
    """Kafka prints a Uuid as 22 characters of URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def print_table(headers: list[str], rows: list[list[str]], out: TextIO) -> None:
    """Kafka's ToolsUtils.prettyPrintTable: each column padded to its widest cell, then a tab."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    for row in [headers, *rows]:
        out.write("".join(f"{cell:<{widths[i]}}\t" for i, cell in enumerate(row)) + "\n")


def _to_active_controller(bootstrap_controller: str, request: Any) -> Any:
    """A voter change goes to the quorum leader, as Kafka's admin client sends it to the active
    controller: a controller that is not the leader refuses it and the leader is looked up."""
    response = wire_client.request(bootstrap_controller, request, client_id="kbroker-metadata-quorum")
    if response.error_code == ErrorCode.not_leader_or_follower:
        leader = _active_controller(bootstrap_controller)
        if leader is not None and leader != bootstrap_controller:
            response = wire_client.request(leader, request, client_id="kbroker-metadata-quorum")
    return response


def add_controller(bootstrap_controller: str, node_id: int, directory_id: uuid.UUID, listeners: list[tuple[str, str, int]]) -> None:
    request = AddRaftVoterRequest(
        cluster_id=None,
        timeout=datetime.timedelta(milliseconds=VOTER_CHANGE_TIMEOUT_MS),
        voter_id=i32(node_id),
        voter_directory_id=directory_id,
        listeners=tuple(AddVoterListener(name=name, host=host, port=u16(port)) for name, host, port in listeners),
    )
    response = _to_active_controller(bootstrap_controller, request)
    if response.error_code != ErrorCode.none:
        raise QuorumCommandError(f"add-controller failed: {response.error_code.name} {response.error_message or ''}".rstrip())


def remove_controller(bootstrap_controller: str, node_id: int, directory_id: uuid.UUID) -> None:
    request = RemoveRaftVoterRequest(cluster_id=None, voter_id=i32(node_id), voter_directory_id=directory_id)
    response = _to_active_controller(bootstrap_controller, request)
    if response.error_code != ErrorCode.none:
        raise QuorumCommandError(f"remove-controller failed: {response.error_code.name} {response.error_message or ''}".rstrip())
