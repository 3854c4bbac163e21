"""FetchHandler serving a follower: incremental sessions read what the session remembers, and a
throttled out-of-sync follower gets no records while the leader's quota is exceeded."""

from __future__ import annotations

import datetime
import uuid
from pathlib import Path
from typing import Any, cast

import pytest
from kio.schema.fetch.v12.request import FetchPartition, FetchTopic
from kio.schema.fetch.v12.request import FetchRequest as KioFetchRequest
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from broker.fetch_session import FetchSessionCache
from broker.handlers.fetch import FetchHandler
from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.metadata.metadata_image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage, PartitionRegistration
from broker.network import TransferMetrics
from broker.partition import Partition, ReplicationSettings
from broker.replica_manager import ReplicaManager
from broker.replication_quota_manager import ReplicationQuotaManager
from protocol.fetch_request import read_fetch_request
from storage.log_manager import LogManager
from tests.unit.body_cases import encode
from tests.unit.test_fetch_handler import VERSION, append, context, decode, open_log, record_bytes

TOPIC = "t"
FOLLOWER = 2


def follower_fetch(partitions: dict[int, int], session_id: int = 0, epoch: int = 0) -> Any:
    """Fetch v12 from broker 2 naming ``partitions`` (index: fetch offset), without waiting."""
    body = KioFetchRequest(
        cluster_id=None,
        replica_id=BrokerId(FOLLOWER),
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=0)),
        min_bytes=i32(1),
        max_bytes=i32(50 << 20),
        isolation_level=i8(0),
        session_id=i32(session_id),
        session_epoch=i32(epoch),
        topics=(
            FetchTopic(
                topic=TopicName(TOPIC),
                partitions=tuple(
                    FetchPartition(
                        partition=i32(i),
                        current_leader_epoch=i32(0),
                        fetch_offset=i64(offset),
                        last_fetched_epoch=i32(-1),
                        log_start_offset=i64(0),
                        partition_max_bytes=i32(1 << 20),
                    )
                    for i, offset in partitions.items()
                ),
            ),
        )
        if partitions
        else (),
        forgotten_topics_data=(),
        rack_id="",
    )
    return read_fetch_request(encode(body), 0, VERSION)


def leader_of(tmp_path: Path, index: int, isr: tuple[int, ...]) -> Partition:
    settings = ReplicationSettings(1, 30000, lambda: 1, lambda _broker: True)
    partition = Partition(TOPIC, index, uuid.uuid4(), open_log(tmp_path / f"{TOPIC}-{index}"), settings)
    partition.make_leader(PartitionRegistration(replicas=(1, FOLLOWER), isr=isr, leader=1, leader_epoch=0, partition_epoch=0), 0)
    return partition


def handler_for(rm: ReplicaManager, image: MetadataImage) -> tuple[FetchHandler, ReplicationQuotaManager]:
    metadata = MetadataCache(1, "cluster", BrokerEndpoint(1, "127.0.0.1", 9092), image)
    quota = ReplicationQuotaManager.leader(metadata)
    return FetchHandler(rm, metadata, FetchSessionCache(10), TransferMetrics(), 50 << 20, quota), quota


@pytest.fixture
def rm() -> ReplicaManager:
    return ReplicaManager(1, cast(LogManager, None), dict)


def answer(handler: FetchHandler, request: Any) -> Any:
    chunks = handler(context(), request)
    assert isinstance(chunks, list)
    return decode(chunks)


def test_incremental_follower_fetch_reads_unnamed_partitions_from_the_session(tmp_path: Path, rm: ReplicaManager) -> None:
    for index in (0, 1):
        rm.partitions[(TOPIC, index)] = leader_of(tmp_path, index, (1, FOLLOWER))
    handler, _ = handler_for(rm, MetadataImage())
    full = answer(handler, follower_fetch({0: 0, 1: 0}))
    assert full.session_id != 0
    size = append(rm.partitions[(TOPIC, 1)].log, rm.partitions[(TOPIC, 1)], 100)
    # Nothing named: the session's offsets (0 for both) are read, and only partition 1 has news.
    incremental = answer(handler, follower_fetch({}, full.session_id, 1))
    assert {p.partition_index for t in incremental.responses for p in t.partitions} == {1}
    assert len(record_bytes(incremental)[1]) == size
    # The follower moved on: named with its new offset, it gets nothing again, then nothing at all.
    again = answer(handler, follower_fetch({1: 1}, full.session_id, 2))
    assert record_bytes(again).get(1, b"") == b""
    assert answer(handler, follower_fetch({}, full.session_id, 3)).responses == ()


def test_a_throttled_follower_outside_the_isr_gets_no_records_over_quota(tmp_path: Path, rm: ReplicaManager) -> None:
    partition = rm.partitions[(TOPIC, 0)] = leader_of(tmp_path, 0, (1,))
    image = MetadataImage(
        configs={(BROKER_RESOURCE, "1"): {"leader.replication.throttled.rate": "1000"}, (TOPIC_RESOURCE, TOPIC): {"leader.replication.throttled.replicas": "0:1"}}
    )
    handler, quota = handler_for(rm, image)
    size = append(partition.log, partition, 5000)
    # Under quota the first fetch gets its records, and they count against the quota.
    assert len(record_bytes(answer(handler, follower_fetch({0: 0})))[0]) == size
    assert quota.is_quota_exceeded()
    held = answer(handler, follower_fetch({0: 0}))
    [part] = [p for t in held.responses for p in t.partitions]
    # The answer still carries the offsets: only the records stay behind.
    assert part.error_code == 0 and bytes(part.records or b"") == b"" and part.high_watermark == 1
    # In the ISR the same follower is not held back.
    partition.isr = (1, FOLLOWER)
    assert len(record_bytes(answer(handler, follower_fetch({0: 0})))[0]) == size
