"""FetchHandler without sockets: whole batches only, answered at once when data waits, long-poll otherwise."""

from __future__ import annotations

import asyncio
import datetime
import os
import time
from pathlib import Path
from typing import Any, cast

import pytest
from kio.schema.fetch.v12.request import FetchPartition, FetchTopic
from kio.schema.fetch.v12.request import FetchRequest as KioFetchRequest
from kio.schema.types import BrokerId, TopicName
from kio.serial import entity_reader
from kio.static.primitive import i8, i32, i32Timedelta, i64

from broker.fetch_session import FetchSessionCache
from broker.handlers.fetch import FetchHandler
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.network import ClientInfo, TransferMetrics
from tests.unit.partitions import sole_leader
from broker.partition import Partition
from broker.replica_manager import ReplicaManager
from protocol.api_keys import response_schema
from protocol.fetch_request import FetchRequest, read_fetch_request
from protocol.fetch_response import Chunk
from protocol.headers import RequestHeader
from protocol.record_batch import iter_headers
from broker.metadata.metadata_image import MetadataImage
from storage.fetch_data_info import FileRegion
from storage.unified_log import UnifiedLog
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.log_segment import whole_batches
from tests.unit.batch_factory import FakeClock, make_batch
from tests.unit.body_cases import encode

VERSION = 12
TOPIC = "t"


def open_log(directory: Path) -> UnifiedLog:
    return UnifiedLog.open(
        directory,
        LogConfig.from_properties({}),
        topic_id=None,
        recovery_point=0,
        log_start_offset=0,
        had_clean_shutdown=True,
        now_ms=FakeClock(),
    )


def append(plog: UnifiedLog, partition: Partition, payload_size: int, records: int = 1) -> int:
    """Append one batch as the leader; returns its size on disk."""
    batch = make_batch([b"x" * payload_size] * records)
    partition.append_records_to_leader(memoryview(batch))
    return len(batch)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[FetchHandler, ReplicaManager, dict[int, Partition]]:
    # The read path never touches the log manager: the partitions are placed by hand.
    rm = ReplicaManager(1, cast(LogManager, None), dict)
    partitions = {}
    for index in (0, 1):
        partition = sole_leader(TOPIC, index, open_log(tmp_path / f"{TOPIC}-{index}"))
        rm.partitions[(TOPIC, index)] = partition
        partitions[index] = partition
    metadata = MetadataCache(
        1, "cluster", BrokerEndpoint(1, "127.0.0.1", 9092), MetadataImage()
    )
    handler = FetchHandler(
        rm, metadata, FetchSessionCache(10), TransferMetrics(), 50 * 1024 * 1024
    )
    return handler, rm, partitions


