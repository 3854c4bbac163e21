"""The requests a replica fetcher sends its leader, in the versions Kafka 4.4's followers send at
the cluster's finalized metadata.version.

Kafka's RemoteLeaderEndPoint asks the metadata cache for metadata.version on every request
(MetadataVersion.fetchRequestVersion, listOffsetRequestVersion), so a `kafka-features upgrade`
changes the version at the next fetch, with no restart. The levels (metadata_version.py):

- Fetch: v13 below 3.5-IV0, v14 at 3.5-IV0, v15 from 3.5-IV1, v16 from 3.7-IV4, v17 from
  3.9-IV0, v18 from 4.1-IV1 (exactly that version: the builder's oldest and latest are the same).
  Kafka drops to v12 when a partition has no topic id; under KRaft every topic has one.
- ListOffsets: v7, v8 from 3.5-IV0, v9 from 3.9-IV0, v10 from 4.0-IV3, v11 from 4.2-IV1.
- OffsetForLeaderEpoch: v4 at every level (OffsetsForLeaderEpochRequest.Builder.forFollower). A
  kbroker follower never sends it: every Fetch version here (v13+) answers DivergingEpoch, and
  the follower truncates on that (Kafka's isTruncationOnFetchSupported).

What a follower puts in the request does not change with the version beyond where the replica id
goes: v13 and v14 carry it at the top (and no broker epoch), v15+ in ReplicaState with the broker
epoch. v17's ReplicaDirectoryId and v18's HighWatermark (KIP-1166) are tagged fields Kafka's
replica fetcher leaves at their defaults, so they are not on the wire; ListOffsets v10's TimeoutMs
is left at 0 as Kafka's follower does (it bounds tiered-storage reads). The answers are read
alike in every version: the fields a follower reads are in all of them (Fetch v18's response is
v17's).
"""

from __future__ import annotations

import datetime
import importlib
import uuid
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType
from typing import Any, Mapping

from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64

from broker.metadata.metadata_version import METADATA_VERSION_FEATURE, for_level
from replication.fetch_session_handler import FetchRequestData

FETCH_VERSIONS = range(13, 19)
LIST_OFFSETS_VERSIONS = range(7, 12)
FIRST_REPLICA_STATE_VERSION = 15  # Fetch: ReplicaState (id and broker epoch) replaces ReplicaId
FIRST_TIMEOUT_VERSION = 10  # ListOffsets: TimeoutMs
OFFSET_FOR_LEADER_EPOCH_VERSION = 4

# Imported once: choosing a version per fetch is a dict lookup, not an import.
_FETCH: dict[int, ModuleType] = {v: importlib.import_module(f"kio.schema.fetch.v{v}.request") for v in FETCH_VERSIONS}
_LIST_OFFSETS: dict[int, ModuleType] = {v: importlib.import_module(f"kio.schema.list_offsets.v{v}.request") for v in LIST_OFFSETS_VERSIONS}
_NO_TIMEOUT = datetime.timedelta(0)


@dataclass(frozen=True, slots=True)
class FollowerVersions:
    fetch: int
    list_offsets: int
    offset_for_leader_epoch: int


@lru_cache(maxsize=None)
def follower_versions(level: int | None) -> FollowerVersions:
    """The versions a follower sends at finalized metadata.version ``level`` (None: none finalized yet)."""
    mv = for_level(level)
    return FollowerVersions(mv.fetch_request_version, mv.list_offset_request_version, OFFSET_FOR_LEADER_EPOCH_VERSION)


def versions_for_features(features: Mapping[str, int]) -> FollowerVersions:
    return follower_versions(features.get(METADATA_VERSION_FEATURE))


@dataclass(frozen=True, slots=True)
class FetchSettings:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int


def fetch_request(version: int, settings: FetchSettings, broker_epoch: int, data: FetchRequestData) -> Any:
    """The follower's Fetch ``version`` for one round of its session."""
    schema = _FETCH[version]
    partition_cls = schema.FetchPartition
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for (_, index), p in data.to_send.items():
        by_topic.setdefault(p.topic_id, []).append(
            partition_cls(
                partition=i32(index),
                current_leader_epoch=i32(p.current_leader_epoch),
                fetch_offset=i64(p.fetch_offset),
                last_fetched_epoch=i32(p.last_fetched_epoch),
                log_start_offset=i64(p.log_start_offset),
                partition_max_bytes=i32(p.max_bytes),
            )
        )
    forgotten: dict[uuid.UUID, list[i32]] = {}
    for topic_id, (_, index) in data.to_forget:
        forgotten.setdefault(topic_id, []).append(i32(index))
    if version >= FIRST_REPLICA_STATE_VERSION:
        replica: dict[str, Any] = {"replica_state": schema.ReplicaState(replica_id=i32(settings.replica_id), replica_epoch=i64(broker_epoch))}
    else:
        replica = {"replica_id": BrokerId(settings.replica_id)}
    return schema.FetchRequest(
        cluster_id=None,
        **replica,
        max_wait=datetime.timedelta(milliseconds=settings.max_wait_ms),
        min_bytes=i32(settings.min_bytes),
        max_bytes=i32(settings.max_bytes),
        isolation_level=i8(0),
        session_id=i32(data.metadata.session_id),
        session_epoch=i32(data.metadata.epoch),
        topics=tuple(schema.FetchTopic(topic_id=topic_id, partitions=tuple(parts)) for topic_id, parts in by_topic.items()),
        forgotten_topics_data=tuple(schema.ForgottenTopic(topic_id=topic_id, partitions=tuple(parts)) for topic_id, parts in forgotten.items()),
        rack_id="",
    )


def list_offsets_request(version: int, replica_id: int, topic: str, index: int, leader_epoch: int, timestamp: int) -> Any:
    """The follower's ListOffsets ``version`` for one partition's offset at ``timestamp`` (-2 earliest, -1 latest)."""
    schema = _LIST_OFFSETS[version]
    timeout: dict[str, Any] = {"timeout": _NO_TIMEOUT} if version >= FIRST_TIMEOUT_VERSION else {}
    return schema.ListOffsetsRequest(
        replica_id=BrokerId(replica_id),
        isolation_level=i8(0),
        topics=(
            schema.ListOffsetsTopic(
                name=TopicName(topic),
                partitions=(schema.ListOffsetsPartition(partition_index=i32(index), current_leader_epoch=i32(leader_epoch), timestamp=i64(timestamp)),),
            ),
        ),
        **timeout,
    )
