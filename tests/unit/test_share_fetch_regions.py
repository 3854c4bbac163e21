"""ShareFetch's zero-copy read path on real files: a log read's regions cut to whole batches with
only their headers read, the acquired batches answered as sub-regions of them (not bytes), and
a kio answer framed around those regions byte for byte as kio would encode it with the bytes."""

from __future__ import annotations

import asyncio
import datetime
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.handlers.share_fetch import _whole_batches
from broker.share.acquired_records import AcquiredRecords
from broker.share.share_partition_manager import LeaderState, LogRead, ShareFetchParams, SharePartitionManager
from broker.share.share_session_cache import TopicIdPartition
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested
from protocol.fetch_response import SplicedRecords, encode_response_chunks
from protocol.messages import encode_response
from protocol.record_batch import iter_headers
from protocol.records import CompressionType, build_batch
from storage.fetch_data_info import FileRegion
from tests.unit.test_share_partition_manager import EARLIEST, FakePersister

TIP = TopicIdPartition(uuid.uuid4(), 0)


def batch(base: int, count: int, compression: int = CompressionType.NONE) -> bytes:
    return build_batch([(None, b"v%d" % (base + i), (), 0) for i in range(count)], base_offset=base, compression=compression)


@pytest.fixture
def segment(tmp_path: Path) -> Iterator[tuple[int, list[bytes]]]:
    """An open segment file of three 3-record batches (the middle one compressed)."""
    batches = [batch(0, 3), batch(3, 3, CompressionType.LZ4), batch(6, 3)]
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(batches))
    fd = os.open(path, os.O_RDONLY)
    try:
        yield fd, batches
    finally:
        os.close(fd)


def test_a_read_is_cut_after_its_last_whole_batch_from_the_headers_alone(segment: tuple[int, list[bytes]]) -> None:
    fd, batches = segment
    a, b, c = map(len, batches)
    read = _whole_batches([FileRegion(fd, 0, a + b + c // 2)], ())
    assert read.chunks == (FileRegion(fd, 0, a + b),)
    assert [(x.base_offset, x.last_offset) for x in read.batches] == [(0, 2), (3, 5)]
    assert read.batch_ends == (a, a + b) and read.size == a + b
    # The dead-letter queue reads the originals' bytes.
    assert read.records == batches[0] + batches[1]
    # A region whose first batch is cut ends the read there.
    assert _whole_batches([FileRegion(fd, 0, a), FileRegion(fd, a, b - 1), FileRegion(fd, a + b, c)], ()).chunks == (FileRegion(fd, 0, a),)


class FileLog:
    """A leader's log of one segment file, read as ReplicaManagerLogReader reads the real one."""

    def __init__(self, fd: int, batches: list[bytes]) -> None:
        self.fd, self.batches = fd, batches

    def leader_state(self, topic: str, partition: int) -> LeaderState | None:
        return LeaderState(0, 0, 9)

    def read(self, topic: str, partition: int, fetch_offset: int, max_bytes: int, read_committed: bool) -> LogRead:
        position = 0
        for b in self.batches:
            if next(iter_headers(b)).last_offset >= fetch_offset:
                break
            position += len(b)
        # Cut in two after the first batch, as a read across two segments is handed over.
        total, split = sum(map(len, self.batches)), len(self.batches[0])
        if position >= split:
            return _whole_batches([FileRegion(self.fd, position, total - position)], ())
        return _whole_batches([FileRegion(self.fd, position, split - position), FileRegion(self.fd, split, total - split)], ())


def test_the_acquired_batches_are_answered_as_regions_of_the_read(segment: tuple[int, list[bytes]]) -> None:
    fd, batches = segment
    a, b, c = map(len, batches)

    async def body() -> None:
        m = SharePartitionManager(1, FileLog(fd, batches), FakePersister(), lambda group_id: EARLIEST)
        first = (await m.fetch("g", "a", [(TIP, "t")], ShareFetchParams(0, 1, 1 << 20, max_records=4)))[TIP]
        assert first.acquired == (AcquiredRecords(0, 5, 1),)
        assert first.records == (FileRegion(fd, 0, a), FileRegion(fd, a, b))
        second = (await m.fetch("g", "b", [(TIP, "t")], ShareFetchParams(0, 1, 1 << 20, max_records=500)))[TIP]
        assert second.acquired == (AcquiredRecords(6, 8, 1),)
        assert second.records == (FileRegion(fd, a + b, c),)
        await m.shutdown()

    asyncio.run(asyncio.wait_for(body(), 10))


@pytest.mark.parametrize("version", [1, 2])
def test_a_share_fetch_answer_frames_regions_as_kio_frames_their_bytes(segment: tuple[int, list[bytes]], version: int) -> None:
    fd, batches = segment
    a, b, _ = map(len, batches)
    schema = response_schema(ApiKey.SHARE_FETCH, version)

    def answer(records: object) -> object:
        partition = build(
            nested(schema, "PartitionData"),
            partition_index=0,
            error_code=0,
            error_message=None,
            acknowledge_error_code=0,
            acknowledge_error_message=None,
            current_leader=build(nested(schema, "LeaderIdAndEpoch"), leader_id=-1, leader_epoch=-1),
            records=records,
            acquired_records=(build(nested(schema, "AcquiredRecords"), first_offset=1, last_offset=4, delivery_count=1),),
        )
        empty = build(nested(schema, "PartitionData"), partition_index=1, error_code=0, error_message=None, acknowledge_error_code=0, acknowledge_error_message=None,
                      current_leader=build(nested(schema, "LeaderIdAndEpoch"), leader_id=-1, leader_epoch=-1), records=SplicedRecords(()) if isinstance(records, SplicedRecords) else b"", acquired_records=())
        topic = build(nested(schema, "ShareFetchableTopicResponse"), topic_id=TIP.topic_id, partitions=(partition, empty))
        return build(schema, throttle_time=0, error_code=0, error_message=None, acquisition_lock_timeout=datetime.timedelta(seconds=30), responses=(topic,), node_endpoints=())

    chunks = encode_response_chunks(ApiKey.SHARE_FETCH, version, 7, answer(SplicedRecords((FileRegion(fd, 0, a), b"", FileRegion(fd, a, b)))))
    assert sum(1 for c in chunks if isinstance(c, FileRegion)) == 2
    sent = b"".join(c if isinstance(c, (bytes, bytearray)) else os.pread(c.fd, c.length, c.position) for c in chunks)
    assert sent == encode_response(ApiKey.SHARE_FETCH, version, 7, answer(batches[0] + batches[1]))
