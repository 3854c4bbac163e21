"""The Raft leader's BatchAccumulator writes batches Kafka 4.4 can read: every record of a batch has
the batch's timestamp (a timestamp delta of 0), the time the batch was started, as Kafka's
BatchBuilder writes them. Kafka's RecordsIterator refuses any other delta ("Got timestamp delta of
878, but this is invalid because it is not 0 as expected") and a Kafka node given a metadata log
kbroker wrote would not start (tests/integration/test_kafka_dir_takeover.py found it)."""

from __future__ import annotations

from protocol.records import iter_batches, iter_records
from raft.batch_accumulator import BatchAccumulator


class BytesSerde:
    def encode(self, record: bytes) -> bytes:
        return record

    def decode(self, value: bytes) -> bytes:
        return value


def test_records_appended_at_different_times_share_the_batchs_start_time() -> None:
    accumulator = BatchAccumulator(epoch=3, base_offset=10, linger_ms=25, max_batch_size=8192, serde=BytesSerde())
    accumulator.append([b"a"], now_ms=1_000)
    accumulator.append([b"b", b"c"], now_ms=1_878)  # a busy loop drained late: one batch still
    [batch] = accumulator.drain(now_ms=1_900)
    [(header, data)] = list(iter_batches(batch.data))
    assert (header.base_offset, header.max_timestamp) == (10, 1_000)
    assert [(r.offset, r.timestamp, r.value) for r in iter_records(data, header)] == [(10, 1_000, b"a"), (11, 1_000, b"b"), (12, 1_000, b"c")]
    accumulator.append([b"d"], now_ms=2_000)
    [batch] = accumulator.drain(now_ms=2_000, force=True)
    [(header, _)] = list(iter_batches(batch.data))
    assert (header.base_offset, header.max_timestamp) == (13, 2_000)  # the next batch its own start