def fetch_v12(
    partition_max_bytes: int,
    *,
    partitions: tuple[int, ...] = (0,),
    max_bytes: int = 50 * 1024 * 1024,
    min_bytes: int = 1,
    max_wait_ms: int = 500,
    topic: str = TOPIC,
) -> KioFetchRequest:
    """A librdkafka-like Fetch v12: no fetch session, every partition from offset 0."""
    return KioFetchRequest(
        cluster_id=None,
        replica_id=BrokerId(-1),
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)),
        min_bytes=i32(min_bytes),
        max_bytes=i32(max_bytes),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(
            FetchTopic(
                topic=TopicName(topic),
                partitions=tuple(
                    FetchPartition(
                        partition=i32(i),
                        current_leader_epoch=i32(-1),
                        fetch_offset=i64(0),
                        last_fetched_epoch=i32(-1),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(partition_max_bytes),
                    )
                    for i in partitions
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )


def request(partition_max_bytes: int, **kwargs: Any) -> FetchRequest:
    """``fetch_v12`` as the broker reads it off the wire."""
    return read_fetch_request(encode(fetch_v12(partition_max_bytes, **kwargs)), 0, VERSION)


def context() -> RequestContext:
    return RequestContext(
        RequestHeader(1, VERSION, 7, "test", 0), ClientInfo("c", "test", "127.0.0.1")
    )


def decode(chunks: list[Chunk]) -> Any:
    """The response as a client reads it: regions spliced in from their files, then kio."""
    wire = b"".join(
        os.pread(c.fd, c.length, c.position)
        if isinstance(c, FileRegion)
        else bytes(cast(bytes, c))
        for c in chunks
    )
    assert int.from_bytes(wire[:4], "big") == len(wire) - 4
    body_at = 4 + 4 + 1  # size, correlation id, header tagged fields
    response, _ = entity_reader(response_schema(1, VERSION))(memoryview(wire), body_at)
    return response


def record_bytes(response: Any) -> dict[int, bytes]:
    return {
        p.partition_index: bytes(p.records or b"")
        for t in response.responses
        for p in t.partitions
    }


def test_data_waiting_is_answered_without_a_coroutine(
    setup: tuple[FetchHandler, ReplicaManager, dict[int, Partition]],
) -> None:
    handler, _, partitions = setup
    size = append(partitions[0].log, partitions[0], 100)
    chunks = handler(context(), request(1024 * 1024))
    assert isinstance(chunks, list)
    # The frame size rides with the header: header, region, trailing tagged fields.
    assert [type(c) for c in chunks] == [bytearray, FileRegion, bytearray]
    assert len(record_bytes(decode(chunks))[0]) == size


def test_a_cut_last_batch_is_left_out(
    setup: tuple[FetchHandler, ReplicaManager, dict[int, Partition]],
) -> None:
    handler, _, partitions = setup
    first = append(partitions[0].log, partitions[0], 300)
    second = append(partitions[0].log, partitions[0], 300)
    chunks = handler(context(), request(first + second // 2))
    assert isinstance(chunks, list)
    records = record_bytes(decode(chunks))[0]
    assert [h.size for h in iter_headers(records)] == [first] and len(records) == first


def test_a_cut_first_batch_after_others_is_no_records(
    setup: tuple[FetchHandler, ReplicaManager, dict[int, Partition]],
) -> None:
    """KIP-74: only the response's first batch may exceed the limits; a later cut one is left out (Kafka's firstEntryIncomplete)."""
    handler, _, partitions = setup
    first = append(partitions[0].log, partitions[0], 200)
    append(partitions[1].log, partitions[1], 2000)
    chunks = handler(
        context(), request(1024 * 1024, partitions=(0, 1), max_bytes=first + 500)
    )
    assert isinstance(chunks, list)
    records = record_bytes(decode(chunks))
    assert len(records[0]) == first and records[1] == b""


def test_the_first_batch_goes_out_whole_over_the_limits(
    setup: tuple[FetchHandler, ReplicaManager, dict[int, Partition]],
) -> None:
    handler, _, partitions = setup
    size = append(partitions[0].log, partitions[0], 5000)
    append(partitions[0].log, partitions[0], 10)
    chunks = handler(context(), request(100))
    assert isinstance(chunks, list)
    assert len(record_bytes(decode(chunks))[0]) == size


def test_min_bytes_unmet_long_polls_until_an_append(
    setup: tuple[FetchHandler, ReplicaManager, dict[int, Partition]],
) -> None:
    handler, rm, partitions = setup

    async def scenario() -> list[Chunk]:
        pending = handler(context(), request(1024 * 1024, max_wait_ms=10_000))
        assert not isinstance(pending, list)
        task = asyncio.ensure_future(pending)
        await asyncio.sleep(0.01)
        assert not task.done()
        append(partitions[0].log, partitions[0], 50)
        rm.fetch_purgatory.touch((TOPIC, 0))
        return await asyncio.wait_for(task, 5)

    records = record_bytes(decode(asyncio.run(scenario())))
    assert len(records[0]) > 0


def test_min_bytes_unmet_answers_empty_at_the_deadline(
    setup: tuple[FetchHandler, ReplicaManager, dict[int, Partition]],
) -> None:
    handler, _, _ = setup
    pending = handler(context(), request(1024 * 1024, max_wait_ms=20))
    assert not isinstance(pending, list)

    async def scenario() -> list[Chunk]:
        return await pending

    assert record_bytes(decode(asyncio.run(scenario())))[0] == b""


def test_a_deadline_passed_before_the_long_poll_runs_answers_empty(
    setup: tuple[FetchHandler, ReplicaManager, dict[int, Partition]],
) -> None:
    handler, _, _ = setup
    pending = handler(context(), request(1024 * 1024, max_wait_ms=1))
    assert not isinstance(pending, list)
    time.sleep(0.01)  # a busy event loop starts the coroutine after its deadline

    async def scenario() -> list[Chunk]:
        return await pending

    assert record_bytes(decode(asyncio.run(scenario())))[0] == b""


# -- whole_batches ----------------------------------------------------------------------------------


def test_whole_batches_trims_to_the_last_boundary(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "w-0")
    sizes = []
    for _ in range(3):
        batch = make_batch([b"y" * 100])
        plog.append_as_leader(memoryview(batch), 0)
        sizes.append(len(batch))
    fd = plog.active_segment.fd
    full = FileRegion(fd, 0, sum(sizes))
    assert whole_batches(full, 10) is full
    assert whole_batches(FileRegion(fd, 0, sum(sizes) - 1), 10) == FileRegion(
        fd, 0, sizes[0] + sizes[1]
    )
    assert whole_batches(FileRegion(fd, sizes[0], sizes[1] + 5), 10) == FileRegion(
        fd, sizes[0], sizes[1]
    )
    assert whole_batches(FileRegion(fd, 0, sizes[0] - 1), 10).length == 0
    assert (
        whole_batches(FileRegion(fd, 0, 5), 10).length == 0
    )  # not even a batch length
    # More whole batches than the scan allows: left as read, cut tail and all.
    cut = FileRegion(fd, 0, sum(sizes) - 1)
    assert whole_batches(cut, 2) is cut
    plog.close()
