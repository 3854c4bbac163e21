"""The follower's request versions per finalized metadata.version, as Kafka 4.4's MetadataVersion
gives them (fetchRequestVersion, listOffsetRequestVersion; OffsetsForLeaderEpochRequest.Builder.forFollower),
and the requests built in each version as the leader reads them."""

from __future__ import annotations

import asyncio
import io
import uuid
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kio.serial import entity_reader, entity_writer

from broker.metadata.metadata_cache import MetadataCache
from broker.metadata.metadata_version import METADATA_VERSION_FEATURE, supported_levels
from broker.replica_fetcher_manager import FetcherSettings, ReplicaFetcher
from broker.replica_fetcher_requests import FETCH_VERSIONS, LIST_OFFSETS_VERSIONS, FetchSettings, fetch_request, follower_versions, list_offsets_request
from protocol.fetch_request import read_fetch_request
from replication.fetch_session_handler import FetchMetadata, FetchRequestData, PartitionData

# Kafka 4.4's thresholds, read from MetadataVersion's bytecode: (first level name, version), newest first.
KAFKA_FETCH = (("4.1-IV1", 18), ("3.9-IV0", 17), ("3.7-IV4", 16), ("3.5-IV1", 15), ("3.5-IV0", 14))
KAFKA_FETCH_OLDEST = 13
KAFKA_LIST_OFFSETS = (("4.2-IV1", 11), ("4.0-IV3", 10), ("3.9-IV0", 9), ("3.5-IV0", 8))
KAFKA_LIST_OFFSETS_OLDEST = 7


def kafka_version(level: int, thresholds: tuple[tuple[str, int], ...], oldest: int) -> int:
    level_of = {mv.name: mv.level for mv in supported_levels(unstable=True)}
    return next((v for name, v in thresholds if level >= level_of[name]), oldest)


@pytest.mark.parametrize("mv", supported_levels(unstable=True), ids=lambda mv: mv.name)
def test_versions_per_level_are_kafkas(mv: Any) -> None:
    versions = follower_versions(mv.level)
    assert versions.fetch == kafka_version(mv.level, KAFKA_FETCH, KAFKA_FETCH_OLDEST)
    assert versions.list_offsets == kafka_version(mv.level, KAFKA_LIST_OFFSETS, KAFKA_LIST_OFFSETS_OLDEST)
    assert versions.offset_for_leader_epoch == 4


def test_named_levels() -> None:
    by_name = {mv.name: mv.level for mv in supported_levels(unstable=True)}
    got = {name: (follower_versions(by_name[name]).fetch, follower_versions(by_name[name]).list_offsets) for name in ("3.3-IV3", "3.9-IV0", "4.0-IV3", "4.1-IV1", "4.2-IV1", "4.4-IV2")}
    assert got == {"3.3-IV3": (13, 7), "3.9-IV0": (17, 9), "4.0-IV3": (17, 10), "4.1-IV1": (18, 10), "4.2-IV1": (18, 11), "4.4-IV2": (18, 11)}
    # No level finalized yet reads as the oldest KRaft level; one past this build's newest as the newest.
    assert (follower_versions(None).fetch, follower_versions(None).list_offsets) == (13, 7)
    assert (follower_versions(99).fetch, follower_versions(99).list_offsets) == (18, 11)


def encode(request: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(request))(out, request)
    return out.getvalue()


TOPIC_ID = uuid.uuid4()
DATA = FetchRequestData(
    to_send={("t", 3): PartitionData(TOPIC_ID, 120, 5, 1 << 20, 7, 6)},
    to_forget=[(TOPIC_ID, ("t", 4))],
    session_partitions={},
    metadata=FetchMetadata(42, 3),
)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_request_reads_back_on_the_leader(version: int) -> None:
    request = fetch_request(version, FetchSettings(2, 500, 1, 10 << 20), 77, DATA)
    assert request.__version__ == version
    got = read_fetch_request(bytearray(encode(request)), 0, version)
    # v13/v14 carry no broker epoch (ReplicaState is v15+).
    assert (got.replica_id, got.replica_epoch) == (2, 77 if version >= 15 else -1)
    assert (got.max_wait_ms, got.min_bytes, got.max_bytes, got.session_id, got.session_epoch) == (500, 1, 10 << 20, 42, 3)
    (topic,) = got.topics
    (p,) = topic.partitions
    assert topic.topic_id == TOPIC_ID
    assert (p.partition, p.fetch_offset, p.log_start_offset, p.partition_max_bytes, p.current_leader_epoch, p.last_fetched_epoch) == (3, 120, 5, 1 << 20, 7, 6)
    assert [(f.topic_id, f.partitions) for f in got.forgotten_topics_data] == [(TOPIC_ID, (4,))]


def test_fetch_v18_is_v17_on_the_wire() -> None:
    """v18's only new field, the tagged HighWatermark (KIP-1166), stays at its default as Kafka's
    replica fetcher leaves it, so nothing but the header's version tells the two apart."""
    settings = FetchSettings(2, 500, 1, 10 << 20)
    v18 = fetch_request(18, settings, 77, DATA)
    assert all(p.high_watermark == (1 << 63) - 1 for t in v18.topics for p in t.partitions)
    assert encode(v18) == encode(fetch_request(17, settings, 77, DATA))


@pytest.mark.parametrize("version", LIST_OFFSETS_VERSIONS)
def test_list_offsets_request(version: int) -> None:
    request = list_offsets_request(version, 2, "t", 3, 7, -2)
    assert request.__version__ == version
    got, _ = entity_reader(type(request))(encode(request), 0)
    assert (got.replica_id, got.topics[0].name, got.topics[0].partitions[0].timestamp, got.topics[0].partitions[0].current_leader_epoch) == (2, "t", -2, 7)
    if version >= 10:
        assert got.timeout.total_seconds() == 0  # Kafka's follower leaves TimeoutMs at 0


def test_the_fetcher_follows_a_metadata_version_change() -> None:
    """The version is looked up for every request: an upgrade takes effect at the next fetch."""
    settings = FetcherSettings(2, "PLAINTEXT", 1, 1 << 20, 10 << 20, 500, 1, 1000, 30000)
    metadata = SimpleNamespace(image=SimpleNamespace(features={METADATA_VERSION_FEATURE: 25}))

    async def run() -> list[int]:
        fetcher = ReplicaFetcher(1, 0, settings, cast(MetadataCache, metadata), lambda: 77)
        seen = [fetcher._request(DATA).__version__, fetcher._versions().list_offsets]
        metadata.image = SimpleNamespace(features={METADATA_VERSION_FEATURE: 33})
        seen += [fetcher._request(DATA).__version__, fetcher._versions().list_offsets]
        await fetcher.shutdown()
        return seen

    assert asyncio.run(run()) == [17, 10, 18, 11]
